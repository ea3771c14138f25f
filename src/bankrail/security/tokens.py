"""Access tokens (client credentials) and payment resource tokens, as HS256 JWTs.

Expiry is judged by the service clock, never by the wall clock, so advancing the sandbox
clock expires tokens as it would in real time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import jwt
import jwt.types

__all__ = [
    "AccessClaims",
    "TokenError",
    "TokenExpired",
    "TokenIssuer",
    "hash_secret",
    "new_client_secret",
    "secret_matches",
]

ISSUER = "bankrail"
_ALGORITHM = "HS256"
# Expiry is checked against the service clock, not by PyJWT against the wall clock.
_DECODE_OPTIONS: jwt.types.Options = {
    "verify_exp": False,
    "verify_aud": False,
    "verify_iat": False,
    "verify_nbf": False,
}


# Access tokens whose signature this process has verified, at most this many at once.
_VERIFIED_CACHE_SIZE = 10_000


class TokenError(ValueError):
    """The token is malformed, forged, expired or of the wrong kind."""


class TokenExpired(TokenError):
    """The token was issued by this service, but its time has passed."""


@dataclass(frozen=True)
class AccessClaims:
    """What an access token says about its bearer."""

    client_id: str
    merchant_id: uuid.UUID
    scopes: frozenset[str]
    audiences: frozenset[str]
    expires_at: datetime


@dataclass(frozen=True)
class ResourceClaims:
    """What a resource token grants: access to one payment."""

    payment_id: uuid.UUID
    expires_at: datetime


def audiences_for(scopes: frozenset[str]) -> frozenset[str]:
    """The audiences a token with these scopes may call (its audience follows its scopes)."""
    return frozenset(scopes)


class TokenIssuer:
    """Issues and checks the service's JWTs with keys kept in the database."""

    def __init__(self, access_key: bytes, resource_key: bytes) -> None:
        self._access_key = access_key
        self._resource_key = resource_key
        self._verified: dict[str, tuple[float, AccessClaims]] = {}

    def issue_access_token(
        self,
        client_id: str,
        merchant_id: uuid.UUID,
        scopes: frozenset[str],
        now: datetime,
        ttl: timedelta,
    ) -> str:
        """A bearer token for the client, valid for `ttl` of service time."""
        claims = {
            "iss": ISSUER,
            "typ": "access",
            "sub": client_id,
            "mid": str(merchant_id),
            "scope": " ".join(sorted(scopes)),
            "aud": sorted(audiences_for(scopes)),
            "iat": int(now.timestamp()),
            "exp": int((now + ttl).timestamp()),
            "jti": uuid.uuid4().hex,
        }
        return jwt.encode(claims, self._access_key, algorithm=_ALGORITHM)

    def read_access_token(self, token: str, now: datetime) -> AccessClaims:
        """Verify an access token and return its claims; raises TokenError.

        A token whose signature was verified once is remembered (bounded), so a client
        reusing its token pays for one dictionary lookup and the expiry check, not for
        a JWT decode on every request. What is remembered is only that the signature is
        ours; whether the token's client is still active is checked apart, on every request
        (http.auth, security.keys.ActiveClients).
        """
        known = self._verified.get(token)
        if known is not None:
            expires, claims_of_token = known
            if expires <= now.timestamp():
                raise TokenExpired("token has expired")
            return claims_of_token
        access = self._read_access_token(token, now)
        if len(self._verified) >= _VERIFIED_CACHE_SIZE:
            self._verified.clear()
        self._verified[token] = (access.expires_at.timestamp(), access)
        return access

    def verified_access_token(self, token: str) -> bool:
        """True when this process has verified `token` as an access token of its own (so it
        is no resource token): a dictionary lookup, where trying it as a resource token
        would fail a JWT decode. Whether it has expired is `read_access_token`'s to say."""
        return token in self._verified

    def _read_access_token(self, token: str, now: datetime) -> AccessClaims:
        claims = self._decode(token, self._access_key, "access", now)
        try:
            scopes = frozenset(str(claims.get("scope", "")).split())
            aud = claims.get("aud", [])
            audiences = frozenset(aud if isinstance(aud, list) else [aud])
            return AccessClaims(
                client_id=str(claims["sub"]),
                merchant_id=uuid.UUID(str(claims["mid"])),
                scopes=scopes - {""},
                audiences=frozenset(str(a) for a in audiences),
                expires_at=datetime.fromtimestamp(int(str(claims["exp"])), tz=now.tzinfo),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise TokenError("access token claims are malformed") from exc

    def issue_resource_token(
        self, payment_id: uuid.UUID, now: datetime, ttl: timedelta, kind: str = "resource"
    ) -> str:
        """A token bound to one payment: `resource` for the hosted page and SDKs, `provider`
        for the mock bank's pages and action API."""
        claims = {
            "iss": ISSUER,
            "typ": kind,
            "pid": str(payment_id),
            "iat": int(now.timestamp()),
            "exp": int((now + ttl).timestamp()),
        }
        return jwt.encode(claims, self._resource_key, algorithm=_ALGORITHM)

    def read_resource_token(
        self, token: str, now: datetime, kind: str = "resource"
    ) -> ResourceClaims:
        """Verify a payment-bound token of this kind; raises TokenError."""
        claims = self._decode(token, self._resource_key, kind, now)
        try:
            return ResourceClaims(
                payment_id=uuid.UUID(str(claims["pid"])),
                expires_at=datetime.fromtimestamp(int(str(claims["exp"])), tz=now.tzinfo),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise TokenError("resource token claims are malformed") from exc

    @staticmethod
    def _decode(token: str, key: bytes, kind: str, now: datetime) -> dict[str, object]:
        try:
            claims: dict[str, object] = jwt.decode(
                token, key, algorithms=[_ALGORITHM], options=_DECODE_OPTIONS
            )
        except jwt.PyJWTError as exc:
            raise TokenError("token is malformed or its signature is invalid") from exc
        if claims.get("typ") != kind or claims.get("iss") != ISSUER:
            raise TokenError(f"not a {kind} token")
        exp = claims.get("exp")
        if not isinstance(exp, int):
            raise TokenError(f"{kind} token claims are malformed")
        if exp <= now.timestamp():
            raise TokenExpired("token has expired")
        return claims


def new_client_secret() -> str:
    """A high-entropy client secret."""
    return secrets.token_urlsafe(32)


def hash_secret(secret: str) -> bytes:
    """The stored form of a high-entropy secret (SHA-256; secrets are random, not passwords)."""
    return hashlib.sha256(secret.encode()).digest()


def secret_matches(secret: str, stored_hash: bytes) -> bool:
    """Constant-time comparison of a presented secret with its stored hash."""
    return hmac.compare_digest(hash_secret(secret), stored_hash)
