"""The one check of each kind of credential a caller presents: an API client's secret, the
operator token, a console user's password. Every place that accepts one (`/connect/token`,
the admin API, the console's sign-in) goes through these functions, so whatever applies to
wrong credentials (a limiter, say) is added here once.

Console passwords are hashed with Argon2id (argon2-cffi, its default parameters); client
secrets and the operator token are random, so SHA-256 suffices for them (security.tokens).
"""

from __future__ import annotations

import asyncio
import hmac
import uuid
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from bankrail.db.pool import Connection
from bankrail.security.tokens import hash_secret, secret_matches

__all__ = [
    "ClientRecord",
    "ConsoleUserRecord",
    "check_client_secret",
    "check_console_password",
    "check_operator_token",
    "hash_password",
]

_HASHER = PasswordHasher()
# Verified when no user has the email, so that an unknown email costs what a wrong password
# does and the time taken does not tell which emails exist.
_DUMMY_HASH = _HASHER.hash("not a password of anyone")


@dataclass(frozen=True)
class ClientRecord:
    """An active API client whose secret was presented correctly."""

    client_id: str
    merchant_id: uuid.UUID
    merchant_name: str
    scopes: frozenset[str]


@dataclass(frozen=True)
class ConsoleUserRecord:
    """An active console user whose password was presented correctly."""

    id: uuid.UUID
    merchant_id: uuid.UUID
    merchant_name: str
    email: str


async def check_client_secret(conn: Connection, client_id: str, secret: str) -> ClientRecord | None:
    """The active (not revoked) client with this id if `secret` is its secret; else None.
    Takes the same time whether or not the client exists."""
    row = await conn.fetchrow(
        "SELECT c.merchant_id, c.secret_hash, c.scopes, m.name FROM api_clients c"
        " JOIN merchants m ON m.id = c.merchant_id"
        " WHERE c.client_id = $1 AND c.revoked_at IS NULL",
        client_id,
    )
    stored = bytes(row["secret_hash"]) if row else hash_secret(client_id + "\0none")
    if not secret_matches(secret, stored) or row is None:
        return None
    return ClientRecord(client_id, row["merchant_id"], row["name"], frozenset(row["scopes"]))


def check_operator_token(token: str, expected_hash: bytes | None) -> bool:
    """True when `token` is the operator token (whose hash is `expected_hash`)."""
    return expected_hash is not None and hmac.compare_digest(hash_secret(token), expected_hash)


def hash_password(password: str) -> str:
    """The stored form of a console password (Argon2id, with its salt and parameters)."""
    return _HASHER.hash(password)


def _password_matches(stored: str, password: str) -> bool:
    try:
        return _HASHER.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


async def check_console_password(
    conn: Connection, email: str, password: str
) -> ConsoleUserRecord | None:
    """The active console user with this email (case-insensitive) if `password` is theirs;
    else None. A user who has not set a password yet, or was disabled, cannot sign in.
    The Argon2 check runs on a thread and costs the same for an unknown email."""
    row = await conn.fetchrow(
        "SELECT u.id, u.merchant_id, u.email, u.password_hash, m.name FROM console_users u"
        " JOIN merchants m ON m.id = u.merchant_id"
        " WHERE lower(u.email) = lower($1) AND u.disabled_at IS NULL",
        email,
    )
    stored = row["password_hash"] if row and row["password_hash"] else _DUMMY_HASH
    matches = await asyncio.to_thread(_password_matches, stored, password)
    if row is None or row["password_hash"] is None or not matches:
        return None
    return ConsoleUserRecord(row["id"], row["merchant_id"], row["name"], row["email"])
