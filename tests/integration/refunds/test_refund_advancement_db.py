"""A refund's steps after acceptance, written by the rails' one writer of steps
(`bankrail_advance_transfers`), on real PostgreSQL.

Promise: whether a refund's job runs alone (`advance_refund`, the job handler) or in a leased
batch with others (`advance_due_refunds`), the refund reaches the same end: a covered refund
executes and its money leaves the account; one the balance could not cover, or that the
scheme fails, fails, its money (if held) comes back and what is left to refund of its payment
grows again, even for two refunds of one payment failing together; each ends with one
webhook event, and the ledger stays balanced.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from bankrail.core.clock import ServiceClock
from bankrail.core.powers import SANDBOX
from bankrail.ledger.service import check_ledger
from bankrail.merchants.models import MerchantAccount
from bankrail.merchants.service import get_account
from bankrail.refunds.acceptance import RefundToAccept, accept_refunds
from bankrail.refunds.service import advance_due_refunds, advance_refund, list_refunds
from support.accounts import funded_account
from support.payouts import render_problem

TTL = timedelta(hours=6)


async def _settled_payment(
    pool: asyncpg.Pool, account: MerchantAccount, amount: int, now: datetime
) -> uuid.UUID:
    payment_id = uuid.uuid4()
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO payments (id, merchant_id, merchant_account_id, amount_in_minor,"
            " currency, user_id, user_details, selection_type, status, created_at, history)"
            " VALUES ($1, $2, $3, $4, 'GBP', 'payer-1', '{}', 'user_selected',"
            " 'payment_settled', $5, '[]')",
            payment_id,
            account.merchant_id,
            account.id,
            amount,
            now,
        )
    return payment_id


async def _accept(
    pool: asyncpg.Pool,
    account: MerchantAccount,
    payment_id: uuid.UUID,
    now: datetime,
    *refunds: tuple[int, str],
) -> None:
    """Accept refunds of (amount, reference) in one batch."""
    base = RefundToAccept(
        merchant_id=account.merchant_id,
        payment_id=payment_id,
        amount=0,
        reference="",
        metadata=None,
        now=now,
    )
    items = [dataclasses.replace(base, amount=a, reference=r) for a, r in refunds]
    async with pool.acquire() as conn, conn.transaction():
        accepted = await accept_refunds(conn, items, render_problem)
    assert all(isinstance(outcome, tuple) and outcome[0] == 201 for outcome, _ in accepted)


async def _ends(
    pool: asyncpg.Pool, account: MerchantAccount, payment_id: uuid.UUID
) -> tuple[list[tuple[Any, ...]], int, int, list[str]]:
    """Each refund's (reference, status, failure reason), what the payment has refunded, the
    account's available and current balance, and the events the merchant was sent."""
    async with pool.acquire() as conn:
        refunds = await list_refunds(conn, payment_id, account.merchant_id)
        refunded = await conn.fetchval(
            "SELECT refunded_amount_in_minor FROM payments WHERE id = $1", payment_id
        )
        fresh = await get_account(conn, account.id)
        events = await conn.fetch(
            "SELECT event_type FROM events WHERE merchant_id = $1 ORDER BY event_type",
            account.merchant_id,
        )
        assert await check_ledger(conn) == []
    assert fresh is not None
    ends = sorted((r["reference"], r["status"], r.get("failure_reason")) for r in refunds)
    return (
        ends,
        int(refunded),
        fresh.available_balance,
        [e["event_type"] for e in events],
    )


EXPECTED = (
    [
        ("covered", "executed", None),
        ("fail:scheme_error", "failed", "scheme_error"),
        ("not covered", "failed", "insufficient_funds"),
    ],
    30,  # only the executed refund still counts against the payment
    100 - 30,  # its money left; the scheme's failure gave its hold back
    ["refund_executed", "refund_failed", "refund_failed"],
)


async def _scenario(pool: asyncpg.Pool, now: datetime) -> tuple[MerchantAccount, uuid.UUID]:
    account = await funded_account(pool, now, 100)
    payment_id = await _settled_payment(pool, account, 200, now)
    await _accept(
        pool,
        account,
        payment_id,
        now,
        (30, "covered"),
        (40, "fail:scheme_error"),
        (50, "not covered"),
    )
    return account, payment_id


async def test_a_leased_batch_takes_every_refund_to_its_end(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account, payment_id = await _scenario(pool, now)
    async with pool.acquire() as conn:
        ran = await advance_due_refunds(conn, now + timedelta(seconds=1), 128, powers=SANDBOX)
    assert ran >= 3
    assert await _ends(pool, account, payment_id) == EXPECTED


async def test_the_job_handler_takes_each_refund_to_the_same_end(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account, payment_id = await _scenario(pool, now)
    async with pool.acquire() as conn:
        ids = await conn.fetch("SELECT id FROM refunds WHERE payment_id = $1", payment_id)
        for row in ids:
            async with conn.transaction():
                await advance_refund(
                    conn, {"refund_id": str(row["id"])}, now + timedelta(seconds=1), powers=SANDBOX
                )
            # A second run of the same job (a duplicate) finds nothing left to do.
            async with conn.transaction():
                await advance_refund(
                    conn, {"refund_id": str(row["id"])}, now + timedelta(seconds=2), powers=SANDBOX
                )
    assert await _ends(pool, account, payment_id) == EXPECTED
