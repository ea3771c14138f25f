"""The payments of a batch's actions read and locked in one statement
(`payments._store.LOCK_PAYMENTS`, run by `security.idempotent_commit` for each payment
action) on real PostgreSQL.

Promise: each payment is read and locked only for the merchant that names it (or for any
merchant, when no merchant names it: the payer's resource token); a payment another
merchant names is neither read nor locked, so naming it cannot hold up its owner.
"""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from bankrail.core.clock import ServiceClock
from bankrail.payments._store import LOCK_PAYMENTS
from support.payments import new_payment

NOWAIT = "SELECT 1 FROM payments WHERE id = $1 FOR UPDATE NOWAIT"


async def _locked_by_other(pool: asyncpg.Pool, payment_id: uuid.UUID) -> bool:
    async with pool.acquire() as other:
        try:
            await other.fetch(NOWAIT, payment_id)
        except asyncpg.LockNotAvailableError:
            return True
    return False


@pytest.mark.parametrize("named_by", ["owner", "anyone", "another merchant"])
async def test_a_payment_is_read_and_locked_only_for_its_merchant(
    pool: asyncpg.Pool, named_by: str
) -> None:
    payment_id, merchant_id = await new_payment(pool, ServiceClock().now())
    owner = {"owner": merchant_id, "anyone": None, "another merchant": uuid.uuid4()}[named_by]
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(LOCK_PAYMENTS, [payment_id], [owner])
        found = named_by != "another merchant"
        assert [row["id"] for row in rows] == ([payment_id] if found else [])
        assert await _locked_by_other(pool, payment_id) is found
    assert not await _locked_by_other(pool, payment_id)


async def test_a_payment_named_by_its_owner_and_another_is_read_once(pool: asyncpg.Pool) -> None:
    payment_id, merchant_id = await new_payment(pool, ServiceClock().now())
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(LOCK_PAYMENTS, [payment_id] * 2, [uuid.uuid4(), merchant_id])
    assert [(row["id"], row["merchant_id"]) for row in rows] == [(payment_id, merchant_id)]
