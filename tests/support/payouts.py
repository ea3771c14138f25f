"""Payouts for the database tests, accepted as the route accepts them."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from bankrail.merchants.models import MerchantAccount
from bankrail.payouts.service import (
    IdempotentRequest,
    PayoutBatcher,
    accept_payout,
    accept_v3_payout_at_once,
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
