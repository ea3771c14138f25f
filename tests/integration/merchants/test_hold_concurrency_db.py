"""Concurrent holds on one merchant account can never overdraw it (docs/architecture.md),
through the path production takes: payouts accepted by the group commit of two API processes
(`PayoutAcceptance`), so that holds race both within a batch (`BatchHolds`, each seeing those
before it) and across batches (the ledger rows' locks and CHECK)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import asyncpg

from bankrail.core.jsonbody import loads
from bankrail.ledger.service import check_ledger
from bankrail.merchants.service import get_account
from bankrail.payouts.service import PayoutAcceptance
from support.accounts import funded_account
from support.payouts import accept_at_once, render_problem

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def test_fifty_concurrent_holds_of_100_on_1000(pool: asyncpg.Pool) -> None:
    account = await funded_account(pool, NOW, 1_000, name="Concurrency Ltd")
    processes = [PayoutAcceptance(pool, render_problem) for _ in range(2)]
    start = asyncio.Event()
    lowest_seen: list[int] = []

    async def accept(i: int) -> str | None:
        await start.wait()
        acceptance = processes[i % 2]
        status, body = await accept_at_once(acceptance, account, NOW, key=f"k{i}", amount=100)
        assert status == 202, body
        lowest_seen.append(
            await pool.fetchval(
                "SELECT min(balance) FROM ledger_accounts WHERE id = ANY($1::bigint[])",
                [account.available_ledger_id, account.held_ledger_id],
            )
        )
        failure: str | None = await pool.fetchval(
            "SELECT pending_failure FROM payouts WHERE id = $1", loads(body)["id"]
        )
        return failure

    tasks = [asyncio.create_task(accept(i)) for i in range(50)]
    start.set()
    failures = await asyncio.gather(*tasks)

    assert failures.count(None) == 10
    assert failures.count("insufficient_funds") == 40
    assert min(lowest_seen) >= 0
    async with pool.acquire() as conn:
        after = await get_account(conn, account.id)
        assert after is not None
        assert after.available_balance == 0
        assert after.held_balance == 1_000
        assert after.current_balance == 1_000
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM ledger_transactions t JOIN payouts p"
                " ON p.id = t.reference_id WHERE t.kind = 'payout_hold'"
                " AND p.merchant_account_id = $1",
                account.id,
            )
            == 10
        )
        assert await check_ledger(conn) == []
