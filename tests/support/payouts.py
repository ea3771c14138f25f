"""Payouts for the database tests, accepted as the route accepts them."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Any

import asyncpg

from bankrail.core.clock import ServiceClock
from bankrail.jobs.queue import JobQueue
from bankrail.merchants.models import MerchantAccount
from bankrail.payouts.jobs import advance_due_payouts
from bankrail.payouts.service import (
    ADVANCE_JOB,
    IdempotentRequest,
    PayoutBatcher,
    accept_payout,
    accept_v3_payout_at_once,
    advance_payout,
    open_loop_destination,
)
from bankrail.security.idempotency import fingerprint
from support.accounts import sort_code_beneficiary


async def accepted_payout(
    pool: asyncpg.Pool,
    account: MerchantAccount,
    amount: int,
    beneficiary: dict[str, Any],
    now: datetime,
) -> uuid.UUID:
    """An open-loop v3 payout from `account`, accepted in a transaction of its own (the
    funds held, or its failure noted); its id."""
    async with pool.acquire() as conn, conn.transaction():
        destination = await open_loop_destination(conn, account, "GBP", beneficiary)
        return await accept_payout(
            conn,
            api="v3",
            account=account,
            amount=amount,
            destination=destination,
            reference=beneficiary["reference"],
            now=now,
        )


async def accept_at_once(
    batcher: PayoutBatcher,
    account: MerchantAccount,
    now: datetime,
    *,
    key: str = "k1",
    amount: int = 300,
    beneficiary: dict[str, Any] | None = None,
    currency: str = "GBP",
    merchant_id: uuid.UUID | None = None,
) -> bytes | None:
    """An open-loop v3 payout from `account` through the one-statement batch, as the fast
    lane submits it under Idempotency-Key `key`; the 202 body, or None when it is not the
    common case."""
    return await accept_v3_payout_at_once(
        batcher,
        IdempotentRequest("v3:client", key, fingerprint("POST", "/v3/payouts", b"{}")),
        merchant_id=merchant_id or account.merchant_id,
        account_id=account.id,
        currency=currency,
        amount=amount,
        beneficiary=beneficiary or sort_code_beneficiary("rent"),
        metadata={"order": "42"},
        now=now,
    )


async def run_payout_batch(pool: asyncpg.Pool, now: datetime, limit: int = 128) -> int:
    """One payout job batch at `now`, as the job loop runs it; how many jobs it ran."""
    async with pool.acquire() as conn:
        return await advance_due_payouts(conn, now, limit)


def payout_queue(pool: asyncpg.Pool, clock: ServiceClock) -> JobQueue:
    """The queue as the app runs payout jobs: batches first, `advance_payout` for the rest."""
    queue = JobQueue(pool, clock)
    queue.register(ADVANCE_JOB, advance_payout)
    queue.register_batch(ADVANCE_JOB, advance_due_payouts)
    return queue


async def until_waiting_for_a_lock(
    pool: asyncpg.Pool, statement: str, task: asyncio.Task[Any]
) -> int:
    """Poll (at most 10 s) until backends running a statement that contains `statement`
    wait for a lock, and return how many; fails when `task` ends or the time runs out
    first."""
    deadline = asyncio.get_running_loop().time() + 10
    while asyncio.get_running_loop().time() < deadline and not task.done():
        waiting: int = await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE '%' || $1 || '%'",
            statement,
        )
        if waiting:
            return waiting
        await asyncio.sleep(0.005)
    raise AssertionError(f"no {statement} ever waited for a lock")
