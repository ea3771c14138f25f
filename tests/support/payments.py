"""Payments and mandates for the database tests, made through the service's own functions."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import orjson

from bankrail.mandates.schemas import MandateRequest
from bankrail.mandates.service import create_mandate
from bankrail.merchants.models import MerchantAccount
from bankrail.payments.creation import NewPayment, PaymentCreation, PaymentToCreate
from bankrail.payments.schemas import PaymentRequest
from bankrail.security.idempotency import KeyedRequest
from support.accounts import funded_account
from support.payouts import render_problem


def _respond(payment: NewPayment) -> tuple[int, Any]:
    return 201, {"id": str(payment.id)}


async def new_payment(pool: asyncpg.Pool, now: Any) -> tuple[uuid.UUID, uuid.UUID]:
    """A user-selected GBP payment of 100 into a new merchant's funded account, made through
    the service's batch creation: its id and its merchant's."""
    account = await funded_account(pool, now)
    body = {
        "amount_in_minor": 100,
        "currency": "GBP",
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": {"type": "user_selected"},
            "beneficiary": {"type": "merchant_account", "merchant_account_id": str(account.id)},
        },
        "user": {"id": "payer-1", "name": "Payer, J: Ltd"},
        "metadata": {"order": "A, 1: first"},
    }
    request = PaymentToCreate(
        PaymentRequest.model_validate(body),
        account.merchant_id,
        now,
        _respond,
        KeyedRequest("v3:test", str(uuid.uuid4()), orjson.dumps(body), timedelta(hours=6)),
    )
    _status, answer = await PaymentCreation(pool, render_problem).accept(request)
    return uuid.UUID(orjson.loads(answer)["id"]), account.merchant_id


async def new_mandate(pool: asyncpg.Pool, account: MerchantAccount, now: Any) -> uuid.UUID:
    """A commercial GBP mandate into `account`, at a preselected redirect provider, awaiting
    authorisation (up to 10,000 a payment, 100,000 a year): its id."""
    body = {
        "mandate": {
            "type": "commercial",
            "provider_selection": {
                "type": "preselected",
                "provider_id": "mock-payments-gb-redirect",
            },
            "beneficiary": {"type": "merchant_account", "merchant_account_id": str(account.id)},
        },
        "currency": "GBP",
        "constraints": {
            "maximum_individual_amount": 10_000,
            "periodic_limits": {"year": {"maximum_amount": 100_000, "period_alignment": "consent"}},
        },
    }
    async with pool.acquire() as conn, conn.transaction():
        created = await create_mandate(
            conn, account.merchant_id, MandateRequest.model_validate(body), now
        )
    mandate_id: uuid.UUID = created["id"]
    return mandate_id
