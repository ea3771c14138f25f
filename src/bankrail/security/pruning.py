"""The background step that deletes stored idempotency answers once their validity ended.

Without it `idempotency_keys` grows by one row per v3 request for ever, although `decide`
ignores a row older than its validity.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import asyncpg

from bankrail.core.clock import ServiceClock
from bankrail.security.idempotency import delete_expired

__all__ = ["ExpiredKeyPruner"]

log = logging.getLogger(__name__)


class ExpiredKeyPruner:
    """A `BackgroundLoop` step: every `interval` seconds, deletes the answers whose validity
    (`ttl`, in service time) has ended, `batch` rows per call, until none is left."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        clock: ServiceClock,
        *,
        ttl: timedelta,
        interval: float,
        batch: int = 1000,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._ttl = ttl
        self._interval = interval
        self._batch = batch
        self._due = 0.0
        self._running = False

    async def run(self) -> int:
        """Delete one batch when due, and return how many rows were deleted (0 when not
        due). A full batch leaves the step due, so that the loop's next round goes on."""
        if self._running or time.monotonic() < self._due:
            return 0
        self._running = True  # the loop's tasks share this step: one batch at a time
        try:
            async with self._pool.acquire() as conn:
                deleted = await delete_expired(
                    conn, expired_before=self._clock.now() - self._ttl, limit=self._batch
                )
        finally:
            self._running = False
        if deleted < self._batch:
            self._due = time.monotonic() + self._interval
        if deleted:
            log.info("deleted %d expired idempotency keys", deleted)
        return deleted
