"""Unit tests for the pure parts of bankrail.security.idempotency (docs/api.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bankrail.core.problems import CONFLICT, IDEMPOTENCY_CONCURRENCY, ProblemError
from bankrail.security.idempotency import Decision, StoredAnswer, claim, decide, fingerprint

TTL = timedelta(hours=6)
CREATED = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
BODY = b'{"amount_in_minor":100,"currency":"GBP"}'


# --- fingerprint ------------------------------------------------------------------------------


def test_fingerprint_is_deterministic() -> None:
    assert fingerprint("POST", "/v3/payments", BODY) == fingerprint("POST", "/v3/payments", BODY)


def test_fingerprint_is_a_sha256_digest() -> None:
    assert len(fingerprint("POST", "/v3/payments", BODY)) == 32


def test_fingerprint_depends_on_the_method() -> None:
    assert fingerprint("POST", "/v3/payments", BODY) != fingerprint("PUT", "/v3/payments", BODY)


def test_fingerprint_ignores_method_case() -> None:
    assert fingerprint("post", "/v3/payments", BODY) == fingerprint("POST", "/v3/payments", BODY)


def test_fingerprint_depends_on_the_path() -> None:
    assert fingerprint("POST", "/v3/payments", BODY) != fingerprint("POST", "/v3/payouts", BODY)


def test_fingerprint_ignores_a_trailing_slash() -> None:
    assert fingerprint("POST", "/v3/payments/", BODY) == fingerprint("POST", "/v3/payments", BODY)


@pytest.mark.parametrize(
    "other",
    [
        b'{"amount_in_minor":101,"currency":"GBP"}',
        b'{"currency":"GBP","amount_in_minor":100}',  # same JSON, other bytes
        b'{"amount_in_minor":100,"currency":"GBP"} ',
        b"",
    ],
)
def test_fingerprint_depends_on_every_byte_of_the_body(other: bytes) -> None:
    assert fingerprint("POST", "/v3/payments", BODY) != fingerprint("POST", "/v3/payments", other)


def test_fingerprint_does_not_confuse_path_and_body_boundaries() -> None:
    assert fingerprint("POST", "/a", b"b") != fingerprint("POST", "/ab", b"")


# --- decide -----------------------------------------------------------------------------------


def _stored(fp: bytes) -> StoredAnswer:
    return StoredAnswer(fingerprint=fp, status_code=201, body=b'{"id":"x"}', created_at=CREATED)


FP = fingerprint("POST", "/v3/payments", BODY)
OTHER_FP = fingerprint("POST", "/v3/payments", b"{}")


def test_unknown_key_proceeds() -> None:
    assert decide(None, FP, CREATED, TTL) is Decision.PROCEED


def test_same_fingerprint_within_ttl_replays() -> None:
    assert decide(_stored(FP), FP, CREATED, TTL) is Decision.REPLAY
    assert decide(_stored(FP), FP, CREATED + timedelta(hours=1), TTL) is Decision.REPLAY


def test_other_fingerprint_within_ttl_is_reuse() -> None:
    assert decide(_stored(FP), OTHER_FP, CREATED + timedelta(minutes=5), TTL) is Decision.REUSE


def test_just_before_six_hours_the_answer_is_still_valid() -> None:
    just_before = CREATED + TTL - timedelta(microseconds=1)
    assert decide(_stored(FP), FP, just_before, TTL) is Decision.REPLAY
    assert decide(_stored(FP), OTHER_FP, just_before, TTL) is Decision.REUSE


def test_at_exactly_six_hours_the_key_is_free_again() -> None:
    at_expiry = CREATED + TTL
    assert decide(_stored(FP), FP, at_expiry, TTL) is Decision.PROCEED
    assert decide(_stored(FP), OTHER_FP, at_expiry, TTL) is Decision.PROCEED


def test_long_after_the_ttl_the_key_is_free() -> None:
    assert decide(_stored(FP), OTHER_FP, CREATED + timedelta(days=3), TTL) is Decision.PROCEED


def test_decide_uses_the_ttl_it_is_given() -> None:
    short = timedelta(minutes=10)
    assert decide(_stored(FP), FP, CREATED + timedelta(minutes=9), short) is Decision.REPLAY
    assert decide(_stored(FP), FP, CREATED + timedelta(minutes=10), short) is Decision.PROCEED


# --- claim: a signature accepted once -----------------------------------------------------------


def test_a_used_signature_within_the_keys_validity_replays_the_answer() -> None:
    stored = _stored(FP)
    answer = claim(True, stored, FP, CREATED + TTL / 2, TTL, signature_used=True)
    assert answer == (stored.status_code, stored.body)


def test_a_used_signature_after_the_keys_validity_is_a_409_that_says_so() -> None:
    for stored in (_stored(FP), None):  # the answer expired, or was deleted
        refused = claim(True, stored, FP, CREATED + TTL, TTL, signature_used=True)
        assert isinstance(refused, ProblemError)
        assert refused.problem is CONFLICT
        assert "already used" in refused.detail
        assert "signature" in refused.detail


def test_an_unused_signature_after_the_keys_validity_runs() -> None:
    assert claim(True, _stored(FP), FP, CREATED + TTL, TTL, signature_used=False) is None


def test_a_key_in_flight_is_in_flight_whatever_its_signature() -> None:
    refused = claim(False, None, FP, CREATED, TTL, signature_used=True)
    assert isinstance(refused, ProblemError)
    assert refused.problem is IDEMPOTENCY_CONCURRENCY
