"""Merchant accounts and payees for the database tests, made through the service's own
functions."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from bankrail.ledger.movements import top_up
from bankrail.merchants.balances import move
from bankrail.merchants.models import MerchantAccount
from bankrail.merchants.service import create_merchant, create_merchant_account, get_account

EXTERNAL_SORT_CODE = "040004"  # a UK bank that is not Bankrail


async def funded_account(
    pool: asyncpg.Pool, now: datetime, credit: int = 0, *, name: str = "Payer Ltd"
) -> MerchantAccount:
    """A new merchant's GBP account, credited `credit` by a bank transfer (when not 0), as
    read back afterwards (balances included)."""
    async with pool.acquire() as conn, conn.transaction():
        merchant_id = await create_merchant(conn, name, now)
        account = await create_merchant_account(conn, merchant_id, "GBP", None, now)
        if credit:
            await move(conn, top_up(account, "bank_transfer", credit, uuid.uuid4()), now)
        fresh = await get_account(conn, account.id)
    assert fresh is not None
    return fresh


def sort_code_beneficiary(
    reference: str = "payout",
    name: str = "Jane Doe",
    *,
    sort_code: str = EXTERNAL_SORT_CODE,
    account_number: str = "12345678",
) -> dict[str, Any]:
    """An open-loop payout's beneficiary, paid by sort code and account number, as the
    request model gives it to the service."""
    return {
        "type": "external_account",
        "reference": reference,
        "account_holder_name": name,
        "account_identifier": {
            "type": "sort_code_account_number",
            "sort_code": sort_code,
            "account_number": account_number,
        },
        "date_of_birth": None,
        "address": None,
    }
