"""Which notifications a Bankrail process follows: every process follows the service clock,
an API process also the revocation of signing keys and clients (its caches of them), and
only the worker follows the job and webhook channels (an API process of
`serve --workers N` would otherwise be woken by every commit that queues work it never
does)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest

from bankrail.app import create_app
from bankrail.config import Settings
from bankrail.core.clock import CLOCK_CHANNEL, ServiceClock
from bankrail.events.outbox import WEBHOOK_CHANNEL
from bankrail.jobs.queue import JOBS_CHANNEL
from bankrail.process import ProcessResources
from bankrail.security.keys import CREDENTIALS_CHANNEL
from bankrail.worker import run_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, admin_token="operator-token-for-tests")


async def test_the_worker_follows_the_clock_and_its_work(database: str, tmp_path: Path) -> None:
    stop = asyncio.Event()
    seen: list[set[str]] = []

    def started(process: ProcessResources) -> None:
        seen.append(set(process.listener.channels))
        stop.set()

    await asyncio.wait_for(run_worker(_settings(tmp_path), database, stop, started=started), 30)
    assert seen == [{CLOCK_CHANNEL, JOBS_CHANNEL, WEBHOOK_CHANNEL}]


async def test_an_api_only_process_follows_only_the_clock_and_revocations(
    database: str, tmp_path: Path
) -> None:
    app = create_app(_settings(tmp_path), database)
    async with app.router.lifespan_context(app):
        assert set(app.state.listener.channels) == {CLOCK_CHANNEL, CREDENTIALS_CHANNEL}


async def test_an_api_only_process_still_follows_the_service_clock(
    database: str, tmp_path: Path
) -> None:
    app = create_app(_settings(tmp_path), database)
    async with app.router.lifespan_context(app):
        clock = app.state.context.clock
        conn = await asyncpg.connect(database)
        try:
            await _eventually(lambda: _listening(conn))
            # Another process moves the shared clock: this one learns it only by the NOTIFY.
            await ServiceClock().advance(conn, 3600)
        finally:
            await conn.close()

        async def moved() -> bool:
            return clock.offset >= timedelta(hours=1)

        await _eventually(moved)
        assert clock.offset >= timedelta(hours=1)


async def _listening(conn: asyncpg.Connection) -> bool:
    found = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
    )
    return bool(found)


async def _eventually(condition: Callable[[], Awaitable[bool]], seconds: float = 10) -> None:
    """Poll `condition` until it holds or `seconds` pass (the caller asserts afterwards)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not await condition() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
