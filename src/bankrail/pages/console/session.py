"""Console sessions: a signed cookie, CSRF tokens and one-shot flash messages.

The session lives in a cookie the browser cannot read (HttpOnly) holding a compact JSON
payload and its HMAC-SHA256, keyed by a service secret kept in the database
(`service_keys`, purpose `console_session`), so every process accepts every other's
sessions and they survive restarts. Expiry is 8 hours of *service* time. Signing out
revokes the session id server-side, so a copy of the cookie stops working too.

CSRF: every POST form carries `csrf_token` = HMAC(key, "csrf" | session id); the sign-in form
is protected the same way by an anonymous session the sign-in page hands out first.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import orjson
from fastapi import Request, Response

from bankrail.db.pool import Connection
from bankrail.security.service_keys import ensure_secret

__all__ = [
    "COOKIE_NAME",
    "FLASH_COOKIE_NAME",
    "SESSION_TTL",
    "Role",
    "Session",
    "SessionSigner",
    "clear_cookies",
    "clear_session_cookie",
    "console_signer",
    "is_revoked",
    "revoke",
    "set_flash",
    "set_session_cookie",
]

COOKIE_NAME = "bankrail_console"
FLASH_COOKIE_NAME = "bankrail_console_flash"
COOKIE_PATH = "/console"
KEY_PURPOSE = "console_session"
SESSION_TTL = timedelta(hours=8)
ANONYMOUS_TTL = timedelta(hours=1)
FLASH_TTL_SECONDS = 120
_REVOKED_PREFIX = "console_session_revoked:"

Role = Literal["anonymous", "merchant", "operator"]


@dataclass(frozen=True)
class Session:
    """Who holds the cookie: an anonymous visitor (sign-in page), a merchant (through an API
    client's secret, sandbox only, or a console user) or the operator."""

    sid: str
    role: Role
    expires: int
    merchant_id: uuid.UUID | None = None
    client_id: str | None = None
    operator_key: str | None = None
    user_id: uuid.UUID | None = None

    @property
    def signed_in(self) -> bool:
        """True for a merchant or operator session."""
        return self.role != "anonymous"

    def to_payload(self) -> dict[str, Any]:
        """The JSON the cookie carries."""
        payload: dict[str, Any] = {"sid": self.sid, "role": self.role, "exp": self.expires}
        if self.merchant_id is not None:
            payload["mid"] = str(self.merchant_id)
        if self.client_id is not None:
            payload["cid"] = self.client_id
        if self.operator_key is not None:
            payload["opk"] = self.operator_key
        if self.user_id is not None:
            payload["uid"] = str(self.user_id)
        return payload

    @classmethod
    def from_payload(cls, payload: Any) -> Session | None:
        """The session in a verified payload, or None when it is not well formed."""
        if not isinstance(payload, dict):
            return None
        sid, role, expires = payload.get("sid"), payload.get("role"), payload.get("exp")
        if not isinstance(sid, str) or not isinstance(expires, int):
            return None
        if role not in ("anonymous", "merchant", "operator"):
            return None
        merchant_id: uuid.UUID | None = None
        user_id: uuid.UUID | None = None
        if role == "merchant":
            try:
                merchant_id = uuid.UUID(str(payload.get("mid")))
                if "uid" in payload:
                    user_id = uuid.UUID(str(payload["uid"]))
            except ValueError:
                return None
        client_id = payload.get("cid")
        operator_key = payload.get("opk")
        return cls(
            sid=sid,
            role=role,
            expires=expires,
            merchant_id=merchant_id,
            client_id=client_id if isinstance(client_id, str) else None,
            operator_key=operator_key if isinstance(operator_key, str) else None,
            user_id=user_id,
        )


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionSigner:
    """Signs and verifies cookie values and CSRF tokens with one secret key."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _mac(self, purpose: bytes, data: bytes) -> bytes:
        return hmac.new(self._key, purpose + b"\0" + data, hashlib.sha256).digest()

    def sign(self, purpose: str, payload: dict[str, Any]) -> str:
        """`base64url(json).base64url(hmac)` for a purpose ("session", "flash")."""
        body = _b64(orjson.dumps(payload))
        return f"{body}.{_b64(self._mac(purpose.encode(), body.encode()))}"

    def verify(self, purpose: str, value: str | None) -> Any:
        """The payload of a value signed for `purpose`, or None when absent or tampered."""
        if not value or value.count(".") != 1:
            return None
        body, mac = value.split(".")
        try:
            given = _unb64(mac)
        except (binascii.Error, ValueError):
            return None
        if not hmac.compare_digest(given, self._mac(purpose.encode(), body.encode())):
            return None
        try:
            return orjson.loads(_unb64(body))
        except (binascii.Error, ValueError, orjson.JSONDecodeError):
            return None

    def csrf_token(self, sid: str) -> str:
        """The CSRF token every POST form of this session carries."""
        return _b64(self._mac(b"csrf", sid.encode()))

    def csrf_matches(self, sid: str, token: object) -> bool:
        """True when `token` is this session's CSRF token."""
        if not isinstance(token, str) or not token:
            return False
        return hmac.compare_digest(token.encode(), self.csrf_token(sid).encode())

    def operator_key(self, admin_token_hash: bytes | None) -> str:
        """A fingerprint of the operator token, so operator sessions end when it changes."""
        return _b64(self._mac(b"operator", admin_token_hash or b""))[:22]

    def read_session(self, request: Request, now: datetime) -> Session | None:
        """The unexpired session of the request's cookie (revocation is checked apart)."""
        session = Session.from_payload(self.verify("session", request.cookies.get(COOKIE_NAME)))
        if session is None or session.expires <= int(now.timestamp()):
            return None
        return session

    def read_flash(self, request: Request, now: datetime) -> tuple[str, str] | None:
        """The (kind, message) of a pending flash message, if any."""
        payload = self.verify("flash", request.cookies.get(FLASH_COOKIE_NAME))
        if not isinstance(payload, dict):
            return None
        kind, message, expires = payload.get("kind"), payload.get("msg"), payload.get("exp")
        if not isinstance(kind, str) or not isinstance(message, str):
            return None
        if not isinstance(expires, int) or expires <= int(now.timestamp()):
            return None
        return kind, message


def new_session(
    role: Role,
    now: datetime,
    *,
    merchant_id: uuid.UUID | None = None,
    client_id: str | None = None,
    operator_key: str | None = None,
    user_id: uuid.UUID | None = None,
) -> Session:
    """A fresh session id for a role, expiring after its time to live (service time). A
    merchant session names either its API client (`client_id`) or its console user."""
    ttl = ANONYMOUS_TTL if role == "anonymous" else SESSION_TTL
    return Session(
        sid=secrets.token_urlsafe(18),
        role=role,
        expires=int((now + ttl).timestamp()),
        merchant_id=merchant_id,
        client_id=client_id,
        operator_key=operator_key,
        user_id=user_id,
    )


async def console_signer(request: Request) -> SessionSigner:
    """The signer of this process, its key fetched (or created) once and kept on app.state."""
    state = request.app.state
    signer: SessionSigner | None = getattr(state, "console_signer", None)
    if signer is None:
        async with state.context.pool.acquire() as conn:
            _, key = await ensure_secret(conn, KEY_PURPOSE, secrets.token_bytes(32))
        signer = SessionSigner(key)
        state.console_signer = signer
    return signer


def _secure(request: Request) -> bool:
    """Whether the console's cookies are `Secure` (sent over https only): always in
    production mode, and in the sandbox when its public URL is https."""
    settings = request.app.state.context.settings
    return not settings.sandbox or str(settings.public_url).startswith("https://")


def set_session_cookie(
    response: Response, request: Request, signer: SessionSigner, session: Session
) -> None:
    """Send the session cookie: HttpOnly, SameSite=Lax, Path=/console, and Secure in
    production mode or on https."""
    ttl = ANONYMOUS_TTL if session.role == "anonymous" else SESSION_TTL
    response.set_cookie(
        COOKIE_NAME,
        signer.sign("session", session.to_payload()),
        max_age=int(ttl.total_seconds()),
        path=COOKIE_PATH,
        httponly=True,
        samesite="lax",
        secure=_secure(request),
    )


def set_flash(
    response: Response,
    request: Request,
    signer: SessionSigner,
    now: datetime,
    kind: str,
    message: str,
) -> None:
    """A message shown once, on the page the response redirects to."""
    payload = {"kind": kind, "msg": message, "exp": int(now.timestamp()) + FLASH_TTL_SECONDS}
    response.set_cookie(
        FLASH_COOKIE_NAME,
        signer.sign("flash", payload),
        max_age=FLASH_TTL_SECONDS,
        path=COOKIE_PATH,
        httponly=True,
        samesite="lax",
        secure=_secure(request),
    )


def _delete_cookie(response: Response, request: Request, name: str) -> None:
    """Delete a console cookie with the attributes it was set with (Secure by `_secure`)."""
    response.delete_cookie(
        name, path=COOKIE_PATH, httponly=True, samesite="lax", secure=_secure(request)
    )


def clear_cookies(response: Response, request: Request, *, flash_only: bool = False) -> None:
    """Delete the flash cookie (and the session cookie unless `flash_only`)."""
    names = [FLASH_COOKIE_NAME] if flash_only else [FLASH_COOKIE_NAME, COOKIE_NAME]
    for name in names:
        _delete_cookie(response, request, name)


def clear_session_cookie(response: Response, request: Request) -> None:
    """Delete the session cookie (signing out), keeping the flash cookie the response sets."""
    _delete_cookie(response, request, COOKIE_NAME)


async def is_revoked(conn: Connection, sid: str) -> bool:
    """True when the session was signed out."""
    return bool(
        await conn.fetchval(
            "SELECT true FROM service_settings WHERE name = $1", _REVOKED_PREFIX + sid
        )
    )


async def revoke(conn: Connection, session: Session, now: datetime) -> None:
    """Sign a session out everywhere; revocations of sessions that expired anyway go."""
    await conn.execute(
        "INSERT INTO service_settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        _REVOKED_PREFIX + session.sid,
        str(session.expires),
    )
    await conn.execute(
        "DELETE FROM service_settings WHERE name LIKE $1"
        " AND CASE WHEN name LIKE $1 THEN value::bigint < $2 ELSE false END",
        _REVOKED_PREFIX + "%",
        int(now.timestamp()),
    )
