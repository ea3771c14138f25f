"""Unit tests for bankrail.security.tokens: access and resource JWTs judged by service time."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime, timedelta

import jwt
import pytest

from bankrail.security.tokens import (
    TokenError,
    TokenExpired,
    TokenIssuer,
    hash_secret,
    new_client_secret,
    secret_matches,
)

ACCESS_KEY = b"a" * 32
RESOURCE_KEY = b"r" * 32
# Whole seconds: JWT times are integral, so expiry is exact.
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
MERCHANT = uuid.UUID("0b5d4a8e-4f3e-4d0e-9a55-0f6c2b3f9e11")
PAYMENT = uuid.UUID("6f1c0d7e-2a61-4e0b-8c3a-1b2c3d4e5f60")


@pytest.fixture
def issuer() -> TokenIssuer:
    return TokenIssuer(ACCESS_KEY, RESOURCE_KEY)


def _access(issuer: TokenIssuer, scopes: frozenset[str] = frozenset({"payments"})) -> str:
    return issuer.issue_access_token("client-1", MERCHANT, scopes, NOW, HOUR)


def _tamper_payload(token: str, **changes: object) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"{header}.{forged}.{signature}"


# --- access tokens ----------------------------------------------------------------------------


def test_access_token_round_trip(issuer: TokenIssuer) -> None:
    token = _access(issuer, frozenset({"payments", "recurring_payments:sweeping"}))
    claims = issuer.read_access_token(token, NOW)
    assert claims.client_id == "client-1"
    assert claims.merchant_id == MERCHANT
    assert claims.scopes == frozenset({"payments", "recurring_payments:sweeping"})
    assert claims.audiences == frozenset({"payments", "recurring_payments:sweeping"})
    assert claims.expires_at == NOW + HOUR


def test_access_token_with_no_scopes(issuer: TokenIssuer) -> None:
    claims = issuer.read_access_token(_access(issuer, frozenset()), NOW)
    assert claims.scopes == frozenset()
    assert claims.audiences == frozenset()


def test_access_token_is_valid_until_just_before_expiry(issuer: TokenIssuer) -> None:
    token = _access(issuer)
    issuer.read_access_token(token, NOW + HOUR - timedelta(seconds=1))


@pytest.mark.parametrize("later", [HOUR, HOUR + timedelta(seconds=1), timedelta(days=2)])
def test_access_token_expires_by_the_service_clock(issuer: TokenIssuer, later: timedelta) -> None:
    token = _access(issuer)
    with pytest.raises(TokenError, match="expired"):
        issuer.read_access_token(token, NOW + later)


def test_expiry_is_judged_by_the_given_now_not_the_wall_clock(issuer: TokenIssuer) -> None:
    long_ago = datetime(2001, 1, 1, tzinfo=UTC)  # long expired by the wall clock
    token = issuer.issue_access_token("c", MERCHANT, frozenset({"payments"}), long_ago, HOUR)
    assert issuer.read_access_token(token, long_ago + timedelta(minutes=59)).client_id == "c"
    # And a token fresh by the wall clock is expired when the service clock is ahead.
    fresh = issuer.issue_access_token(
        "c", MERCHANT, frozenset({"payments"}), datetime.now(UTC), HOUR
    )
    with pytest.raises(TokenError, match="expired"):
        issuer.read_access_token(fresh, datetime.now(UTC) + timedelta(hours=2))


def test_forged_signature_is_rejected(issuer: TokenIssuer) -> None:
    token = _access(issuer)
    forged = _tamper_payload(token, scope="payments admin")
    with pytest.raises(TokenError, match="signature"):
        issuer.read_access_token(forged, NOW)


def test_token_signed_with_another_key_is_rejected(issuer: TokenIssuer) -> None:
    other = TokenIssuer(b"x" * 32, RESOURCE_KEY)
    with pytest.raises(TokenError):
        issuer.read_access_token(_access(other), NOW)


def test_token_with_alg_none_is_rejected(issuer: TokenIssuer) -> None:
    claims = jwt.decode(_access(issuer), options={"verify_signature": False})
    unsigned = jwt.encode(claims, key=None, algorithm="none")
    with pytest.raises(TokenError):
        issuer.read_access_token(unsigned, NOW)


@pytest.mark.parametrize("garbage", ["", "not-a-jwt", "a.b.c", "....."])
def test_garbage_is_rejected(issuer: TokenIssuer, garbage: str) -> None:
    with pytest.raises(TokenError):
        issuer.read_access_token(garbage, NOW)
    with pytest.raises(TokenError):
        issuer.read_resource_token(garbage, NOW)


# --- resource tokens and token kinds ----------------------------------------------------------


def test_resource_token_round_trip(issuer: TokenIssuer) -> None:
    token = issuer.issue_resource_token(PAYMENT, NOW, timedelta(minutes=15))
    claims = issuer.read_resource_token(token, NOW + timedelta(minutes=14, seconds=59))
    assert claims.payment_id == PAYMENT
    assert claims.expires_at == NOW + timedelta(minutes=15)


def test_resource_token_expires_after_fifteen_minutes(issuer: TokenIssuer) -> None:
    token = issuer.issue_resource_token(PAYMENT, NOW, timedelta(minutes=15))
    with pytest.raises(TokenError, match="expired"):
        issuer.read_resource_token(token, NOW + timedelta(minutes=15))


def test_resource_token_is_not_an_access_token(issuer: TokenIssuer) -> None:
    token = issuer.issue_resource_token(PAYMENT, NOW, timedelta(minutes=15))
    with pytest.raises(TokenError):
        issuer.read_access_token(token, NOW)


def test_access_token_is_not_a_resource_token(issuer: TokenIssuer) -> None:
    with pytest.raises(TokenError):
        issuer.read_resource_token(_access(issuer), NOW)


def test_token_kinds_are_told_apart_even_with_a_shared_key() -> None:
    shared = TokenIssuer(ACCESS_KEY, ACCESS_KEY)
    resource = shared.issue_resource_token(PAYMENT, NOW, timedelta(minutes=15))
    access = shared.issue_access_token("c", MERCHANT, frozenset({"payments"}), NOW, HOUR)
    with pytest.raises(TokenError, match="not a access token"):
        shared.read_access_token(resource, NOW)
    with pytest.raises(TokenError, match="not a resource token"):
        shared.read_resource_token(access, NOW)


def test_token_of_another_issuer_is_rejected(issuer: TokenIssuer) -> None:
    claims = {
        "iss": "someone-else",
        "typ": "access",
        "sub": "c",
        "mid": str(MERCHANT),
        "scope": "payments",
        "exp": int((NOW + HOUR).timestamp()),
    }
    token = jwt.encode(claims, ACCESS_KEY, algorithm="HS256")
    with pytest.raises(TokenError):
        issuer.read_access_token(token, NOW)


def test_well_signed_token_with_malformed_claims_is_a_token_error(issuer: TokenIssuer) -> None:
    claims = {
        "iss": "bankrail",
        "typ": "access",
        "sub": "c",
        "mid": "not-a-uuid",
        "exp": int((NOW + HOUR).timestamp()),
    }
    token = jwt.encode(claims, ACCESS_KEY, algorithm="HS256")
    with pytest.raises(TokenError, match="malformed"):
        issuer.read_access_token(token, NOW)


# --- client secrets ---------------------------------------------------------------------------


def test_secret_matches_its_hash() -> None:
    secret = new_client_secret()
    stored = hash_secret(secret)
    assert secret_matches(secret, stored)


def test_other_secret_does_not_match() -> None:
    stored = hash_secret(new_client_secret())
    assert not secret_matches(new_client_secret(), stored)
    assert not secret_matches("", stored)


def test_hash_is_not_the_secret_and_is_stable() -> None:
    secret = "s3cret-value"
    assert hash_secret(secret) == hash_secret(secret)
    assert hash_secret(secret) != secret.encode()
    assert len(hash_secret(secret)) == 32


def test_new_client_secrets_are_distinct_and_long() -> None:
    secrets_ = {new_client_secret() for _ in range(50)}
    assert len(secrets_) == 50
    assert all(len(s) >= 40 for s in secrets_)


def test_a_remembered_token_still_expires_by_the_service_clock(issuer: TokenIssuer) -> None:
    token = _access(issuer)
    assert issuer.read_access_token(token, NOW).client_id == "client-1"  # verified, remembered
    assert issuer.read_access_token(token, NOW + HOUR - timedelta(seconds=1)).expires_at == (
        NOW + HOUR
    )
    with pytest.raises(TokenError, match="expired"):
        issuer.read_access_token(token, NOW + HOUR)


def test_a_forgery_of_a_remembered_token_is_refused(issuer: TokenIssuer) -> None:
    token = _access(issuer)
    issuer.read_access_token(token, NOW)
    with pytest.raises(TokenError):
        issuer.read_access_token(_tamper_payload(token, mid=str(uuid.uuid4())), NOW)
    other = TokenIssuer(b"x" * 32, RESOURCE_KEY)  # another service's key: not remembered here
    with pytest.raises(TokenError):
        other.read_access_token(token, NOW)


# --- what the credential limiter counts ---------------------------------------------------


def test_an_expired_token_is_told_apart_from_a_wrong_one(issuer: TokenIssuer) -> None:
    # The credential limiter counts wrong tokens, not the expired ones this service issued.
    token = _access(issuer)
    issuer.read_access_token(token, NOW)  # remembered
    for reader in (issuer, TokenIssuer(ACCESS_KEY, RESOURCE_KEY)):  # remembered or decoded
        with pytest.raises(TokenExpired):
            reader.read_access_token(token, NOW + HOUR)
    resource = issuer.issue_resource_token(PAYMENT, NOW, timedelta(minutes=15))
    with pytest.raises(TokenExpired):
        issuer.read_resource_token(resource, NOW + HOUR)
    forged_and_expired = _tamper_payload(token, scope="payments admin")
    with pytest.raises(TokenError) as wrong:
        issuer.read_access_token(forged_and_expired, NOW + HOUR)
    assert not isinstance(wrong.value, TokenExpired)
