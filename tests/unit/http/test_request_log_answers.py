"""The request-log writer's answers of GETs (http/request_log_writer.py, `_Answers`): a GET
that answers as an earlier one did is kept as that one was, redacted by the same rule, and
the answers it holds stay bounded."""

from __future__ import annotations

from datetime import UTC, datetime

from bankrail.http.request_log_writer import Entry, _Answers, _response

ANSWER = b'{"id": "p-1", "status": "settled", "user": {"name": "Ada Lovelace"}}'


def _get(answer: bytes, status: int = 200, method: str = "GET") -> Entry:
    return Entry(
        merchant_id=bytes(16),
        client_id="client",
        created_at=datetime.now(UTC),
        method=method,
        path="/v3/payments/p-1",
        status=status,
        duration_ms=1.0,
        replayed=False,
        request_headers=[(b"authorization", b"Bearer secret")],
        request_body=b"",
        response_headers=[(b"content-type", b"application/json")],
        response_body=answer,
    )


def test_a_get_answered_alike_is_kept_as_the_first_was_and_redacted() -> None:
    answers = _Answers()
    first = answers.response(_get(ANSWER))
    assert first["body"] == {"id": "p-1", "status": "settled", "user": {"name": "[masked]"}}
    assert answers.response(_get(ANSWER)) is first
    # Another answer, or the same body under another status, is redacted on its own.
    assert answers.response(_get(ANSWER.replace(b"settled", b"failed")))["body"]["status"] == (
        "failed"
    )
    assert answers.response(_get(ANSWER, status=404)) is not first
    assert answers.response(_get(ANSWER, status=404)) == _response(_get(ANSWER, status=404))


def test_only_gets_are_held_and_never_more_than_the_bounds() -> None:
    answers = _Answers(most=3, most_bytes=10 * len(ANSWER))
    answers.response(_get(ANSWER, method="POST"))
    assert len(answers._kept) == 0
    for n in range(7):
        answers.response(_get(ANSWER.replace(b"p-1", f"p-{n}".encode())))
        assert 1 <= len(answers._kept) <= 3
    small = _Answers(most=100, most_bytes=2 * len(ANSWER))
    for n in range(7):
        small.response(_get(ANSWER.replace(b"p-1", f"p-{n}".encode())))
        assert small._held_bytes <= 2 * len(ANSWER)


def test_headers_that_do_not_hash_are_redacted_anew_not_refused() -> None:
    seen = _get(ANSWER)._replace(response_headers=[[b"content-type", b"application/json"]])
    answers = _Answers()
    assert answers.response(seen) == _response(seen)
    assert len(answers._kept) == 0
