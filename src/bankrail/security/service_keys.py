"""The service's own secrets, generated on first start and kept in the database so that
tokens and webhook signatures survive restarts and are shared by every process."""

from __future__ import annotations

import secrets
import uuid
from pathlib import Path

from bankrail.db.pool import Connection
from bankrail.security.secret_files import write_secret_file
from bankrail.security.tokens import hash_secret

ACCESS_TOKEN_KEY = "access_token"
RESOURCE_TOKEN_KEY = "resource_token"
ADMIN_TOKEN_SETTING = "admin_token_sha256"
ADMIN_TOKEN_FILE = "admin-token"


async def ensure_secret(conn: Connection, purpose: str, make: bytes) -> tuple[str, bytes]:
    """(kid, secret) for a purpose; `make` is stored if none exists yet (first writer wins)."""
    await conn.execute(
        "INSERT INTO service_keys (kid, purpose, secret) VALUES ($1, $2, $3)"
        " ON CONFLICT (purpose) DO NOTHING",
        str(uuid.uuid4()),
        purpose,
        make,
    )
    row = await conn.fetchrow("SELECT kid, secret FROM service_keys WHERE purpose = $1", purpose)
    assert row is not None
    return row["kid"], bytes(row["secret"])


async def ensure_token_keys(conn: Connection) -> tuple[bytes, bytes]:
    """The HMAC keys for access tokens and resource tokens."""
    _, access = await ensure_secret(conn, ACCESS_TOKEN_KEY, secrets.token_bytes(32))
    _, resource = await ensure_secret(conn, RESOURCE_TOKEN_KEY, secrets.token_bytes(32))
    return access, resource


async def ensure_admin_token(
    conn: Connection, configured: str | None, data_dir: Path
) -> tuple[bytes, str | None]:
    """The operator token's hash, and the token itself when it was generated just now.

    `BANKRAIL_ADMIN_TOKEN` wins. Otherwise the stored one is used, and on the very first
    start a token is generated, its hash stored, and the token written to
    `<data_dir>/admin-token` (mode 0600) for the developer to read.
    """
    if configured:
        return hash_secret(configured), None
    stored = await conn.fetchval(
        "SELECT value FROM service_settings WHERE name = $1", ADMIN_TOKEN_SETTING
    )
    if stored is not None:
        return bytes.fromhex(stored), None
    token = "admin-" + secrets.token_urlsafe(32)
    inserted = await conn.fetchval(
        "INSERT INTO service_settings (name, value) VALUES ($1, $2)"
        " ON CONFLICT (name) DO NOTHING RETURNING true",
        ADMIN_TOKEN_SETTING,
        hash_secret(token).hex(),
    )
    if not inserted:  # another process won the race
        return await ensure_admin_token(conn, None, data_dir)
    write_secret_file(data_dir / ADMIN_TOKEN_FILE, token + "\n")
    return hash_secret(token), token
