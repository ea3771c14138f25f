"""The payout batches look rows up by key, whatever the planner knows of the tables.

Promise: accepting and executing a batch of payouts costs the same on a
young database as on a grown one; no batch statement reads a whole table that grows with
traffic. On a young database (few rows, no statistics yet) the planner otherwise hashed the
whole of idempotency_keys on every acceptance and the whole of payouts on every claim.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import asyncpg

from bankrail.core.clock import ServiceClock
from bankrail.db.pool import create_pool
from bankrail.merchants.models import MerchantAccount
from bankrail.payouts.service import PayoutAcceptance
from support.accounts import funded_account, sort_code_beneficiary
from support.payouts import accept_at_once, render_problem, run_payout_batch

# The tables a payout writes to, which grow with traffic.
_GROWING = (
    "payouts",
    "idempotency_keys",
    "jobs",
    "account_activity",
    "ledger_transactions",
    "ledger_postings",
    "events",
    "webhook_deliveries",
)


async def _whole_table_reads(conn: asyncpg.Connection) -> dict[str, int]:
    """Sequential scans so far of each growing table, this backend's included."""
    await conn.execute("SELECT pg_stat_force_next_flush()")  # flushed when this one ends
    rows = await conn.fetch(
        "SELECT relname, seq_scan FROM pg_stat_user_tables WHERE relname = ANY($1::text[])",
        list(_GROWING),
    )
    return {r["relname"]: r["seq_scan"] for r in rows}


async def _accept(
    acceptance: PayoutAcceptance, account: MerchantAccount, now: datetime, count: int, round_: int
) -> None:
    answers = await asyncio.gather(
        *(
            accept_at_once(
                acceptance,
                account,
                now,
                key=f"{round_}-{n}",
                amount=1,
                beneficiary=sort_code_beneficiary(f"bench {n}"),
            )
            for n in range(count)
        )
    )
    assert all(status == 202 for status, _ in answers)


async def test_accepting_and_executing_batches_reads_no_whole_table(database: str) -> None:
    clock = ServiceClock()
    now = clock.now()
    setup = await create_pool(database, min_size=1, max_size=1)
    # One connection does all the work, so its statistics are all there is to read.
    one = await create_pool(database, min_size=1, max_size=1)
    try:
        account = await funded_account(setup, now, credit=1_000_000)
        acceptance = PayoutAcceptance(one, render_problem)
        await _accept(acceptance, account, now, 50, 0)  # rows to scan, and plans cached
        assert await run_payout_batch(one, clock.now()) == 50
        async with setup.acquire() as conn:
            await _whole_table_reads(conn)  # the set-up's own reads are counted by now
        async with one.acquire() as conn:
            before = await _whole_table_reads(conn)

        await _accept(acceptance, account, now, 50, 1)
        assert await run_payout_batch(one, clock.now()) == 50
        async with one.acquire() as conn:
            after = await _whole_table_reads(conn)
            executed = await conn.fetchval("SELECT count(*) FROM payouts WHERE stage = 'executed'")
    finally:
        await one.close()
        await setup.close()

    assert executed == 100
    assert {table: after[table] - before[table] for table in _GROWING} == dict.fromkeys(_GROWING, 0)
