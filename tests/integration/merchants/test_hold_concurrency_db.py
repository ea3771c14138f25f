"""Concurrent holds on one merchant account can never overdraw it (docs/architecture.md)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import asyncpg
import pytest

from bankrail.ledger.models import InsufficientFunds
from bankrail.ledger.service import check_ledger
from bankrail.merchants.balances import hold_funds
from bankrail.merchants.service import (
    get_account,
    lock_account,
)
from support.accounts import funded_account

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("lock_first", [False, True], ids=["ledger-only", "row-locked"])
async def test_fifty_concurrent_holds_of_100_on_1000(pool: asyncpg.Pool, lock_first: bool) -> None:
    account = await funded_account(pool, NOW, 1_000, name="Concurrency Ltd")
    start = asyncio.Event()
    lowest_seen: list[int] = []

    async def hold() -> bool:
        await start.wait()
        async with pool.acquire() as conn:
            try:
                async with conn.transaction():
                    target = await lock_account(conn, account.id) if lock_first else account
                    await hold_funds(conn, target, amount=100, reference_id=uuid.uuid4(), now=NOW)
            except InsufficientFunds:
                return False
            lowest_seen.append(
                await conn.fetchval(
                    "SELECT min(balance) FROM ledger_accounts WHERE id = ANY($1::bigint[])",
                    [account.available_ledger_id, account.held_ledger_id],
                )
            )
            return True

    tasks = [asyncio.create_task(hold()) for _ in range(50)]
    start.set()
    results = await asyncio.gather(*tasks)

    assert results.count(True) == 10
    assert results.count(False) == 40
    assert min(lowest_seen) >= 0
    async with pool.acquire() as conn:
        after = await get_account(conn, account.id)
        assert after is not None
        assert after.available_balance == 0
        assert after.held_balance == 1_000
        assert after.current_balance == 1_000
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM ledger_transactions WHERE kind = 'payout_hold'"
            )
            == 10
        )
        assert await check_ledger(conn) == []
