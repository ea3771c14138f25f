"""Integration tests for bankrail.ledger.holds: the purpose of a hold names its transactions
(docs/architecture.md, Money)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg

from bankrail.ledger.holds import clearing_code, consume_hold, hold_funds, release_hold
from bankrail.ledger.service import check_ledger
from bankrail.merchants.service import get_account
from support.accounts import funded_account

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def _kinds(conn: asyncpg.Connection, reference_id: uuid.UUID) -> list[str]:
    rows = await conn.fetch(
        "SELECT kind FROM ledger_transactions WHERE reference_id = $1 ORDER BY kind",
        reference_id,
    )
    return [r["kind"] for r in rows]


async def test_a_refunds_hold_release_and_execution_are_refund_transactions(
    pool: asyncpg.Pool,
) -> None:
    account = await funded_account(pool, NOW, 1_000)
    released, executed, payout = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn, conn.transaction():
        money = {"amount": 100, "now": NOW, "purpose": "refund"}
        await hold_funds(conn, account, reference_id=released, **money)
        await release_hold(conn, account, reference_id=released, **money)
        await hold_funds(conn, account, reference_id=executed, **money)
        await consume_hold(conn, account, rail="card", reference_id=executed, **money)
        # Without a purpose, a payout's.
        await hold_funds(conn, account, amount=10, reference_id=payout, now=NOW)

        assert await _kinds(conn, released) == ["refund_hold", "refund_release"]
        assert await _kinds(conn, executed) == ["refund_execution", "refund_hold"]
        assert await _kinds(conn, payout) == ["payout_hold"]
        after = await get_account(conn, account.id)
        assert after is not None
        assert (after.available_balance, after.held_balance) == (890, 10)
        clearing = await conn.fetchval(
            "SELECT balance FROM ledger_accounts WHERE code = $1",
            clearing_code("card", "GBP", account.id),
        )
        assert clearing == 100
        assert await check_ledger(conn) == []
