"""Integration tests for bankrail.ledger.movements: each named movement writes the ledger
transaction its name promises (docs/architecture.md, Money)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg

from bankrail.ledger.movements import (
    PAYOUT,
    REFUND,
    Clearing,
    Payee,
    end_hold,
    hold,
    record,
    settle_pay_in,
)
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


async def _clearing(conn: asyncpg.Connection, rail: str, account_id: uuid.UUID) -> int | None:
    balance: int | None = await conn.fetchval(
        "SELECT balance FROM ledger_accounts WHERE code = $1",
        Clearing(rail, "GBP", account_id).code,
    )
    return balance


async def test_a_refunds_hold_release_and_execution_are_refund_transactions(
    pool: asyncpg.Pool,
) -> None:
    account = await funded_account(pool, NOW, 1_000)
    released, executed, payout = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn, conn.transaction():
        await record(conn, hold(account, REFUND, 100, released), NOW)
        await record(conn, end_hold(account, REFUND, 100, released, failed=True, rail="c"), NOW)
        await record(conn, hold(account, REFUND, 100, executed), NOW)
        await record(conn, end_hold(account, REFUND, 100, executed, failed=False, rail="card"), NOW)
        await record(conn, hold(account, PAYOUT, 10, payout), NOW)

        assert await _kinds(conn, released) == ["refund_hold", "refund_release"]
        assert await _kinds(conn, executed) == ["refund_execution", "refund_hold"]
        assert await _kinds(conn, payout) == ["payout_hold"]
        after = await get_account(conn, account.id)
        assert after is not None
        assert (after.available_balance, after.held_balance) == (890, 10)
        assert await _clearing(conn, "card", account.id) == 100
        assert await check_ledger(conn) == []


async def test_a_transfer_credits_the_payee_and_a_pay_in_debits_its_rail(
    pool: asyncpg.Pool,
) -> None:
    payer = await funded_account(pool, NOW, 1_000)
    payee = await funded_account(pool, NOW, name="Payee Ltd")
    payout, payment = uuid.uuid4(), uuid.uuid4()
    async with pool.acquire() as conn, conn.transaction():
        await record(conn, hold(payer, PAYOUT, 300, payout), NOW)
        to = Payee(payee.id, payee.available_ledger_id)
        await record(
            conn, end_hold(payer, PAYOUT, 300, payout, failed=False, rail="x", payee=to), NOW
        )
        await record(conn, settle_pay_in(payee, "card", 50, payment), NOW)

        assert await _kinds(conn, payout) == ["internal_transfer", "payout_hold"]
        assert await _kinds(conn, payment) == ["payment"]
        after_payer = await get_account(conn, payer.id)
        after_payee = await get_account(conn, payee.id)
        assert after_payer is not None
        assert after_payee is not None
        assert (after_payer.available_balance, after_payer.held_balance) == (700, 0)
        assert (after_payee.available_balance, after_payee.held_balance) == (350, 0)
        assert await _clearing(conn, "x", payer.id) is None  # nothing left over a rail
        assert await _clearing(conn, "card", payee.id) == -50
        assert await check_ledger(conn) == []
