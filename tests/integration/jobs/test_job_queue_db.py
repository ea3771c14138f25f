"""Integration tests for bankrail.jobs.queue.JobQueue on real PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from bankrail.core.clock import ServiceClock
from bankrail.db.pool import Connection
from bankrail.jobs.queue import JobHandler, JobQueue, enqueue, retry_delay


async def _enqueue(
    pool: asyncpg.Pool, kind: str, payload: dict[str, Any], run_at: datetime
) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await enqueue(conn, kind, payload, run_at)


async def _jobs(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    async with pool.acquire() as conn:
        return await conn.fetch("SELECT kind, payload, run_at, attempts, last_error FROM jobs")


async def test_a_job_runs_once_and_is_deleted(pool: asyncpg.Pool) -> None:
    clock = ServiceClock()
    queue = JobQueue(pool, clock)
    seen: list[tuple[dict[str, Any], datetime]] = []

    async def handler(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
        seen.append((payload, now))

    queue.register("greet", handler)
    enqueued_at = clock.now()
    await _enqueue(pool, "greet", {"name": "Ada", "n": 1}, enqueued_at)
    assert await queue.run_due() == 1
    assert await queue.run_due() == 0
    assert await queue.run_one() is False
    assert len(seen) == 1
    assert seen[0][0] == {"name": "Ada", "n": 1}
    assert seen[0][1] >= enqueued_at
    assert await _jobs(pool) == []


async def test_a_handlers_writes_commit_with_the_job(pool: asyncpg.Pool) -> None:
    queue = JobQueue(pool, ServiceClock())

    async def handler(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
        await conn.execute("INSERT INTO done (id) VALUES ($1)", payload["id"])

    async with pool.acquire() as conn:
        await conn.execute("CREATE TABLE done (id int PRIMARY KEY)")
    queue.register("write", handler)
    await _enqueue(pool, "write", {"id": 7}, ServiceClock().now())
    assert await queue.run_due() == 1
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT array_agg(id) FROM done") == [7]


async def test_a_failing_job_is_retried_later(
    pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ServiceClock()
    queue = JobQueue(pool, clock)
    calls: list[datetime] = []

    async def handler(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
        calls.append(now)
        await conn.execute("CREATE TABLE partial_effect (x int)")  # rolled back with the failure
        raise ValueError("upstream unavailable")

    queue.register("flaky", handler)
    await _enqueue(pool, "flaky", {"id": 1}, clock.now())
    with caplog.at_level(logging.ERROR, logger="bankrail.jobs.queue"):
        assert await queue.run_one() is True
        assert await queue.run_one() is False  # not due again yet
    assert len(calls) == 1
    [job] = await _jobs(pool)
    assert job["attempts"] == 1
    assert job["run_at"] == calls[0] + retry_delay(1)
    assert job["last_error"] == "ValueError: upstream unavailable"
    assert "flaky" in caplog.text
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT to_regclass('partial_effect')") is None

    # After the delay it runs again, and a second failure doubles the delay.
    async with pool.acquire() as conn:
        await clock.advance(conn, retry_delay(1).total_seconds())
    with caplog.at_level(logging.CRITICAL, logger="bankrail.jobs.queue"):
        assert await queue.run_one() is True
    assert len(calls) == 2
    [job] = await _jobs(pool)
    assert job["attempts"] == 2
    assert job["run_at"] == calls[1] + retry_delay(2)


async def test_a_job_of_an_unknown_kind_is_kept_and_retried(
    pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    queue = JobQueue(pool, ServiceClock())
    await _enqueue(pool, "nobody-handles-this", {}, ServiceClock().now())
    with caplog.at_level(logging.CRITICAL, logger="bankrail.jobs.queue"):
        assert await queue.run_due() == 1
    [job] = await _jobs(pool)
    assert job["attempts"] == 1
    assert "no handler" in job["last_error"]


async def test_a_future_job_waits_for_the_service_clock(pool: asyncpg.Pool) -> None:
    clock = ServiceClock()
    queue = JobQueue(pool, clock)
    ran: list[datetime] = []

    async def handler(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
        ran.append(now)

    queue.register("later", handler)
    run_at = clock.now() + timedelta(hours=1)
    await _enqueue(pool, "later", {}, run_at)
    assert await queue.run_due() == 0
    assert ran == []
    async with pool.acquire() as conn:
        await clock.advance(conn, 1800)
    assert await queue.run_due() == 0
    assert ran == []
    async with pool.acquire() as conn:
        await clock.advance(conn, 1800)
    assert await queue.run_due() == 1
    assert len(ran) == 1
    assert ran[0] >= run_at
    assert await _jobs(pool) == []


async def test_due_jobs_run_in_run_at_order(pool: asyncpg.Pool) -> None:
    clock = ServiceClock()
    queue = JobQueue(pool, clock)
    order: list[int] = []

    async def handler(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
        order.append(payload["n"])

    queue.register("ordered", handler)
    base = clock.now() - timedelta(minutes=10)
    for n in (3, 1, 2):
        await _enqueue(pool, "ordered", {"n": n}, base + timedelta(seconds=n))
    assert await queue.run_due() == 3
    assert order == [1, 2, 3]


async def test_two_workers_run_each_of_200_jobs_exactly_once(pool: asyncpg.Pool) -> None:
    clock = ServiceClock()
    async with pool.acquire() as conn:
        await conn.execute(
            "CREATE TABLE job_effects (job_id int PRIMARY KEY, worker text NOT NULL)"
        )
        await conn.executemany(
            "INSERT INTO jobs (kind, payload, run_at) VALUES ('count', $1, $2)",
            [({"id": i}, clock.now()) for i in range(200)],
        )

    def handler_for(worker: str) -> JobHandler:
        async def handler(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
            # A unique violation here would mean a job ran twice.
            await conn.execute(
                "INSERT INTO job_effects (job_id, worker) VALUES ($1, $2)", payload["id"], worker
            )
            await asyncio.sleep(0)

        return handler

    workers = []
    for name in ("a", "b"):
        queue = JobQueue(pool, clock)
        queue.register("count", handler_for(name))
        workers.append(queue)
    ran = await asyncio.gather(*(w.run_due() for w in workers))

    assert sum(ran) == 200
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM jobs") == 0
        ids = await conn.fetchval("SELECT array_agg(job_id ORDER BY job_id) FROM job_effects")
        assert ids == list(range(200))
        per_worker = {
            r["worker"]: r["count"]
            for r in await conn.fetch("SELECT worker, count(*) FROM job_effects GROUP BY worker")
        }
    assert per_worker == {name: n for name, n in zip(("a", "b"), ran, strict=True) if n}


async def test_a_batch_commits_its_jobs_together_and_reschedules_only_the_failing_one(
    pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ServiceClock()
    queue = JobQueue(pool, clock)
    async with pool.acquire() as conn:
        await conn.execute("CREATE TABLE batch_effects (n int PRIMARY KEY)")

    async def handler(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
        await conn.execute("INSERT INTO batch_effects (n) VALUES ($1)", payload["n"])
        if payload["n"] == 2:
            raise ValueError("two is unlucky")

    queue.register("batched", handler)
    for n in range(5):
        await _enqueue(pool, "batched", {"n": n}, clock.now() - timedelta(seconds=10 - n))
    with caplog.at_level(logging.CRITICAL, logger="bankrail.jobs.queue"):
        assert await queue.run_batch(10) == 5
    async with pool.acquire() as conn:
        effects = await conn.fetchval("SELECT array_agg(n ORDER BY n) FROM batch_effects")
    assert effects == [0, 1, 3, 4]  # the failing job's own insert was rolled back
    [job] = await _jobs(pool)
    assert job["payload"] == {"n": 2}
    assert job["attempts"] == 1


async def _batch_setup(
    pool: asyncpg.Pool, clock: ServiceClock, count: int, due_ago: timedelta = timedelta(seconds=1)
) -> JobQueue:
    """A queue whose kind `many` has a handler (one job) and a batch runner (many at a time),
    each recording which path ran which job."""
    queue = JobQueue(pool, clock)
    async with pool.acquire() as conn:
        await conn.execute("CREATE TABLE ran (n int PRIMARY KEY, path text NOT NULL)")

    async def one(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
        await conn.execute("INSERT INTO ran (n, path) VALUES ($1, 'one')", payload["n"])

    async def many(conn: Connection, now: datetime, limit: int) -> int:
        async with conn.transaction():
            return await _run_many(conn, now, limit)

    async def _run_many(conn: Connection, now: datetime, limit: int) -> int:
        rows = await conn.fetch(
            "SELECT id, payload FROM jobs WHERE kind = 'many' AND run_at <= $1 AND"
            " (payload ->> 'n')::int % 2 = 0 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED",
            now,
            limit,
        )
        for row in rows:
            await conn.execute("INSERT INTO ran (n, path) VALUES ($1, 'many')", row["payload"]["n"])
        await conn.execute("DELETE FROM jobs WHERE id = ANY($1::bigint[])", [r["id"] for r in rows])
        return len(rows)

    queue.register("many", one)
    queue.register_batch("many", many)
    for n in range(count):
        await _enqueue(pool, "many", {"n": n}, clock.now() - due_ago)
    return queue


async def _paths(pool: asyncpg.Pool) -> dict[int, str]:
    async with pool.acquire() as conn:
        return {r["n"]: r["path"] for r in await conn.fetch("SELECT n, path FROM ran")}


async def test_a_batch_runner_takes_what_it_can_and_the_handler_runs_the_rest(
    pool: asyncpg.Pool,
) -> None:
    clock = ServiceClock()
    queue = await _batch_setup(pool, clock, 10)
    queue.runner_batch_size = 3
    assert await queue.run_due() == 10
    paths = await _paths(pool)
    assert paths == {n: ("many" if n % 2 == 0 else "one") for n in range(10)}
    assert await _jobs(pool) == []


async def test_a_job_the_runner_cannot_take_waits_its_grace_before_running_alone(
    pool: asyncpg.Pool,
) -> None:
    clock = ServiceClock()
    queue = await _batch_setup(pool, clock, 4, due_ago=timedelta(0))
    assert await queue.run_due() == 2  # the runner's share at once
    assert await _paths(pool) == {0: "many", 2: "many"}
    clock.set_offset(queue.runner_grace)
    assert await queue.run_due() == 2
    assert await _paths(pool) == {0: "many", 1: "one", 2: "many", 3: "one"}
    assert await _jobs(pool) == []


async def test_a_failing_batch_rolls_back_whole_and_its_jobs_run_one_at_a_time(
    pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ServiceClock()
    queue = await _batch_setup(pool, clock, 4)

    async def broken(conn: Connection, now: datetime, limit: int) -> int:
        async with conn.transaction():
            await conn.execute("INSERT INTO ran (n, path) VALUES (100, 'broken')")
            raise RuntimeError("the batch statement failed")

    queue.register_batch("many", broken)
    with caplog.at_level(logging.ERROR, logger="bankrail.jobs.queue"):
        assert await queue.run_due() == 4
    assert await _paths(pool) == {n: "one" for n in range(4)}  # the batch's insert is gone
    assert await _jobs(pool) == []
    assert any("running them one at a time" in r.getMessage() for r in caplog.records)
