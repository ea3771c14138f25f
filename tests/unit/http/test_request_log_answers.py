"""The request-log writer's documents (http/request_log_writer.py, `_Documents`): a GET that
answers as an earlier one did, and a request without a body sent with the same headers as an
earlier one, are kept as that one was, redacted by the same rule and encoded once; what it
remembers stays bounded."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from bankrail.db.pool import encode_jsonb
from bankrail.http.request_log_writer import Entry, _Documents, _request, _response

ANSWER = b'{"id": "p-1", "status": "settled", "user": {"name": "Ada Lovelace"}}'
TOKEN = [(b"authorization", b"Bearer secret"), (b"x-request-id", b"r-1")]


def _get(
    answer: bytes, status: int = 200, method: str = "GET", headers: list | None = None
) -> Entry:
    return Entry(
        merchant_id=bytes(16),
        client_id="client",
        created_at=datetime.now(UTC),
        method=method,
        path="/v3/payments/p-1",
        status=status,
        duration_ms=1.0,
        replayed=False,
        request_headers=list(TOKEN if headers is None else headers),
        request_body=b"",
        response_headers=[(b"content-type", b"application/json")],
        response_body=answer,
    )


def _decoded(document: bytes) -> object:
    assert document[:1] == b"\x01"  # jsonb's binary format: its version, then the text
    return orjson.loads(document[1:])


def test_a_get_answered_alike_is_kept_as_the_first_was_and_redacted() -> None:
    documents = _Documents()
    first, body = documents.response(_get(ANSWER))
    assert body == {"id": "p-1", "status": "settled", "user": {"name": "[masked]"}}
    assert _decoded(first) == {"headers": {"content-type": "application/json"}, "body": body}
    assert documents.response(_get(ANSWER))[0] is first
    # Another answer, or the same body under another status, is redacted on its own.
    assert documents.response(_get(ANSWER.replace(b"settled", b"failed")))[1]["status"] == (
        "failed"
    )
    assert documents.response(_get(ANSWER, status=404))[0] is not first
    assert documents.response(_get(ANSWER, status=404))[0] == encode_jsonb(
        _response(_get(ANSWER, status=404))
    )


def test_a_request_without_a_body_sent_alike_is_kept_as_the_first_was_and_redacted() -> None:
    documents = _Documents()
    first = documents.request(_get(ANSWER))
    assert _decoded(first) == {
        "headers": {"authorization": "[redacted]", "x-request-id": "r-1"},
        "body": None,
    }
    assert documents.request(_get(ANSWER.replace(b"p-1", b"p-2"))) is first
    # Other headers are redacted on their own; so is every request that sent a body.
    other = [(b"authorization", b"Bearer secret"), (b"x-request-id", b"r-2")]
    assert _decoded(documents.request(_get(ANSWER, headers=other)))["headers"] == {
        "authorization": "[redacted]",
        "x-request-id": "r-2",
    }
    sent = _get(ANSWER)._replace(method="POST", request_body=b'{"name": "Ada"}')
    assert _decoded(documents.request(sent)) == {
        "headers": {"authorization": "[redacted]", "x-request-id": "r-1"},
        "body": {"name": "[masked]"},
    }
    assert len(documents.requests.kept) == 2


def test_only_gets_are_held_and_never_more_than_the_bounds() -> None:
    documents = _Documents(most=3, most_bytes=10 * len(ANSWER))
    documents.response(_get(ANSWER, method="POST"))
    assert len(documents.answers.kept) == 0
    for n in range(7):
        documents.response(_get(ANSWER.replace(b"p-1", f"p-{n}".encode())))
        documents.request(_get(ANSWER, headers=[(b"x-request-id", f"r-{n}".encode())]))
        assert 1 <= len(documents.answers.kept) <= 3
        assert 1 <= len(documents.requests.kept) <= 3
    small = _Documents(most=100, most_bytes=2 * len(ANSWER))
    for n in range(7):
        small.response(_get(ANSWER.replace(b"p-1", f"p-{n}".encode())))
        assert small.answers.held_bytes <= 2 * len(ANSWER)
        small.request(_get(ANSWER, headers=[(b"x-request-id", b"r" * len(ANSWER) + bytes(n))]))
        assert small.requests.held_bytes <= 2 * len(ANSWER)


def test_headers_that_do_not_hash_are_redacted_anew_not_refused() -> None:
    seen = _get(ANSWER)._replace(
        response_headers=[[b"content-type", b"application/json"]],
        request_headers=[[b"authorization", b"Bearer secret"]],
    )
    documents = _Documents()
    assert documents.response(seen)[0] == encode_jsonb(_response(seen))
    assert documents.request(seen) == encode_jsonb(_request(seen))
    assert len(documents.answers.kept) == len(documents.requests.kept) == 0
