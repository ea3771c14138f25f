"""The pool's acquire and release (db/pool.py, `_Pool`): a free open connection is handed out,
and one in no transaction goes back, by steps that never wait (the release without a task or
a turn of the event loop); any other (none free, others waiting, left in a transaction, of
an expired generation, already released, closed) goes by asyncpg's own path; a request
cancelled while it holds a connection still gives it back; nothing of one borrower (its
listeners) reaches the next; and the pool's sweep closes idle connections above its
minimum."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from bankrail.db.pool import IDLE_SECONDS, create_pool

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(loop_scope="session")
async def one(database: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool of one connection: what is not given back cannot be acquired again."""
    pool = await create_pool(database, min_size=1, max_size=1)
    yield pool
    await pool.close()


@contextlib.asynccontextmanager
async def _pool(
    database: str, *, min_size: int, max_size: int, idle_seconds: float = IDLE_SECONDS
) -> AsyncIterator[asyncpg.Pool]:
    """A pool of the test's own sizes (`idle_seconds=0`: its own sweep off), closed after."""
    pool = await create_pool(
        database, min_size=min_size, max_size=max_size, idle_seconds=idle_seconds
    )
    try:
        yield pool
    finally:
        await pool.close()


async def _opened(pool: asyncpg.Pool, count: int) -> None:
    """Open `count` connections at once and give them all back."""
    held = [await pool.acquire() for _ in range(count)]
    for conn in held:
        await pool.release(conn)


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


async def test_a_free_connection_is_handed_out_at_once_and_detached_when_given_back(
    one: asyncpg.Pool,
) -> None:
    for _ in range(3):
        conn = await one.acquire()
        assert one.get_idle_size() == 0
        assert await conn.fetchval("SELECT 6") == 6
        await one.release(conn)
    with pytest.raises(asyncpg.InterfaceError):
        await conn.fetchval("SELECT 7")  # a released proxy is detached, as asyncpg's are


async def test_with_none_free_an_acquire_waits_for_the_next_release_and_can_time_out(
    one: asyncpg.Pool,
) -> None:
    held = await one.acquire()
    with pytest.raises(TimeoutError):
        await one.acquire(timeout=0.05)

    async def take() -> Any:
        return await one.acquire(timeout=10)

    waiting = asyncio.create_task(take())
    try:
        async with asyncio.timeout(10):
            while not one._queue._getters:  # the task waits in asyncpg's own path
                await asyncio.sleep(0)
    finally:
        await one.release(held)
    conn = await waiting
    assert await conn.fetchval("SELECT 8") == 8
    await one.release(conn)
    assert one.get_idle_size() == 1


async def test_a_free_connection_closed_while_idle_is_replaced_on_acquire(database: str) -> None:
    async with _pool(database, min_size=0, max_size=1) as pool:  # nothing reconnects it first
        async with pool.acquire() as conn:
            backend = await conn.fetchval("SELECT pg_backend_pid()")
        killer = await asyncpg.connect(database)
        try:
            await killer.execute("SELECT pg_terminate_backend($1)", backend)
        finally:
            await killer.close()
        async with asyncio.timeout(10):
            # Until asyncpg sees the server close it (and lets the holder go of it).
            while (con := pool._holders[0]._con) is not None and not con.is_closed():  # type: ignore[attr-defined]
                await asyncio.sleep(0.01)
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") != backend


async def test_a_free_connection_of_an_expired_generation_is_replaced_on_acquire(
    one: asyncpg.Pool,
) -> None:
    async with one.acquire() as conn:
        backend = await conn.fetchval("SELECT pg_backend_pid()")
    await one.expire_connections()
    async with one.acquire() as conn:
        assert await conn.fetchval("SELECT pg_backend_pid()") != backend


async def test_an_acquire_with_no_time_to_wait_times_out_as_asyncpgs_does(
    one: asyncpg.Pool,
) -> None:
    with pytest.raises(TimeoutError):
        await one.acquire(timeout=0)
    assert one.get_idle_size() == 1


async def test_the_next_borrower_hears_nothing_for_the_last_ones_listeners(
    one: asyncpg.Pool,
) -> None:
    heard: list[str] = []
    conn = await one.acquire()
    conn.add_log_listener(lambda _conn, message: heard.append(message.message))
    await conn.add_listener("bankrail_test", lambda *args: heard.append(args[3]))
    await conn.execute("DO $$ BEGIN RAISE NOTICE 'first'; END $$")
    async with asyncio.timeout(10):
        while heard != ["first"]:
            await asyncio.sleep(0.01)
    await conn.execute("UNLISTEN *")  # the server's side; the callbacks stay
    with pytest.warns(asyncpg.InterfaceWarning, match="listener"):  # as asyncpg warns
        await one.release(conn)
    async with one.acquire() as conn:
        await conn.execute("DO $$ BEGIN RAISE NOTICE 'second'; END $$")
        await conn.execute("LISTEN bankrail_test")
        await conn.execute("NOTIFY bankrail_test, 'second'")
        assert await conn.fetchval("SELECT 10") == 10  # after the notice and notification
        await conn.execute("UNLISTEN *")
    assert heard == ["first"]


async def test_a_waiter_gets_the_connection_from_a_task_borrowing_in_a_loop(
    one: asyncpg.Pool,
) -> None:
    borrows = 0
    stop = False

    async def borrow_in_a_loop() -> None:
        nonlocal borrows
        while not stop:
            async with one.acquire() as conn:
                await conn.fetchval("SELECT 1")
            borrows += 1

    looping = asyncio.create_task(borrow_in_a_loop())
    try:
        async with asyncio.timeout(10):
            while borrows < 3:
                await asyncio.sleep(0.01)
        before = borrows
        async with one.acquire(timeout=10) as conn:
            assert await conn.fetchval("SELECT 11") == 11
        assert borrows - before < 10  # its turn came within a few borrows, not after them all
    finally:
        stop = True
        await looping


async def test_a_closing_pool_refuses_a_new_borrower(database: str) -> None:
    pool = await create_pool(database, min_size=1, max_size=2)
    held = await pool.acquire()
    closing = asyncio.create_task(pool.close())
    try:
        async with asyncio.timeout(10):
            while not pool.is_closing():
                await asyncio.sleep(0)
        with pytest.raises(asyncpg.InterfaceError, match="closing"):
            await pool.acquire()
    finally:
        await pool.release(held)
        await closing


def _connections(pool: asyncpg.Pool) -> list[Any]:
    """The pool's open connections."""
    return [h._con for h in pool._holders if h._con is not None and not h._con.is_closed()]  # type: ignore[attr-defined]


async def test_the_sweep_closes_a_connection_not_borrowed_for_the_idle_time(
    database: str,
) -> None:
    """Swept at made-up times (`close_idle_at`, the pool's own sweep off): a connection
    is closed once every sweep for the idle time saw it free and not given back again; a
    borrow starts its time again, and one in use is never closed."""
    async with _pool(database, min_size=0, max_size=2, idle_seconds=0) as pool:
        await _opened(pool, 2)
        pool.close_idle_at(100.0, 10)  # type: ignore[attr-defined]
        pool.close_idle_at(109.9, 10)  # type: ignore[attr-defined]
        assert pool.get_size() == 2
        async with pool.acquire() as conn:  # borrowed between sweeps, with no query
            kept = conn._con
        pool.close_idle_at(110.0, 10)  # type: ignore[attr-defined]
        assert _connections(pool) == [kept]  # its time started again; the other's did not
        async with pool.acquire() as conn:  # in use while swept
            pool.close_idle_at(1000.0, 10)  # type: ignore[attr-defined]
            pool.close_idle_at(2000.0, 10)  # type: ignore[attr-defined]
            assert _connections(pool) == [kept]
        pool.close_idle_at(2000.5, 10)  # type: ignore[attr-defined]
        pool.close_idle_at(2010.4, 10)  # type: ignore[attr-defined]
        assert _connections(pool) == [kept]
        pool.close_idle_at(2010.5, 10)  # type: ignore[attr-defined]
        assert pool.get_size() == 0


async def test_a_reconnected_connections_idle_time_starts_when_it_is_first_seen(
    database: str,
) -> None:
    async with _pool(database, min_size=0, max_size=1, idle_seconds=0) as pool:
        async with pool.acquire() as conn:
            await conn.fetchval("SELECT 1")
        pool.close_idle_at(0.0, 10)  # type: ignore[attr-defined]
        await pool.expire_connections()
        async with pool.acquire() as conn:  # a new connection, on the same holder
            await conn.fetchval("SELECT 1")
        pool.close_idle_at(10.0, 10)  # type: ignore[attr-defined]
        assert pool.get_size() == 1
        pool.close_idle_at(20.0, 10)  # type: ignore[attr-defined]
        assert pool.get_size() == 0


async def test_the_sweep_keeps_the_pools_minimum(database: str) -> None:
    async with _pool(database, min_size=1, max_size=2, idle_seconds=0) as pool:
        await _opened(pool, 2)
        pool.close_idle_at(0.0, 10)  # type: ignore[attr-defined]
        pool.close_idle_at(10.0, 10)  # type: ignore[attr-defined]
        (floor,) = _connections(pool)
        for now in (20.0, 30.0, 1000.0):  # the minimum is neither closed nor replaced
            pool.close_idle_at(now, 10)  # type: ignore[attr-defined]
            await asyncio.sleep(0)  # a turn for asyncpg's upkeep of the minimum, if it ran
            assert _connections(pool) == [floor]


async def test_the_pools_own_sweep_closes_an_idle_connection_and_stops_with_the_pool(
    database: str,
) -> None:
    pool = await create_pool(database, min_size=0, max_size=1, idle_seconds=0.1)
    async with pool.acquire() as conn:
        await conn.fetchval("SELECT 1")
    async with asyncio.timeout(10):
        while pool.get_size():
            await asyncio.sleep(0.01)
    await pool.close()
    async with asyncio.timeout(10):
        while pool._sweep is not None:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
    async with _pool(database, min_size=0, max_size=1, idle_seconds=0) as off:
        assert off._sweep is None  # type: ignore[attr-defined]  # 0: none closed, as asyncpg's 0


async def test_a_closed_pool_refuses_to_hand_out_connections(database: str) -> None:
    pool = await create_pool(database, min_size=1, max_size=1)
    await pool.close()
    with pytest.raises(asyncpg.InterfaceError):
        await pool.acquire()
