"""What every Bankrail process opens at start, API process or worker: the database pool
(with migrations applied), the service clock that follows other processes' changes, and the
key that signs webhooks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from bankrail.config import Settings
from bankrail.core.clock import CLOCK_CHANNEL, ServiceClock
from bankrail.db.migrations import migrate
from bankrail.db.pool import Pool, create_pool
from bankrail.events.delivery import WebhookKey, ensure_webhook_key
from bankrail.jobs.runner import Listener
from bankrail.rails.screening import refresh_screening_list

__all__ = ["ProcessResources", "open_process"]


@dataclass
class ProcessResources:
    """The pool, clock and webhook key of one process; `listener` follows the clock's channel
    and any others the process asked for."""

    pool: Pool
    clock: ServiceClock
    webhook_key: WebhookKey
    listener: Listener


@asynccontextmanager
async def open_process(
    settings: Settings,
    dsn: str,
    *,
    channels: dict[str, Callable[[], None]] | None = None,
    on_clock: Callable[[], None] | None = None,
) -> AsyncIterator[ProcessResources]:
    """Open the pool (migrations applied, the screening list's skeletons made by this
    release), read the service clock and the webhook key, and follow the clock's changes
    (then call `on_clock`) and `channels` until the block ends."""
    pool = await create_pool(
        dsn,
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        statement_cache_size=settings.db_statement_cache_size,
    )
    clock = ServiceClock()
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
            await refresh_screening_list(conn)
            await clock.refresh(conn)
            webhook_key = await ensure_webhook_key(conn)
    except BaseException:
        await pool.close()
        raise
    pending: set[asyncio.Task[None]] = set()

    async def refresh_clock() -> None:
        async with pool.acquire() as conn:
            await clock.refresh(conn)
        if on_clock is not None:
            on_clock()

    def on_clock_notify() -> None:
        task = asyncio.create_task(refresh_clock())
        pending.add(task)
        task.add_done_callback(pending.discard)

    listener = Listener(
        settings.listen_url(dsn), {CLOCK_CHANNEL: on_clock_notify, **(channels or {})}
    )
    listener.start()
    try:
        yield ProcessResources(pool, clock, webhook_key, listener)
    finally:
        await listener.stop()
        await pool.close()
