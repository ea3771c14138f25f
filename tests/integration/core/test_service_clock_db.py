"""Integration tests for bankrail.core.clock.ServiceClock through the service_clock table."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg

from bankrail.core.clock import CLOCK_CHANNEL, ServiceClock


async def test_new_clock_follows_the_wall_clock(pool: asyncpg.Pool) -> None:
    clock = ServiceClock()
    async with pool.acquire() as conn:
        await clock.refresh(conn)
    assert clock.offset == timedelta(0)
    before = datetime.now(UTC)
    now = clock.now()
    after = datetime.now(UTC)
    assert before <= now <= after
    assert now.tzinfo is not None


async def test_two_clocks_agree_after_refresh(pool: asyncpg.Pool) -> None:
    first, second = ServiceClock(), ServiceClock()
    async with pool.acquire() as conn:
        advanced_to = await first.advance(conn, 3600)
        assert second.offset == timedelta(0)
        await second.refresh(conn)
    assert second.offset == first.offset == timedelta(hours=1)
    assert advanced_to >= datetime.now(UTC) + timedelta(minutes=59, seconds=59)
    assert abs(second.now() - first.now()) < timedelta(seconds=1)


async def test_advance_is_additive(pool: asyncpg.Pool) -> None:
    clock = ServiceClock()
    async with pool.acquire() as conn:
        await clock.advance(conn, 10)
        await clock.advance(conn, 5.5)
        await clock.advance(conn, 0)
        assert clock.offset == timedelta(seconds=15.5)
        assert await conn.fetchval("SELECT offset_us FROM service_clock") == 15_500_000


async def test_advances_by_different_processes_add_up(pool: asyncpg.Pool) -> None:
    first, second = ServiceClock(), ServiceClock()
    async with pool.acquire() as a, pool.acquire() as b:
        await first.advance(a, 100)
        await second.advance(b, 20)  # second had not refreshed; still adds to the shared offset
        assert second.offset == timedelta(seconds=120)
        await first.refresh(a)
        assert first.offset == timedelta(seconds=120)


async def test_sub_second_advance_keeps_microseconds(pool: asyncpg.Pool) -> None:
    clock = ServiceClock()
    async with pool.acquire() as conn:
        await clock.advance(conn, 0.000_001)
        await clock.advance(conn, 1.25)
    assert clock.offset == timedelta(seconds=1.250001)


async def test_refresh_never_moves_the_clock_back(pool: asyncpg.Pool) -> None:
    clock = ServiceClock(offset=timedelta(hours=2))
    async with pool.acquire() as conn:
        await clock.refresh(conn)  # the table says 0
    assert clock.offset == timedelta(hours=2)


async def test_advance_notifies_other_processes(pool: asyncpg.Pool, database: str) -> None:
    received: list[str] = []

    def on_notify(_conn: object, _pid: int, channel: str, _payload: str) -> None:
        received.append(channel)

    listener = await asyncpg.connect(database)  # a dedicated, unpooled connection
    try:
        await listener.add_listener(CLOCK_CHANNEL, on_notify)
        async with pool.acquire() as conn:
            await ServiceClock().advance(conn, 1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while not received and loop.time() < deadline:
            await asyncio.sleep(0.01)
    finally:
        await listener.close()
    assert received == [CLOCK_CHANNEL]
