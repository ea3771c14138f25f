"""Payouts for the database tests, accepted as the route accepts them."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import asyncpg

from bankrail.core.clock import ServiceClock
from bankrail.core.jsonbody import loads
from bankrail.core.powers import SANDBOX
from bankrail.core.problems import ProblemError
from bankrail.http.problems import render_problem_bytes
from bankrail.jobs.queue import JobQueue
from bankrail.merchants.models import MerchantAccount
from bankrail.payouts.jobs import advance_due_payouts, advance_payout
from bankrail.payouts.models import OPEN_LOOP_FIELD, PayoutRequest
from bankrail.payouts.service import (
    ADVANCE_JOB,
    Keyed,
    PayoutAcceptance,
    accept_payouts,
    beneficiary_identifiers,
)
from bankrail.security.idempotency import fingerprint
from support.accounts import sort_code_beneficiary

TTL = timedelta(hours=6)


def render_problem(error: ProblemError) -> bytes:
    """Problem bodies as the service stores them."""
    return render_problem_bytes(error, "http://bankrail.test")


def payout_request(
    account: MerchantAccount,
    now: datetime,
    *,
    api: str = "v3",
    transaction_id: uuid.UUID | None = None,
    context_code: str | None = None,
    key: str | None = None,
    amount: int = 300,
    beneficiary: dict[str, Any] | None = None,
    currency: str | None = None,
    merchant_id: uuid.UUID | None = None,
    body: bytes = b"{}",
) -> Keyed:
    """An open-loop (or, with such a beneficiary, closed-loop) payout request from `account`
    as the v3 route makes it (or, with `api`, as another API's would), under Idempotency-Key
    `key` (a fresh one by default)."""
    beneficiary = beneficiary or sort_code_beneficiary("rent")
    field = OPEN_LOOP_FIELD
    if beneficiary["type"] == "payment_source":
        field = "beneficiary.payment_source_id"
    request = PayoutRequest(
        api=api,
        merchant_id=merchant_id or account.merchant_id,
        account_id=account.id,
        currency=currency or account.currency,
        amount=amount,
        beneficiary=beneficiary,
        identifiers=beneficiary_identifiers(beneficiary, field),
        field=field,
        reference=beneficiary["reference"],
        metadata={"order": "42"} if api == "v3" else None,
        transaction_id=transaction_id,
        context_code=context_code,
        now=now,
    )
    return Keyed(
        request,
        scope="v3:client",
        key=key or str(uuid.uuid4()),
        fingerprint=fingerprint("POST", "/v3/payouts", body),
        ttl=TTL,
    )


async def accept_one(pool: asyncpg.Pool, keyed: Keyed) -> tuple[int, bytes] | ProblemError:
    """The request accepted alone, in a transaction of its own; its outcome."""
    async with pool.acquire() as conn, conn.transaction():
        (outcome,) = await accept_payouts(conn, [keyed], render_problem)
    return outcome


async def accepted_payout(
    pool: asyncpg.Pool,
    account: MerchantAccount,
    amount: int,
    beneficiary: dict[str, Any],
    now: datetime,
) -> uuid.UUID:
    """An open-loop v3 payout from `account`, accepted in a transaction of its own (the
    funds held, or its failure noted); its id."""
    outcome = await accept_one(
        pool, payout_request(account, now, amount=amount, beneficiary=beneficiary)
    )
    assert not isinstance(outcome, ProblemError), outcome
    status, body = outcome
    assert status == 202, body
    return uuid.UUID(loads(body)["id"])


async def accept_at_once(
    acceptance: PayoutAcceptance,
    account: MerchantAccount,
    now: datetime,
    *,
    key: str = "k1",
    amount: int = 300,
    beneficiary: dict[str, Any] | None = None,
    currency: str = "GBP",
    merchant_id: uuid.UUID | None = None,
) -> tuple[int, bytes]:
    """An open-loop v3 payout from `account` through the group commit, as the route submits
    it under Idempotency-Key `key`; its answer (raises the problems that are not stored)."""
    return await acceptance.accept(
        payout_request(
            account,
            now,
            key=key,
            amount=amount,
            beneficiary=beneficiary,
            currency=currency,
            merchant_id=merchant_id,
        )
    )


async def run_payout_batch(pool: asyncpg.Pool, now: datetime, limit: int = 128) -> int:
    """One payout job batch at `now`, as the job loop runs it; how many jobs it ran."""
    async with pool.acquire() as conn:
        return await advance_due_payouts(conn, now, limit, powers=SANDBOX)


def payout_queue(pool: asyncpg.Pool, clock: ServiceClock) -> JobQueue:
    """The queue as the app runs payout jobs: batches first, `advance_payout` for the rest."""
    queue = JobQueue(pool, clock)
    queue.register(ADVANCE_JOB, partial(advance_payout, powers=SANDBOX))
    queue.register_batch(ADVANCE_JOB, partial(advance_due_payouts, powers=SANDBOX))
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
