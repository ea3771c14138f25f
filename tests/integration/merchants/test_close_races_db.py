"""Closing a merchant (`merchants.closing.close_merchant`) while an operator adds a credential
to it: whichever commits first, the closed merchant is left with no working client, signing
key or console user (docs/operations.md "Closing a merchant": none can be added afterwards).

The interleaving that matters (the credential's check passes, the close commits, then the
credential's row is written) is forced by a trigger of the test's own database that holds
the credential's INSERT until the test lets it go."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import asyncpg
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from bankrail.core.problems import Conflict
from bankrail.merchants import service
from bankrail.merchants.closing import close_merchant
from bankrail.merchants.console_users import create_console_user

pytestmark = pytest.mark.asyncio(loop_scope="session")

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GATE = 4242  # the advisory lock the trigger waits on


@pytest_asyncio.fixture(loop_scope="session")
async def gated(pool: asyncpg.Pool) -> AsyncIterator[None]:
    """A BEFORE INSERT trigger on the credential tables that waits for the GATE lock."""
    await pool.execute(
        "CREATE FUNCTION test_wait_for_gate() RETURNS trigger LANGUAGE plpgsql AS $$"
        f" BEGIN PERFORM pg_advisory_xact_lock_shared({GATE}); RETURN NEW; END $$;"
        " CREATE TRIGGER gate BEFORE INSERT ON api_clients"
        " FOR EACH ROW EXECUTE FUNCTION test_wait_for_gate();"
        " CREATE TRIGGER gate BEFORE INSERT ON signing_keys"
        " FOR EACH ROW EXECUTE FUNCTION test_wait_for_gate();"
        " CREATE TRIGGER gate BEFORE INSERT ON console_users"
        " FOR EACH ROW EXECUTE FUNCTION test_wait_for_gate();"
    )
    yield


async def _waiting(pool: asyncpg.Pool, pid: int) -> bool:
    waiting: bool = await pool.fetchval(
        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid
    )
    return waiting


async def _until(check: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(10_000):
        if await check():  # each check is a round trip: the tasks under test run meanwhile
            return
    raise AssertionError("never reached")


def _public_key_pem() -> str:
    key = ec.generate_private_key(ec.SECP521R1())
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


Add = Callable[[asyncpg.Connection, uuid.UUID], Awaitable[object]]

ADDS: dict[str, Add] = {
    "api_clients": lambda conn, m: service.create_client(conn, m, ["payments"], NOW),
    "signing_keys": lambda conn, m: service.register_signing_key(
        conn, m, _public_key_pem(), None, NOW
    ),
    "console_users": lambda conn, m: create_console_user(
        conn, m, "ops@shop.example", ["payments"], NOW
    ),
}
LIVE = {
    "api_clients": "revoked_at IS NULL",
    "signing_keys": "revoked_at IS NULL",
    "console_users": "disabled_at IS NULL",
}


@pytest.mark.parametrize("table", sorted(ADDS))
async def test_a_credential_added_while_the_merchant_closes_does_not_survive_the_close(
    pool: asyncpg.Pool, gated: None, table: str
) -> None:
    async with pool.acquire() as conn:
        merchant_id = await service.create_merchant(conn, "Closing Ltd", NOW)
    async with pool.acquire() as gate, pool.acquire() as adding, pool.acquire() as closing:
        await gate.execute(f"SELECT pg_advisory_lock({GATE})")
        add = asyncio.create_task(ADDS[table](adding, merchant_id))
        adding_pid = adding.get_server_pid()
        await _until(lambda: _waiting(pool, adding_pid))  # its check passed; its INSERT waits
        close = asyncio.create_task(close_merchant(closing, merchant_id, NOW))
        closing_pid = closing.get_server_pid()
        await _until(lambda: _closed_or_waiting(close, pool, closing_pid))
        await gate.execute(f"SELECT pg_advisory_unlock({GATE})")
        added = (await asyncio.gather(add, return_exceptions=True))[0]
        await close

    if isinstance(added, Exception):  # refused: the close came first
        assert isinstance(added, Conflict), added
    live = await pool.fetchval(
        f"SELECT count(*) FROM {table} WHERE merchant_id = $1 AND {LIVE[table]}", merchant_id
    )
    assert live == 0


async def _closed_or_waiting(close: asyncio.Task[object], pool: asyncpg.Pool, pid: int) -> bool:
    return close.done() or await _waiting(pool, pid)
