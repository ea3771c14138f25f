"""The service clock: wall-clock time plus an offset that sandbox mode can advance.

Every rule that depends on time (token expiry, payment expiry, idempotency validity, webhook
retry times, rail delays) reads `ServiceClock.now()`. The offset lives in PostgreSQL so that
every process agrees on it; each process caches it and is told of changes by NOTIFY.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

CLOCK_CHANNEL = "bankrail_clock"

_MICROSECOND = timedelta(microseconds=1)


class _Connection(Protocol):
    async def fetchval(self, query: str, *args: object) -> object: ...
    async def execute(self, query: str, *args: object) -> str: ...


class ServiceClock:
    """Now, as the service sees it. Never goes backwards within one offset."""

    def __init__(self, offset: timedelta = timedelta(0)) -> None:
        self._offset = offset
        self._offset_us = offset // _MICROSECOND

    @property
    def offset(self) -> timedelta:
        """How far the service clock runs ahead of the wall clock."""
        return self._offset

    def now(self) -> datetime:
        """The current service time, timezone-aware UTC."""
        return datetime.now(UTC) + self._offset

    def now_us(self) -> int:
        """The current service time as microseconds since the Unix epoch: `now()` for what
        is kept as a number (a fraction of the cost of making a datetime)."""
        return time.time_ns() // 1000 + self._offset_us

    def set_offset(self, offset: timedelta) -> None:
        """Adopt an offset read from the database (only ever moves forward)."""
        if offset > self._offset:
            self._offset = offset
            self._offset_us = offset // _MICROSECOND

    async def refresh(self, conn: _Connection) -> None:
        """Re-read the shared offset."""
        micros = await conn.fetchval("SELECT offset_us FROM service_clock WHERE id = 1")
        if isinstance(micros, int):
            self.set_offset(timedelta(microseconds=micros))

    async def advance(self, conn: _Connection, seconds: float) -> datetime:
        """Move the shared clock forward by `seconds` and return the new now."""
        micros = await conn.fetchval(
            "UPDATE service_clock SET offset_us = offset_us + $1 WHERE id = 1 RETURNING offset_us",
            round(seconds * 1_000_000),
        )
        assert isinstance(micros, int)
        self.set_offset(timedelta(microseconds=micros))
        await conn.execute(f"NOTIFY {CLOCK_CHANNEL}")
        return self.now()
