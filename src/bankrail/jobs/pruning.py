"""The background step that deletes what is kept only for a while (docs/operations.md,
"Retention"): stored idempotency answers once their validity ended, accepted request
signatures once the replay window ended, finished webhook deliveries with their attempts
and events once their retention ended.

Without it `idempotency_keys` grows by one row per v3 request, and the delivery log by one
delivery, one event and at least one attempt per event, for ever. Each kind of row is
deleted by its own area's function (`Retention.delete`), in batches of at most `batch` rows
per statement: a batch locks only the rows it deletes, skips rows another transaction holds
(`FOR UPDATE SKIP LOCKED`), and commits at once, so no request waits for a batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from bankrail.core.clock import ServiceClock
from bankrail.db.pool import Connection

__all__ = ["Pruner", "Retention"]

log = logging.getLogger(__name__)

# Deletes up to `limit` rows whose time (in service time) is at or before `cutoff`, and
# returns how many it deleted.
Delete = Callable[[Connection, datetime, int], Awaitable[int]]


@dataclass(frozen=True)
class Retention:
    """What is kept for `keep` (service time) and then deleted by `delete`; `what` names it
    in the log."""

    what: str
    keep: timedelta
    delete: Delete


class Pruner:
    """A `BackgroundLoop` step: every `interval` seconds, deletes for each retention the rows
    whose time has ended, `batch` rows per statement, until none is left."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        clock: ServiceClock,
        retentions: list[Retention],
        *,
        interval: float,
        batch: int = 1000,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._retentions = retentions
        self._interval = interval
        self._batch = batch
        self._due = [0.0] * len(retentions)
        self._running = False

    async def run(self) -> int:
        """Delete one batch of each retention that is due, and return how many rows were
        deleted (0 when none is due). A full batch leaves its retention due, so that the
        loop's next round goes on."""
        if self._running:
            return 0
        self._running = True  # the loop's tasks share this step: one batch at a time
        deleted_now = 0
        try:
            for index, retention in enumerate(self._retentions):
                if time.monotonic() < self._due[index]:
                    continue
                async with self._pool.acquire() as conn:
                    deleted = await retention.delete(
                        conn, self._clock.now() - retention.keep, self._batch
                    )
                if deleted < self._batch:
                    self._due[index] = time.monotonic() + self._interval
                if deleted:
                    log.info("deleted %d %s", deleted, retention.what)
                deleted_now += deleted
        finally:
            self._running = False
        return deleted_now
