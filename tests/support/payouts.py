"""Payouts for the database tests, accepted as the route accepts them."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from bankrail.merchants.models import MerchantAccount
from bankrail.payouts.service import accept_payout, open_loop_destination


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
