"""Payments for the database tests, made through the service's own batch creation."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import orjson

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
