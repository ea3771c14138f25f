"""The bank's attempts at a payment on a mandate (`payments.jobs.advance_payment`,
`mandates.charges.attempt_charge`) on real PostgreSQL, each attempt run by hand at a chosen
service time.

Promise: the bank pays from the payer's simulated balance and takes the amount from it; a
payment it cannot cover is asked again on the policy's pace (leaving the balance untouched)
until its window ends, then fails with `insufficient_funds`; a smart retry never leaves the
payer below its minimum; a payment without retry fails at its first attempt.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from bankrail.core.clock import ServiceClock
from bankrail.mandates.service import set_remitter_balance
from bankrail.merchants.models import MerchantAccount
from bankrail.payments.jobs import ADVANCE_JOB, advance_payment
from bankrail.payments.mandate_creation import MandatePaymentToCreate, create_mandate_payments
from bankrail.payments.schemas import PaymentRequest
from support.accounts import funded_account
from support.payments import new_mandate


async def _authorised_mandate(
    pool: asyncpg.Pool, account: MerchantAccount, now: datetime, balance: int
) -> uuid.UUID:
    mandate_id = await new_mandate(pool, account, now)
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE mandates SET status = 'authorized', authorized_at = $2,"
            " remitter_balance_in_minor = $3 WHERE id = $1",
            mandate_id,
            now,
            balance,
        )
    return mandate_id


async def _pay(
    pool: asyncpg.Pool,
    account: MerchantAccount,
    mandate_id: uuid.UUID,
    now: datetime,
    retry: dict[str, Any] | None,
) -> uuid.UUID:
    body = {
        "amount_in_minor": 1_000,
        "currency": "GBP",
        "payment_method": {"type": "mandate", "mandate_id": str(mandate_id), "retry": retry},
    }
    request = PaymentRequest.model_validate(body)
    async with pool.acquire() as conn, conn.transaction():
        [(outcome, value)] = await create_mandate_payments(
            conn, [MandatePaymentToCreate(request, account.merchant_id, now)]
        )
    assert value is not None, outcome
    return uuid.UUID(value["id"])


async def _attempt(pool: asyncpg.Pool, payment_id: uuid.UUID, at: datetime) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await advance_payment(conn, {"payment_id": str(payment_id)}, at)


async def _state(
    pool: asyncpg.Pool, payment_id: uuid.UUID, mandate_id: uuid.UUID
) -> tuple[str, str | None, int, list[datetime]]:
    """The payment's status and failure reason, the payer's balance, and when the bank's
    next steps are due."""
    async with pool.acquire() as conn:
        payment = await conn.fetchrow(
            "SELECT status, failure_reason FROM payments WHERE id = $1", payment_id
        )
        balance = await conn.fetchval(
            "SELECT remitter_balance_in_minor FROM mandates WHERE id = $1", mandate_id
        )
        jobs = await conn.fetch(
            "SELECT run_at FROM jobs WHERE kind = $1 AND payload ->> 'payment_id' = $2"
            " ORDER BY run_at",
            ADVANCE_JOB,
            str(payment_id),
        )
    assert payment is not None
    return payment["status"], payment["failure_reason"], balance, [j["run_at"] for j in jobs]


async def test_a_smart_retry_asks_hourly_and_keeps_the_minimum(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now)
    mandate_id = await _authorised_mandate(pool, account, now, balance=1_050)
    smart = {"type": "smart", "for": "1d", "ensure_minimum_balance_in_minor": 100}
    payment_id = await _pay(pool, account, mandate_id, now, smart)
    hour = timedelta(hours=1)
    # 1,050 would leave the payer 50: asked again an hour later, nothing taken.
    await _attempt(pool, payment_id, now)
    assert await _state(pool, payment_id, mandate_id) == (
        "authorized",
        None,
        1_050,
        [now, now + hour],
    )
    async with pool.acquire() as conn:
        await set_remitter_balance(conn, mandate_id, 1_100)
    await _attempt(pool, payment_id, now + hour)
    status, reason, balance, _ = await _state(pool, payment_id, mandate_id)
    assert (status, reason, balance) == ("payment_executed", None, 100)


async def test_a_standard_retry_fails_when_its_window_ends(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now)
    mandate_id = await _authorised_mandate(pool, account, now, balance=999)
    payment_id = await _pay(pool, account, mandate_id, now, {"type": "standard", "for": "30m"})
    await _attempt(pool, payment_id, now)
    _, _, _, due = await _state(pool, payment_id, mandate_id)
    assert due == [now, now + timedelta(minutes=5)]
    # The last attempt is at the window's end, then the payment fails.
    await _attempt(pool, payment_id, now + timedelta(minutes=29))
    _, _, _, due = await _state(pool, payment_id, mandate_id)
    assert due[-1] == now + timedelta(minutes=30)
    await _attempt(pool, payment_id, now + timedelta(minutes=30))
    status, reason, balance, _ = await _state(pool, payment_id, mandate_id)
    assert (status, reason, balance) == ("payment_failed", "insufficient_funds", 999)


async def test_without_retry_the_first_attempt_decides(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now)
    mandate_id = await _authorised_mandate(pool, account, now, balance=1_500)
    first = await _pay(pool, account, mandate_id, now, None)
    second = await _pay(pool, account, mandate_id, now, None)  # accepted: 1,000 <= 1,500
    await _attempt(pool, first, now)
    assert (await _state(pool, first, mandate_id))[:3] == ("payment_executed", None, 500)
    # The first took 1,000: the bank cannot pay the second, which fails at once.
    await _attempt(pool, second, now)
    status, reason, balance, due = await _state(pool, second, mandate_id)
    assert (status, reason, balance, due) == ("payment_failed", "insufficient_funds", 500, [now])
