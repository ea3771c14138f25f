"""Refund acceptance (`refunds.acceptance.accept_refunds`, run by `RefundAcceptance`) on real
PostgreSQL.

Promise: a refund is decided by the same rules whether it is committed alone or with the other
requests of the moment (group commit): the refunds of one payment never exceed it, each hold
sees the holds before it and one the available balance cannot cover is accepted to fail with
`insufficient_funds`; a key is used once, a second use in the same batch is in flight (409);
a refused request's answer is stored under its key and nothing else is written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import datetime, timedelta

import asyncpg
import orjson

from bankrail.core.clock import ServiceClock
from bankrail.core.problems import CONFLICT, ProblemError
from bankrail.merchants.models import MerchantAccount
from bankrail.merchants.service import get_account
from bankrail.refunds.acceptance import (
    ADVANCE_JOB,
    RefundAcceptance,
    RefundToAccept,
    accept_refunds,
)
from bankrail.security.idempotency import KeyedRequest, Outcome
from support.accounts import funded_account
from support.payouts import render_problem

TTL = timedelta(hours=6)
Answer = tuple[int, bytes] | BaseException


async def _settled_payment(
    pool: asyncpg.Pool, account: MerchantAccount, amount: int, now: datetime
) -> uuid.UUID:
    """A payment of `amount` into the account, settled (its money is not credited: the tests
    choose the account's balance themselves)."""
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


def _refund(
    account: MerchantAccount,
    payment_id: uuid.UUID,
    amount: int,
    now: datetime,
    key: str | None = None,
) -> RefundToAccept:
    body = orjson.dumps({"payment": str(payment_id), "amount_in_minor": amount})
    return RefundToAccept(
        merchant_id=account.merchant_id,
        payment_id=payment_id,
        amount=amount,
        reference="refund",
        metadata=None,
        now=now,
        keyed=KeyedRequest("v3:test", key or str(uuid.uuid4()), body, TTL),
    )


async def _accept(acceptance: RefundAcceptance, *items: RefundToAccept) -> list[Answer]:
    """The answers of requests sent together (group commit decides how they are batched)."""

    async def one(item: RefundToAccept) -> tuple[int, bytes]:
        answer, _ = await acceptance.accept_created(item)
        return answer

    return list(await asyncio.gather(*(one(item) for item in items), return_exceptions=True))


async def _accept_batch(pool: asyncpg.Pool, *items: RefundToAccept) -> list[Outcome]:
    """The outcomes of requests decided in one batch, committed in one transaction."""
    async with pool.acquire() as conn, conn.transaction():
        accepted = await accept_refunds(conn, items, render_problem)
    return [outcome for outcome, _ in accepted]


async def _refunds(pool: asyncpg.Pool, payment_id: uuid.UUID) -> list[asyncpg.Record]:
    async with pool.acquire() as conn:
        return list(
            await conn.fetch(
                "SELECT r.amount_in_minor, r.pending_failure,"
                " (SELECT count(*) FROM ledger_transactions t"
                "  WHERE t.reference_id = r.id AND t.kind = 'refund_hold') AS holds,"
                " (SELECT count(*) FROM jobs j"
                "  WHERE j.kind = $2 AND j.payload ->> 'refund_id' = r.id::text) AS jobs"
                " FROM refunds r WHERE r.payment_id = $1",
                payment_id,
                ADVANCE_JOB,
            )
        )


async def _refunded(pool: asyncpg.Pool, payment_id: uuid.UUID) -> int:
    async with pool.acquire() as conn:
        value = await conn.fetchval(
            "SELECT refunded_amount_in_minor FROM payments WHERE id = $1", payment_id
        )
    return int(value)


async def _available(pool: asyncpg.Pool, account: MerchantAccount) -> int:
    async with pool.acquire() as conn:
        fresh = await get_account(conn, account.id)
    assert fresh is not None
    return fresh.available_balance


async def test_refunds_of_one_payment_committed_together_never_exceed_it(
    pool: asyncpg.Pool,
) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    payment_id = await _settled_payment(pool, account, 100, now)
    answers = await _accept_batch(pool, *(_refund(account, payment_id, 30, now) for _ in range(5)))
    assert [a[0] for a in answers if isinstance(a, tuple)] == [201, 201, 201, 400, 400]
    refused = [orjson.loads(a[1]) for a in answers if isinstance(a, tuple) and a[0] == 400]
    assert refused[-1]["errors"] == {
        "amount_in_minor": ["must be at most 10, what is left to refund of this payment"]
    }
    refunds = await _refunds(pool, payment_id)
    assert [(r["amount_in_minor"], r["holds"], r["jobs"]) for r in refunds] == [(30, 1, 1)] * 3
    assert await _refunded(pool, payment_id) == 90
    assert await _available(pool, account) == 1_000 - 90


async def test_a_refund_the_available_balance_cannot_cover_is_accepted_to_fail(
    pool: asyncpg.Pool,
) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 50)
    payment_id = await _settled_payment(pool, account, 100, now)
    answers = await _accept_batch(pool, *(_refund(account, payment_id, 30, now) for _ in range(2)))
    assert [a[0] for a in answers if isinstance(a, tuple)] == [201, 201]
    refunds = await _refunds(pool, payment_id)
    # One hold of 30 fits in 50; the second sees 20 left: no hold, it will fail.
    assert sorted((r["pending_failure"] or "", r["holds"]) for r in refunds) == [
        ("", 1),
        ("insufficient_funds", 0),
    ]
    assert await _available(pool, account) == 20


async def test_a_key_is_used_once_in_a_batch_and_a_refusal_is_stored(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    payment_id = await _settled_payment(pool, account, 100, now)
    acceptance = RefundAcceptance(pool, render_problem)
    first, second = await _accept_batch(
        pool,
        _refund(account, payment_id, 40, now, "same"),
        _refund(account, payment_id, 40, now, "same"),
    )
    assert isinstance(first, tuple)
    assert first[0] == 201
    assert isinstance(second, ProblemError)
    assert second.problem.status == 409
    assert await _accept(acceptance, _refund(account, payment_id, 40, now, "same")) == [first]
    too_much = _refund(account, payment_id, 61, now, "too-much")
    [refused] = await _accept(acceptance, too_much)
    assert isinstance(refused, tuple)
    assert refused[0] == 400
    assert await _accept(acceptance, too_much) == [refused]  # answered from its key
    assert [r["amount_in_minor"] for r in await _refunds(pool, payment_id)] == [40]
    assert await _refunded(pool, payment_id) == 40


async def test_another_merchants_payment_is_not_found_and_unchanged(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    owner = await funded_account(pool, now, 1_000)
    other = await funded_account(pool, now, 1_000, name="Other Ltd")
    payment_id = await _settled_payment(pool, owner, 100, now)
    acceptance = RefundAcceptance(pool, render_problem)
    [answer] = await _accept(acceptance, _refund(other, payment_id, 10, now))
    assert isinstance(answer, tuple)
    assert answer[0] == 404
    assert await _refunds(pool, payment_id) == []
    assert await _refunded(pool, payment_id) == 0
    assert await _available(pool, owner) == 1_000


async def test_a_signed_refund_takes_effect_once_even_after_its_key_expired(
    pool: asyncpg.Pool,
) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    payment_id = await _settled_payment(pool, account, 500, now)
    refund = _refund(account, payment_id, 100, now)
    assert refund.keyed is not None
    signed = dataclasses.replace(
        refund, keyed=dataclasses.replace(refund.keyed, signature=b"r" * 32)
    )
    [first] = await _accept_batch(pool, signed)
    assert isinstance(first, tuple)
    assert first[0] == 201
    [again] = await _accept_batch(pool, dataclasses.replace(signed, now=now + TTL))
    assert isinstance(again, ProblemError)
    assert again.problem is CONFLICT
    assert len(await _refunds(pool, payment_id)) == 1
