"""The background loop of a Bankrail process: wakes on NOTIFY or a short poll, runs due work."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import asyncpg

from bankrail.db.pool import Connection

log = logging.getLogger(__name__)

Step = Callable[[], Awaitable[int]]


class BackgroundLoop:
    """Runs `steps` repeatedly; sleeps when all of them found nothing to do.

    With `gather`, a round that found work is followed by that pause before the next, so
    that under load the work that arrives meanwhile is taken together (one claim and one
    commit for many items) rather than a few items at a time as each arrives; after an idle
    spell, a wake still runs the steps at once.
    """

    def __init__(
        self,
        name: str,
        steps: list[Step],
        *,
        poll_interval: float,
        concurrency: int = 1,
        gather: float = 0.0,
    ) -> None:
        self.name = name
        self._steps = steps
        self._poll_interval = poll_interval
        self._concurrency = concurrency
        self._gather = gather
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def alive(self) -> bool:
        """True while every task of the loop is running."""
        return bool(self._tasks) and not any(task.done() for task in self._tasks)

    def wake(self) -> None:
        """Look for work now rather than at the next poll."""
        self._wake.set()

    def start(self) -> None:
        """Start the loop's tasks."""
        self._tasks = [
            asyncio.create_task(self._run(), name=f"{self.name}-{i}")
            for i in range(self._concurrency)
        ]

    async def stop(self) -> None:
        """Let in-flight work finish, then stop."""
        self._stopped.set()
        self._wake.set()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self) -> None:
        while not self._stopped.is_set():
            # Cleared before the steps look, not after: a wake that comes while they run
            # announces work they may have looked for too early, and must not be lost.
            self._wake.clear()
            did = 0
            for step in self._steps:
                if self._stopped.is_set():
                    return
                try:
                    did += await step()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("background step of %s failed", self.name)
                    await asyncio.sleep(self._poll_interval)
            if self._stopped.is_set():
                return
            if did == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._poll_interval)
            elif self._gather:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), self._gather)


class Listener:
    """A dedicated connection that LISTENs and dispatches notifications; reconnects on loss.

    Without a `dsn` (no connection may LISTEN: docs/operations.md, "Connection poolers") it
    calls every handler every `poll_interval` seconds instead, as if each channel had been
    notified."""

    def __init__(
        self,
        dsn: str | None,
        handlers: dict[str, Callable[[], None]],
        *,
        poll_interval: float = 1.0,
    ) -> None:
        self._dsn = dsn
        self._handlers = handlers
        self._poll_interval = poll_interval
        self._task: asyncio.Task[None] | None = None
        self._conn: Connection | None = None

    @property
    def channels(self) -> list[str]:
        """The channels this listener follows."""
        return list(self._handlers)

    def start(self) -> None:
        """Begin listening in the background."""
        self._task = asyncio.create_task(self._run(), name="listener")

    async def stop(self) -> None:
        """Stop listening and close the connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()

    async def _run(self) -> None:
        if self._dsn is None:
            await self._poll()
            return
        while True:
            try:
                lost = asyncio.Event()
                self._conn = await asyncpg.connect(self._dsn)
                self._conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
                for channel in self._handlers:
                    await self._conn.add_listener(channel, self._dispatch)
                for handler in self._handlers.values():
                    handler()  # anything missed while disconnected is picked up now
                await lost.wait()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("notification listener lost its connection; reconnecting")
            await asyncio.sleep(1)

    async def _poll(self) -> None:
        while True:
            for handler in self._handlers.values():
                handler()
            await asyncio.sleep(self._poll_interval)

    def _dispatch(self, _conn: object, _pid: int, channel: str, _payload: object) -> None:
        handler = self._handlers.get(channel)
        if handler is not None:
            handler()


__all__ = ["BackgroundLoop", "Listener"]
