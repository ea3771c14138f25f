"""A durable job queue: jobs survive restarts, and each runs in the transaction that deletes it,
so a job's database effects happen exactly once even when workers crash or race."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from bankrail.core.clock import ServiceClock
from bankrail.db.pool import Connection

log = logging.getLogger(__name__)

JOBS_CHANNEL = "bankrail_jobs"

# A due job, unless a batch runner holds its lease, or it is of a kind in $2 and fell due
# after $3 (left to the batch runners).
_DUE = (
    "run_at <= $1 AND (lease_until IS NULL OR lease_until <= $1)"
    " AND (kind <> ALL($2::text[]) OR run_at <= $3)"
)

# The claim of up to $4 such jobs, oldest first, skipping those another worker holds.
_CLAIM = (
    f"SELECT id, kind, payload, attempts FROM jobs WHERE {_DUE}"
    " ORDER BY run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED"
)

# Whether _CLAIM would find a job (without locking anything): most of the time it would not,
# and asking costs one round trip instead of a transaction's three.
_ANY_DUE = f"SELECT EXISTS (SELECT FROM jobs WHERE {_DUE})"

JobHandler = Callable[[Connection, dict[str, Any], datetime], Awaitable[None]]
# Claims up to n due jobs of its kind that it can run together, runs and deletes them, and
# returns how many it ran. It is given a connection outside any transaction and commits its
# own work; it may hold jobs between transactions by a lease (`lease_until`, service time),
# which the other claims respect. When it fails, the jobs it took must be left due
# (or done), since the queue then runs as many due jobs one at a time.
BatchRunner = Callable[[Connection, datetime, int], Awaitable[int]]


async def enqueue(conn: Connection, kind: str, payload: dict[str, Any], run_at: datetime) -> None:
    """Schedule a job at `run_at` (service time), in the caller's transaction."""
    await conn.execute(
        "WITH j AS (INSERT INTO jobs (kind, payload, run_at) VALUES ($1, $2, $3))"
        f" SELECT pg_notify('{JOBS_CHANNEL}', '')",
        kind,
        payload,
        run_at,
    )


# Jobs a batch runner took but did not run, due again at once for the next claim (the job
# loops woken, as by a new job).
_GIVE_BACK = (
    "WITH j AS (UPDATE jobs SET lease_until = NULL WHERE id = ANY($1::bigint[]))"
    f" SELECT pg_notify('{JOBS_CHANNEL}', '')"
)


async def give_back(conn: Connection, job_ids: list[int]) -> None:
    """End the lease of jobs a batch runner took but did not run (none: nothing is sent), so
    that the next claim takes them at once."""
    if job_ids:
        await conn.execute(_GIVE_BACK, job_ids)


def retry_delay(attempts: int) -> timedelta:
    """How long a failed job waits before its next try: 1 s doubling, at most 5 minutes."""
    return timedelta(seconds=min(300, 2 ** max(0, attempts - 1)))


class JobQueue:
    """Runs due jobs with the handlers registered for their kinds."""

    def __init__(self, pool: asyncpg.Pool, clock: ServiceClock) -> None:
        self._pool = pool
        self._clock = clock
        self._handlers: dict[str, JobHandler] = {}
        self._batch_runners: dict[str, BatchRunner] = {}
        # Jobs per batch of a runner: these share one commit without holding locks for
        # long, since the runner writes them all with one statement.
        self.runner_batch_size = 128
        # Jobs per transaction in run_due: larger batches share one commit, smaller ones
        # hold the rows they lock (a merchant account's ledger rows) for less time.
        self.batch_size = 1
        # How long run_due leaves a due job of a kind with a batch runner to the runner
        # before running it alone. Under load the runners are busy (or another worker's
        # batch holds the jobs) at the moment a new job falls due; taken alone at once, it
        # would cost several times its share of a batch. The jobs a runner cannot take
        # start this much later.
        self.runner_grace = timedelta(milliseconds=200)

    def register(self, kind: str, handler: JobHandler) -> None:
        """Use `handler` for jobs of this kind."""
        self._handlers[kind] = handler

    def register_batch(self, kind: str, runner: BatchRunner) -> None:
        """Run the jobs of this kind that `runner` can take many at a time with it; the
        others still run one by one with the kind's handler, once due for `runner_grace`
        (and all of them do, at once, while a batch fails)."""
        self._batch_runners[kind] = runner

    async def run_one(self) -> bool:
        """Run one due job, if any; returns False when none is due."""
        return await self.run_batch(1) > 0

    async def run_batch(self, size: int, *, leave_to_runners: bool = False) -> int:
        """Run up to `size` due jobs in one transaction; returns how many it took. With
        `leave_to_runners`, a job of a kind with a batch runner is taken only once it has been
        due for `runner_grace`.

        Each job runs in its own savepoint, so a failing job rolls back only its own effects
        and is rescheduled, while the others commit. One commit (one WAL flush) for the whole
        batch is what makes a busy queue cheap.
        """
        if size == 1:
            return await self._run_alone(leave_to_runners=leave_to_runners)
        now = self._clock.now()
        async with self._pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                _CLAIM, now, *self._left_to_runners(now, leave_to_runners), size
            )
            done: list[int] = []
            for row in rows:
                if await self._run_job(conn, row, now):
                    done.append(row["id"])
            if done:
                await conn.execute("DELETE FROM jobs WHERE id = ANY($1::bigint[])", done)
            return len(rows)

    def _left_to_runners(self, now: datetime, leave: bool) -> tuple[list[str], datetime]:
        """The kinds and time of the jobs left to the batch runners ($2 and $3 of _DUE)."""
        if not leave or not self._batch_runners:
            return [], now
        return list(self._batch_runners), now - self.runner_grace

    async def _run_alone(self, *, leave_to_runners: bool = False) -> int:
        """Run one due job in a transaction of its own, without the savepoint a batch needs
        (two round trips fewer): when it fails, the whole transaction rolls back and the job
        is rescheduled afterwards."""
        now = self._clock.now()
        left = self._left_to_runners(now, leave_to_runners)
        async with self._pool.acquire() as conn:
            if not await conn.fetchval(_ANY_DUE, now, *left):
                return 0
            row: asyncpg.Record | None = None
            try:
                async with conn.transaction():
                    row = await conn.fetchrow(_CLAIM, now, *left, 1)
                    if row is None:
                        return 0
                    await self._handler(row)(conn, row["payload"], now)
                    await conn.execute("DELETE FROM jobs WHERE id = $1", row["id"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if row is None:
                    raise  # the claim itself failed: nothing ran
                log.exception("job %s (%s) failed", row["id"], row["kind"])
                # Rolled back, so the job is unlocked: another worker may already be running
                # it again, in which case this waits for it and then counts one more attempt.
                await self._reschedule(conn, row, now, exc)
            return 1

    def _handler(self, row: asyncpg.Record) -> JobHandler:
        handler = self._handlers.get(row["kind"])
        if handler is None:
            raise LookupError(f"no handler for job kind {row['kind']!r}")
        return handler

    async def _reschedule(
        self, conn: Connection, row: asyncpg.Record, now: datetime, exc: Exception
    ) -> None:
        attempts = row["attempts"] + 1
        await conn.execute(
            "UPDATE jobs SET attempts = $2, run_at = $3, last_error = $4 WHERE id = $1",
            row["id"],
            attempts,
            now + retry_delay(attempts),
            f"{type(exc).__name__}: {exc}"[:2000],
        )

    async def _run_job(self, conn: Connection, row: asyncpg.Record, now: datetime) -> bool:
        """Run one claimed job in a savepoint; True when it succeeded (and may be deleted)."""
        try:
            handler = self._handler(row)
            async with conn.transaction():
                await handler(conn, row["payload"], now)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("job %s (%s) failed", row["id"], row["kind"])
            await self._reschedule(conn, row, now, exc)
            return False
        return True

    async def _run_with_runners(self, limit: int) -> int:
        """One batch of each kind that has a batch runner; returns how many jobs ran.

        When a batch fails (having written nothing and left its jobs due), as many jobs then
        run one at a time, so a job that keeps failing is rescheduled (and leaves the
        batches) as it would be without a runner.
        """
        ran = 0
        for kind, runner in self._batch_runners.items():
            size = min(self.runner_batch_size, limit - ran)
            if size <= 0:
                break
            now = self._clock.now()
            try:
                async with self._pool.acquire() as conn:
                    ran += await runner(conn, now, size)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("a batch of %s jobs failed; running them one at a time", kind)
                for _ in range(size):
                    if await self._run_alone() == 0:
                        break
                    ran += 1
        return ran

    async def run_due(self, limit: int = 1000) -> int:
        """Run the jobs due now until none is left (or `limit` ran); returns how many ran.

        A batch that was not full took every due job of its kinds: jobs that fall due while
        it ran are left to the next call, so that a caller pausing between calls under load
        gets them in one batch rather than a few at a time.
        """
        ran = 0
        while ran < limit:
            batched = await self._run_with_runners(limit - ran)
            alone = 0
            if ran + batched < limit:
                size = min(self.batch_size, limit - ran - batched)
                alone = await self.run_batch(size, leave_to_runners=True)
            ran += batched + alone
            if alone == 0 and batched < self.runner_batch_size:
                break
        return ran
