"""The pool's release (db/pool.py, `_Pool`): a connection in no transaction goes back to the
pool within the releasing task, without a task or a turn of the event loop; any other (left
in a transaction, of an expired generation, already released, closed) goes back by
asyncpg's own path; and a request cancelled while it holds a connection still gives it
back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from bankrail.db.pool import create_pool

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(loop_scope="session")
async def one(database: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool of one connection: what is not given back cannot be acquired again."""
    pool = await create_pool(database, min_size=1, max_size=1)
    yield pool
    await pool.close()


async def _returned(pool: asyncpg.Pool) -> None:
    """Wait (bounded) until the pool's one connection is idle again."""
    async with asyncio.timeout(10):
        while pool.get_idle_size() != 1:
            await asyncio.sleep(0.01)


async def test_a_connection_in_no_transaction_goes_back_without_a_turn_of_the_loop(
    one: asyncpg.Pool,
) -> None:
    for _ in range(3):
        conn = await one.acquire()
        assert await conn.fetchval("SELECT 1") == 1
        assert not await _released(one, conn)
        assert one.get_idle_size() == 1
    async with one.acquire() as conn:
        assert await conn.fetchval("SELECT 2") == 2
    assert one.get_idle_size() == 1


async def _released(pool: asyncpg.Pool, conn: Any) -> bool:
    """Release `conn`; whether the event loop turned meanwhile (asyncpg's own path, which
    shields a task, turns it; the release that cannot wait does not)."""
    turned: list[bool] = []
    asyncio.get_running_loop().call_soon(turned.append, True)
    await pool.release(conn)
    return bool(turned)


async def test_a_connection_left_in_a_transaction_is_rolled_back_by_asyncpgs_own_path(
    one: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    async with one.acquire() as conn:
        await conn.execute("CREATE TEMPORARY TABLE IF NOT EXISTS kept (n int)")
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        conn = await one.acquire()
        await conn.execute("BEGIN")
        await conn.execute("INSERT INTO kept VALUES (1)")
        assert await _released(one, conn)
    assert "Resetting connection with an active transaction" in caplog.text
    async with one.acquire() as conn:
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT count(*) FROM kept") == 0


async def test_a_connection_of_an_expired_generation_goes_by_asyncpgs_path_and_is_replaced(
    one: asyncpg.Pool,
) -> None:
    conn = await one.acquire()
    backend = await conn.fetchval("SELECT pg_backend_pid()")
    await one.expire_connections()
    assert await _released(one, conn)
    async with one.acquire() as conn:
        assert await conn.fetchval("SELECT pg_backend_pid()") != backend


async def test_a_connection_released_twice_is_released_once(one: asyncpg.Pool) -> None:
    conn = await one.acquire()
    await one.release(conn)
    await one.release(conn)  # asyncpg's path: already released, nothing to do
    assert one.get_idle_size() == 1
    async with one.acquire() as again:
        assert await again.fetchval("SELECT 5") == 5


async def test_a_managed_transaction_commits_and_the_connection_goes_back(
    one: asyncpg.Pool,
) -> None:
    async with one.acquire() as conn, conn.transaction():
        await conn.execute("CREATE TEMPORARY TABLE IF NOT EXISTS made (n int)")
        await conn.execute("INSERT INTO made VALUES (1)")
    assert one.get_idle_size() == 1
    async with one.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM made") == 1


async def test_a_request_cancelled_mid_query_gives_its_connection_back(one: asyncpg.Pool) -> None:
    started = asyncio.Event()

    async def hold() -> None:
        async with one.acquire() as conn:
            started.set()
            await conn.execute("SELECT pg_sleep(30)")

    task = asyncio.create_task(hold())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _returned(one)
    async with asyncio.timeout(10), one.acquire() as conn:
        assert await conn.fetchval("SELECT 3") == 3


async def test_a_closed_connection_is_replaced(one: asyncpg.Pool) -> None:
    conn = await one.acquire()
    conn.terminate()
    await one.release(conn)
    async with asyncio.timeout(10), one.acquire() as conn:
        assert await conn.fetchval("SELECT 4") == 4
