"""Console users: the people who sign in to the console for a merchant with an email and a
password (docs/console.md). The operator creates one; the answer carries a set-password link
that works once, for `SETUP_TTL` of service time; the password is stored as an Argon2id hash
(security.credentials). A console user acts with the scopes given at creation (by default
every scope of the API), checked by the console as the API checks a token's."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from bankrail.core.ids import new_id
from bankrail.core.problems import Conflict
from bankrail.db.pool import Connection
from bankrail.merchants.service import require_open_merchant
from bankrail.security.credentials import hash_password

__all__ = [
    "MIN_PASSWORD_LENGTH",
    "SETUP_TTL",
    "NewConsoleUser",
    "create_console_user",
    "set_password",
    "setup_token_is_valid",
    "user_scopes",
]

SETUP_TTL = timedelta(hours=72)
MIN_PASSWORD_LENGTH = 12
MAX_PASSWORD_LENGTH = 1024


@dataclass(frozen=True)
class NewConsoleUser:
    """A console user just created, with the one-time token of its set-password link."""

    id: uuid.UUID
    merchant_id: uuid.UUID
    email: str
    scopes: list[str]
    setup_token: str
    setup_expires_at: datetime


def _token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


async def create_console_user(
    conn: Connection, merchant_id: uuid.UUID, email: str, scopes: list[str], now: datetime
) -> NewConsoleUser:
    """A console user of the merchant, without a password yet; 404 for an unknown merchant,
    409 for a closed one or when a console user (of any merchant) already has this email."""
    token = secrets.token_urlsafe(32)
    user_id = new_id()
    expires = now + SETUP_TTL
    try:
        async with conn.transaction():  # the check and the row together: a close waits
            await require_open_merchant(conn, merchant_id)
            await conn.execute(
                "INSERT INTO console_users (id, merchant_id, email, scopes, setup_token_hash,"
                " setup_expires_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                user_id,
                merchant_id,
                email,
                sorted(set(scopes)),
                _token_hash(token),
                expires,
                now,
            )
    except asyncpg.UniqueViolationError as exc:
        raise Conflict(f"A console user with the email {email!r} already exists.") from exc
    return NewConsoleUser(user_id, merchant_id, email, sorted(set(scopes)), token, expires)


async def setup_token_is_valid(conn: Connection, token: str, now: datetime) -> bool:
    """True while the set-password token is unused and unexpired."""
    return bool(
        await conn.fetchval(
            "SELECT true FROM console_users WHERE setup_token_hash = $1"
            " AND setup_expires_at > $2 AND disabled_at IS NULL",
            _token_hash(token),
            now,
        )
    )


async def set_password(conn: Connection, token: str, password: str, now: datetime) -> str | None:
    """Set the password of the user whose unused, unexpired set-password token this is, and
    spend the token (it works once); the user's email, or None when the token is not valid.
    The Argon2 hash is computed on a thread."""
    hashed = await asyncio.to_thread(hash_password, password)
    email = await conn.fetchval(
        "UPDATE console_users SET password_hash = $3, setup_token_hash = NULL,"
        " setup_expires_at = NULL WHERE setup_token_hash = $1 AND setup_expires_at > $2"
        " AND disabled_at IS NULL RETURNING email",
        _token_hash(token),
        now,
        hashed,
    )
    return str(email) if email is not None else None


async def user_scopes(
    conn: Connection, user_id: uuid.UUID, merchant_id: uuid.UUID
) -> frozenset[str] | None:
    """The scopes of the merchant's active console user, or None when it is disabled or gone."""
    scopes = await conn.fetchval(
        "SELECT scopes FROM console_users WHERE id = $1 AND merchant_id = $2"
        " AND disabled_at IS NULL AND password_hash IS NOT NULL",
        user_id,
        merchant_id,
    )
    return frozenset(scopes) if scopes is not None else None
