"""Payment creation (`payments.creation.create_payments`, run by `PaymentCreation`) on real
PostgreSQL.

Promise: a request is decided by the same rules whether it is committed alone or with the
other requests of the moment (group commit); a key is used once, a second use in the same
batch is in flight (409) and a later repeat is answered from the key; a refused request's
answer is stored under its key and nothing else is written; a signed request never takes
effect twice, even after its key expired.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import orjson

from bankrail.core.clock import ServiceClock
from bankrail.core.problems import CONFLICT, ProblemError
from bankrail.merchants.models import MerchantAccount
from bankrail.payments.creation import NewPayment, PaymentCreation, PaymentToCreate
from bankrail.payments.jobs import EXPIRE_JOB
from bankrail.payments.schemas import PaymentRequest
from bankrail.security.idempotency import KeyedRequest
from support.accounts import funded_account
from support.payouts import render_problem

TTL = timedelta(hours=6)


def _respond(payment: NewPayment) -> tuple[int, Any]:
    return 201, {"id": str(payment.id), "user": {"id": payment.user_id}}


def _request(
    account: MerchantAccount, now: Any, key: str, *, currency: str = "GBP", amount: int = 100
) -> PaymentToCreate:
    body = {
        "amount_in_minor": amount,
        "currency": currency,
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": {"type": "user_selected"},
            "beneficiary": {"type": "merchant_account", "merchant_account_id": str(account.id)},
        },
        "user": {"id": "payer-1", "name": "Payer"},
    }
    return PaymentToCreate(
        PaymentRequest.model_validate(body),
        account.merchant_id,
        now,
        _respond,
        KeyedRequest("v3:test", key, orjson.dumps(body), TTL),
    )


async def _payment(pool: asyncpg.Pool, payment_id: str) -> dict[str, Any]:
    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT merchant_account_id, amount_in_minor, currency, user_id, user_details,"
            " selection_type, status FROM payments WHERE id = $1",
            uuid.UUID(payment_id),
        )
        jobs = await conn.fetch(
            "SELECT kind, run_at FROM jobs WHERE payload ->> 'payment_id' = $1", payment_id
        )
    assert row is not None
    return {**dict(row), "jobs": [(r["kind"], r["run_at"]) for r in jobs]}


async def test_a_batch_creates_each_payment_as_alone_with_its_expiry(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now)
    creation = PaymentCreation(pool, render_problem)
    alone = await creation.accept(_request(account, now, "alone"))
    together = await asyncio.gather(
        *(creation.accept(_request(account, now, f"k{n}")) for n in range(5))
    )
    assert {status for status, _ in [alone, *together]} == {201}
    rows = [await _payment(pool, orjson.loads(body)["id"]) for _, body in [alone, *together]]
    assert all(row == rows[0] for row in rows)  # the same row, however it was committed
    assert rows[0]["status"] == "authorization_required"
    assert rows[0]["user_id"] == "payer-1"
    assert rows[0]["user_details"] == {"name": "Payer"}
    assert rows[0]["jobs"] == [(EXPIRE_JOB, now + timedelta(minutes=15))]


async def test_a_key_is_used_once_in_a_batch_and_replayed_after(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now)
    creation = PaymentCreation(pool, render_problem)
    first, second = await asyncio.gather(
        creation.accept(_request(account, now, "same")),
        creation.accept(_request(account, now, "same")),
        return_exceptions=True,
    )
    assert isinstance(first, tuple)
    assert first[0] == 201
    assert isinstance(second, ProblemError)
    assert second.problem.status == 409
    assert await creation.accept(_request(account, now, "same")) == first  # byte for byte
    async with pool.acquire() as conn:
        count = await conn.fetchval(
            "SELECT count(*) FROM payments WHERE merchant_account_id = $1", account.id
        )
    assert count == 1


async def test_a_refused_request_stores_its_answer_and_writes_nothing_else(
    pool: asyncpg.Pool,
) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now)
    creation = PaymentCreation(pool, render_problem)
    status, body = await creation.accept(_request(account, now, "eur", currency="EUR"))
    assert status == 400
    assert orjson.loads(body)["errors"] == {"currency": ["must be GBP, the account's currency"]}
    assert await creation.accept(_request(account, now, "eur", currency="EUR")) == (status, body)
    async with pool.acquire() as conn:
        count = await conn.fetchval(
            "SELECT count(*) FROM payments WHERE merchant_account_id = $1", account.id
        )
    assert count == 0


async def test_a_signed_request_takes_effect_once_even_after_its_key_expired(
    pool: asyncpg.Pool,
) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now)
    creation = PaymentCreation(pool, render_problem)
    request = _request(account, now, "signed")
    assert request.keyed is not None
    signed = dataclasses.replace(
        request, keyed=dataclasses.replace(request.keyed, signature=b"s" * 32)
    )
    status, _ = await creation.accept(signed)
    assert status == 201
    refused = None
    try:
        await creation.accept(dataclasses.replace(signed, now=now + TTL))
    except ProblemError as problem:
        refused = problem
    assert refused is not None
    assert refused.problem is CONFLICT
    async with pool.acquire() as conn:
        count = await conn.fetchval(
            "SELECT count(*) FROM payments WHERE merchant_account_id = $1", account.id
        )
    assert count == 1
