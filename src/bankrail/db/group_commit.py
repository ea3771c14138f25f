"""Group commit: the requests of the moment written in one transaction, within one process.

Requests that arrive while a batch is being committed wait for the next one, so under load
each commit (one WAL flush, one round of locks) carries many requests, and with no load a
request is committed at once, alone. Every result is handed back only after the transaction
that holds it has committed. A batch that storage refuses (a data error, a constraint) is run
again one request at a time, so that a request's failure is its own. A batch that PostgreSQL
rolled back to break a deadlock or a serialization conflict with another transaction is run
again, as a whole, up to `ATTEMPTS` times: nothing of it was written. Any other failure (the
database unreachable) is every request's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import asyncpg

from bankrail.db.pool import Connection, Pool

__all__ = ["ATTEMPTS", "GroupCommit"]

ATTEMPTS = 3
"""Runs of a batch that PostgreSQL rolls back to resolve a conflict, before it fails."""

Item = TypeVar("Item")
Result = TypeVar("Result")


class GroupCommit(Generic[Item, Result]):
    """Runs `run(conn, items)` (one result per item, in order) for the items submitted
    meanwhile, in one transaction per batch of at most `max_batch`, with at most
    `in_flight` batches being committed at once (1: each batch waits for the one before)."""

    def __init__(
        self,
        pool: Pool,
        run: Callable[[Connection, Sequence[Item]], Awaitable[list[Result]]],
        max_batch: int = 64,
        in_flight: int = 1,
    ) -> None:
        self._pool = pool
        self._run = run
        self._max_batch = max_batch
        self._in_flight = in_flight
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._flushing = 0  # flushers that have not yet found `_pending` empty
        self._flushers: set[asyncio.Task[None]] = set()  # held, so none is collected

    async def submit(self, item: Item) -> Result:
        """The item's result, once its transaction has committed."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._flushing < self._in_flight:
            # A task of its own: a request that goes away does not cancel the others' commit.
            self._flushing += 1
            flusher = asyncio.create_task(self._flush())
            self._flushers.add(flusher)
            flusher.add_done_callback(self._flushers.discard)
        return await asyncio.shield(future)

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                await self._commit_or_fail(batch)
        finally:
            # In the step that found nothing pending: an item submitted after it starts a
            # flusher of its own. (A task's done callbacks run a step later; counting
            # tasks until then left such an item waiting for the next submission.)
            self._flushing -= 1

    async def _commit_or_fail(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        try:
            await self._commit(batch)
        except (asyncpg.DataError, asyncpg.IntegrityConstraintViolationError) as exc:
            # A row of one request that storage refuses (a balance at the edge of the
            # 64-bit range): each request alone, so that the failure is its own.
            if len(batch) == 1:
                _fail(batch, exc)
                return
            for one in batch:
                try:
                    await self._commit([one])
                except Exception as alone:
                    _fail([one], alone)
        except Exception as exc:
            _fail(batch, exc)

    async def _commit(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                async with self._pool.acquire() as conn, conn.transaction():
                    results = await self._run(conn, [item for item, _ in batch])
                break
            except asyncpg.TransactionRollbackError:
                if attempt == ATTEMPTS:
                    raise
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)


def _fail(batch: Sequence[tuple[object, asyncio.Future[Result]]], exc: Exception) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)
