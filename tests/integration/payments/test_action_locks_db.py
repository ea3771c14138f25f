"""The payments and mandates of a batch's actions read and locked in one statement
(`payments._store.LOCK_PAYMENTS`, `mandates._store.LOCK_MANDATES`, run by
`security.idempotent_commit` for each payment or mandate action) on real PostgreSQL.

Promise: each row is read and locked only for the merchant that names it (or for any
merchant, when no merchant names it: the payer's resource token, payments only); a row
another merchant names is neither read nor locked, so naming it cannot hold up its owner;
a row named by its owner and by another merchant is read once.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg
import pytest

from bankrail.core.clock import ServiceClock
from bankrail.mandates._store import LOCK_MANDATES
from bankrail.payments._store import LOCK_PAYMENTS
from support.accounts import funded_account
from support.payments import new_mandate, new_payment


async def _new_mandate(pool: asyncpg.Pool, now: datetime) -> tuple[uuid.UUID, uuid.UUID]:
    account = await funded_account(pool, now)
    return await new_mandate(pool, account, now), account.merchant_id


KINDS = {
    "payment": (LOCK_PAYMENTS, "payments", new_payment),
    "mandate": (LOCK_MANDATES, "mandates", _new_mandate),
}


async def _locked_by_other(pool: asyncpg.Pool, table: str, row_id: uuid.UUID) -> bool:
    async with pool.acquire() as other:
        try:
            await other.fetch(f"SELECT 1 FROM {table} WHERE id = $1 FOR UPDATE NOWAIT", row_id)
        except asyncpg.LockNotAvailableError:
            return True
    return False


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("named_by", ["owner", "anyone", "another merchant"])
async def test_a_row_is_read_and_locked_only_for_its_merchant(
    pool: asyncpg.Pool, kind: str, named_by: str
) -> None:
    query, table, made = KINDS[kind]
    row_id, merchant_id = await made(pool, ServiceClock().now())
    owner = {"owner": merchant_id, "anyone": None, "another merchant": uuid.uuid4()}[named_by]
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(query, [row_id], [owner])
        found = named_by != "another merchant"
        assert [row["id"] for row in rows] == ([row_id] if found else [])
        assert await _locked_by_other(pool, table, row_id) is found
    assert not await _locked_by_other(pool, table, row_id)


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_row_named_by_its_owner_and_another_is_read_once(
    pool: asyncpg.Pool, kind: str
) -> None:
    query, _table, made = KINDS[kind]
    row_id, merchant_id = await made(pool, ServiceClock().now())
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(query, [row_id] * 2, [uuid.uuid4(), merchant_id])
    assert [(row["id"], row["merchant_id"]) for row in rows] == [(row_id, merchant_id)]
