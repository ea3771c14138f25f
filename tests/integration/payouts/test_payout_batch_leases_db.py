"""Leased payout job batches (`payouts.jobs.advance_due_payouts`, migration 0008) on real
PostgreSQL.

Promise: a batch holds its jobs only by a lease, and writes only while the decisions it took
still hold. A worker that dies after leasing leaves its jobs to run once the lease ends; a
batch whose payouts or accounts changed after its lease writes nothing and makes its jobs
due again; a batch whose write fails leaves its jobs due, for the queue to run one at a time
and reschedule. No payout takes a step twice.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime

import asyncpg
import pytest

from bankrail.core.clock import ServiceClock
from bankrail.core.powers import SANDBOX
from bankrail.ledger.service import check_ledger
from bankrail.merchants.models import MerchantAccount
from bankrail.payouts.jobs import LEASE, advance_payout
from bankrail.payouts.service import ADVANCE_JOB
from support.accounts import funded_account, sort_code_beneficiary
from support.payouts import (
    accepted_payout,
    payout_queue,
    run_payout_batch,
    until_waiting_for_a_lock,
)


async def _pending_payout(pool: asyncpg.Pool, now: datetime) -> tuple[MerchantAccount, uuid.UUID]:
    """An account and a payout from it whose one job is due at `now`."""
    account = await funded_account(pool, now, 10_000, name="Lease Ltd")
    return account, await accepted_payout(pool, account, 100, sort_code_beneficiary("rent"), now)


async def _steps_taken(pool: asyncpg.Pool, account: MerchantAccount) -> tuple[int, int]:
    """(ledger executions, payout_executed events) of the account's payouts."""
    async with pool.acquire() as conn:
        assert await check_ledger(conn) == []
        executions = await conn.fetchval(
            "SELECT count(*) FROM ledger_transactions t JOIN payouts p ON p.id = t.reference_id"
            " WHERE p.merchant_account_id = $1 AND t.kind = 'payout_execution'",
            account.id,
        )
        events = await conn.fetchval(
            "SELECT count(*) FROM events WHERE event_type = 'payout_executed' AND merchant_id = $1",
            account.merchant_id,
        )
    return executions, events


async def _stage(pool: asyncpg.Pool, payout_id: uuid.UUID) -> str:
    stage: str = await pool.fetchval("SELECT stage FROM payouts WHERE id = $1", payout_id)
    return stage


async def _jobs(
    pool: asyncpg.Pool, payout_id: uuid.UUID, now: datetime
) -> list[tuple[datetime, bool]]:
    """(run_at, whether a batch holds its lease at `now`) of each of the payout's jobs."""
    rows = await pool.fetch(
        "SELECT run_at, lease_until > $2 AS leased FROM jobs"
        " WHERE (payload ->> 'payout_id')::uuid = $1 ORDER BY id",
        payout_id,
        now,
    )
    return [(row["run_at"], bool(row["leased"])) for row in rows]


@asynccontextmanager
async def _other_transaction(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """A transaction on a connection of its own, committed when the body ends."""
    async with pool.acquire() as other, other.transaction():
        yield other


async def test_jobs_leased_by_a_worker_that_died_run_once_the_lease_ends(
    pool: asyncpg.Pool,
) -> None:
    clock = ServiceClock()
    now = clock.now()
    account, payout_id = await _pending_payout(pool, now)
    async with pool.acquire() as conn:  # a worker leases the job, then dies before writing
        leased = await conn.fetch(
            "SELECT job_id FROM bankrail_lease_transfer_jobs('payout', $1, 128, $2, $3)",
            now,
            ADVANCE_JOB,
            LEASE,
        )
    assert len(leased) == 1
    assert await _jobs(pool, payout_id, now) == [(now, True)]

    # Neither another batch nor the queue's one-at-a-time step takes it while leased.
    queue = payout_queue(pool, clock)
    clock.set_offset(LEASE / 2)
    assert await queue.run_due() == 0
    assert await _stage(pool, payout_id) == "pending"

    clock.set_offset(LEASE)
    assert await queue.run_due() == 1
    assert await _stage(pool, payout_id) == "executed"
    assert await _steps_taken(pool, account) == (1, 1)
    assert await _jobs(pool, payout_id, now) == []


async def test_a_batch_whose_payout_another_path_advanced_after_its_lease_writes_nothing(
    pool: asyncpg.Pool,
) -> None:
    now = ServiceClock().now()
    account, payout_id = await _pending_payout(pool, now)
    async with pool.acquire() as conn:  # a second job for the payout, after the first
        duplicate = await conn.fetchval(
            "INSERT INTO jobs (kind, payload, run_at) VALUES ($1, $2, $3) RETURNING id",
            ADVANCE_JOB,
            {"payout_id": str(payout_id)},
            now,
        )
    async with _other_transaction(pool) as other:
        await other.execute("SELECT 1 FROM payouts WHERE id = $1 FOR UPDATE", payout_id)
        batch = asyncio.create_task(run_payout_batch(pool, now, limit=1))  # leases the first job
        await until_waiting_for_a_lock(pool, "bankrail_advance_leased_transfers", batch)
        # Meanwhile the one-at-a-time path runs the second job: the payout executes.
        await advance_payout(other, {"payout_id": str(payout_id)}, now, powers=SANDBOX)
        await other.execute("DELETE FROM jobs WHERE id = $1", duplicate)
    assert await batch == 0
    assert await _steps_taken(pool, account) == (1, 1)
    assert await _jobs(pool, payout_id, now) == [(now, False)]  # the first job, given back

    assert await run_payout_batch(pool, now) == 1  # it finds nothing left to do
    assert await _steps_taken(pool, account) == (1, 1)
    assert await _jobs(pool, payout_id, now) == []


async def test_a_batch_whose_account_got_a_threshold_after_its_lease_writes_nothing(
    pool: asyncpg.Pool,
) -> None:
    clock = ServiceClock()
    now = clock.now()
    account, payout_id = await _pending_payout(pool, now)
    async with _other_transaction(pool) as other:
        await other.execute(
            "UPDATE merchant_accounts SET balance_threshold = 5000 WHERE id = $1", account.id
        )
        batch = asyncio.create_task(run_payout_batch(pool, now))
        await until_waiting_for_a_lock(pool, "bankrail_advance_leased_transfers", batch)
    assert await batch == 0
    assert await _stage(pool, payout_id) == "pending"
    assert await _jobs(pool, payout_id, now) == [(now, False)]

    # The account's jobs are now advance_payout's, which re-evaluates its notifications.
    queue = payout_queue(pool, clock)
    clock.set_offset(queue.runner_grace)
    assert await queue.run_due() == 1
    assert await _stage(pool, payout_id) == "executed"
    assert await _steps_taken(pool, account) == (1, 1)


async def test_a_batch_whose_write_fails_leaves_its_jobs_to_be_retried_one_at_a_time(
    pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ServiceClock()
    now = clock.now()
    account, payout_id = await _pending_payout(pool, now)
    # A held balance that the execution would take below zero: the write fails its CHECK.
    await pool.execute(
        "UPDATE ledger_accounts SET balance = 0 WHERE id = $1", account.held_ledger_id
    )
    with pytest.raises(asyncpg.CheckViolationError):
        await run_payout_batch(pool, now)
    assert await _jobs(pool, payout_id, now) == [(now, False)]  # given back

    queue = payout_queue(pool, clock)
    with caplog.at_level(logging.CRITICAL, logger="bankrail.jobs.queue"):
        assert await queue.run_due() == 1  # the batch fails, then the job alone
    job = await pool.fetchrow("SELECT attempts, last_error FROM jobs")
    assert job["attempts"] == 1
    assert "ledger_accounts_check" in job["last_error"]
    assert await _stage(pool, payout_id) == "pending"
