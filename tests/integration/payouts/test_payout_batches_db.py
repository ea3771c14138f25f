"""Many payouts' jobs at once (`payouts.jobs.advance_due_payouts`, migration 0006) on real
PostgreSQL.

Promise: a batch takes every payout through the same states, with the same events, activity,
deliveries, ledger postings and next jobs as `advance_payout` taking them one by one; it
leaves alone the jobs it cannot take, and a duplicate job never advances a payout twice.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import orjson

from bankrail.core.clock import ServiceClock
from bankrail.core.jsonbody import loads
from bankrail.core.powers import SANDBOX
from bankrail.core.problems import ProblemError
from bankrail.ledger.service import check_ledger
from bankrail.merchants.models import MerchantAccount
from bankrail.merchants.service import get_account
from bankrail.payouts.jobs import advance_payout
from bankrail.payouts.service import (
    ADVANCE_JOB,
)
from bankrail.rails.screening import replace_screening_list
from support.accounts import funded_account, sort_code_beneficiary
from support.payouts import (
    accept_one,
    accepted_payout,
    payout_queue,
    payout_request,
    run_payout_batch,
)

HOOK = "https://merchant.example/hooks"
SCREENED = "Sanctioned Person"

# (api, reference, beneficiary name, amount): every path a job can take in one run.
SCENARIOS = [
    ("v3", "rent", "Jane Doe", 100),
    ("v3", "rent fail:scheme_error", "Jane Doe", 100),
    ("v3", "rent fail:invalid_iban", "Jane Doe", 100),
    ("v3", "rent delay:60", "Jane Doe", 100),
    ("v3", "rent", SCREENED, 100),
    ("v3", "too much", "Jane Doe", 50_000),
    ("v1", "wages", "John Roe", 100),
    ("v1", "wages fail:server_error", "John Roe", 100),
    ("v1", "wages delay:60", "John Roe", 100),
    ("v1", "wages", SCREENED, 100),
]
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


async def _account(
    pool: asyncpg.Pool, now: datetime, *, credit: int = 10_000, threshold: int | None = None
) -> MerchantAccount:
    """A funded account whose merchant takes payments-API webhooks, with a balance threshold
    when one is given."""
    account = await funded_account(pool, now, credit, name="Batch Ltd")
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE merchants SET payments_webhook_uri = $2 WHERE id = $1",
            account.merchant_id,
            HOOK,
        )
        if threshold is not None:
            await conn.execute(
                "UPDATE merchant_accounts SET balance_threshold = $2 WHERE id = $1",
                account.id,
                threshold,
            )
    return account


async def _accept_all(
    pool: asyncpg.Pool, account: MerchantAccount, now: datetime
) -> list[uuid.UUID]:
    ids = []
    for i, (api, reference, name, amount) in enumerate(SCENARIOS):
        request = payout_request(
            account,
            now,
            api=api,
            amount=amount,
            beneficiary=sort_code_beneficiary(reference, name),
            transaction_id=uuid.UUID(int=i + 1) if api == "v1" else None,
            context_code="withdrawal" if api == "v1" else None,
        )
        outcome = await accept_one(pool, request)
        assert not isinstance(outcome, ProblemError)
        ids.append(uuid.UUID(loads(outcome[1])["id"]))
    return ids


async def _one_by_one(pool: asyncpg.Pool, payout_ids: list[uuid.UUID], now: datetime) -> None:
    """Each due job of these payouts, run by `advance_payout` as the job queue runs one."""
    async with pool.acquire() as conn:
        jobs = await conn.fetch(
            "SELECT id, payload FROM jobs WHERE run_at <= $1"
            " AND (payload ->> 'payout_id')::uuid = ANY($2::uuid[]) ORDER BY id",
            now,
            payout_ids,
        )
        for job in jobs:
            async with conn.transaction():
                await advance_payout(conn, job["payload"], now, powers=SANDBOX)
                await conn.execute("DELETE FROM jobs WHERE id = $1", job["id"])


def _masked(value: Any) -> Any:
    """The value with every id replaced, so that two merchants' records compare."""
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, str):
        return _UUID.sub("<id>", value)
    if isinstance(value, uuid.UUID):
        return "<id>"
    return value


async def _written(pool: asyncpg.Pool, payout_ids: list[uuid.UUID]) -> list[dict[str, Any]]:
    """Everything the payouts' jobs wrote, scenario by scenario, ids masked."""
    records = []
    async with pool.acquire() as conn:
        for payout_id in payout_ids:
            payout = await conn.fetchrow(
                "SELECT stage, pending_failure, failure_reason, authorized_at, submitted_at,"
                " executed_at, failed_at FROM payouts WHERE id = $1",
                payout_id,
            )
            activity = await conn.fetchrow(
                "SELECT status, updated_at, details FROM account_activity WHERE id = $1",
                payout_id,
            )
            events = await conn.fetch(
                "SELECT e.family, e.event_type, e.payload, e.created_at, d.status, d.uri,"
                " d.next_attempt_at, d.ordering_key = p.id AS ordered_by_payout, d.ordering_seq"
                " FROM payouts p JOIN events e ON e.merchant_id = p.merchant_id"
                " JOIN webhook_deliveries d ON d.event_id = e.id WHERE p.id = $1"
                " AND (convert_from(e.payload, 'UTF8') LIKE '%' || p.id::text || '%'"
                " OR convert_from(e.payload, 'UTF8') LIKE '%' || p.transaction_id::text || '%')",
                payout_id,
            )
            ledger = await conn.fetch(
                "SELECT t.kind, a.code, p.amount, t.created_at FROM ledger_transactions t"
                " JOIN ledger_postings p ON p.transaction_id = t.id"
                " JOIN ledger_accounts a ON a.id = p.account_id"
                " WHERE t.reference_id = $1 ORDER BY t.kind, p.amount",
                payout_id,
            )
            jobs = await conn.fetch(
                "SELECT kind, run_at FROM jobs WHERE payload ->> 'payout_id' = $1",
                str(payout_id),
            )
            assert payout is not None
            assert activity is not None
            records.append(
                _masked(
                    {
                        "payout": dict(payout),
                        "activity": dict(activity),
                        "events": sorted(
                            (
                                {
                                    **dict(e),
                                    "payload": orjson.loads(e["payload"]),
                                }
                                for e in events
                            ),
                            key=lambda e: (e["family"], e["event_type"]),
                        ),
                        "ledger": [dict(r) for r in ledger],
                        "jobs": [dict(r) for r in jobs],
                    }
                )
            )
    return records


async def test_a_batch_writes_what_advance_payout_writes_one_by_one(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now().replace(microsecond=0)
    later = now + timedelta(seconds=61)
    async with pool.acquire() as conn:
        await replace_screening_list(conn, [SCREENED])
    single = await _account(pool, now)
    batched = await _account(pool, now)
    single_ids = await _accept_all(pool, single, now)
    await _one_by_one(pool, single_ids, now)
    batched_ids = await _accept_all(pool, batched, now)
    assert await run_payout_batch(pool, now) == len(SCENARIOS)
    await _one_by_one(pool, single_ids, later)
    assert await run_payout_batch(pool, later) == 2  # the two delayed payouts

    one_by_one, in_a_batch = await _written(pool, single_ids), await _written(pool, batched_ids)
    for scenario, expected, got in zip(SCENARIOS, one_by_one, in_a_batch, strict=True):
        assert got == expected, scenario
    stages = [r["payout"]["stage"] for r in in_a_batch]
    v3_stages = ["executed", "failed", "failed", "executed", "failed", "failed"]
    assert stages == [*v3_stages, "executed", "failed", "executed", "failed"]
    assert {e["status"] for r in in_a_batch for e in r["events"]} == {"pending", "skipped"}
    # Each v1 event's delivery waits for the payout's previous one (its place in the payout's
    # sequence); v3 events are not ordered.
    places = {
        "payout_authorised": 1,
        "payout_submitted": 2,
        "payout_settled": 3,
        "payout_failed": 3,
        "payout_rejected": 1,
    }
    for record in in_a_batch:
        for event in record["events"]:
            if event["family"] == "payouts":
                assert event["ordered_by_payout"] is True, event
                assert event["ordering_seq"] == places[event["event_type"]], event
            else:
                assert (event["ordered_by_payout"], event["ordering_seq"]) == (None, None)
    for account in (single, batched):
        after = await get_account(pool, account.id)
        assert after is not None
        # 10,000 less the four executed payouts of 100; nothing is held any more.
        assert (after.available_balance, after.held_balance) == (9_600, 0)
    async with pool.acquire() as conn:
        assert await check_ledger(conn) == []
        assert await conn.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_payout_with_two_jobs_in_one_batch_advances_once(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account = await _account(pool, now)
    payout_id = await accepted_payout(pool, account, 100, sort_code_beneficiary("rent"), now)
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO jobs (kind, payload, run_at) VALUES ($1, $2, $3)",
            ADVANCE_JOB,
            {"payout_id": str(payout_id)},
            now,
        )
    assert await run_payout_batch(pool, now) == 1
    assert await run_payout_batch(pool, now) == 1  # the duplicate, which finds nothing to do
    assert await run_payout_batch(pool, now) == 0
    async with pool.acquire() as conn:
        executions = await conn.fetchval(
            "SELECT count(*) FROM ledger_transactions WHERE reference_id = $1"
            " AND kind = 'payout_execution'",
            payout_id,
        )
        events = await conn.fetchval(
            "SELECT count(*) FROM events WHERE event_type = 'payout_executed' AND merchant_id = $1",
            account.merchant_id,
        )
        assert await check_ledger(conn) == []
    assert (executions, events) == (1, 1)


async def test_jobs_a_batch_cannot_take_are_left_to_advance_payout(pool: asyncpg.Pool) -> None:
    clock = ServiceClock()
    now = clock.now()
    payer = await _account(pool, now)
    watched = await _account(pool, now, threshold=5_000)
    payee = await _account(pool, now, credit=1)
    assert payee.identifiers.sort_code is not None
    internal = sort_code_beneficiary(
        "to a Bankrail account",
        "Payee",
        sort_code=payee.identifiers.sort_code,
        account_number=payee.identifiers.account_number,
    )
    ids = []
    for account, beneficiary, amount in (
        (payer, internal, 100),
        (watched, sort_code_beneficiary("rent fail:scheme_error", "Jane Doe"), 6_000),
    ):
        ids.append(await accepted_payout(pool, account, amount, beneficiary, now))
    assert await run_payout_batch(pool, now) == 0

    queue = payout_queue(pool, clock)
    # A grace longer than the default 200 ms, so that a slow machine's set-up above does not
    # use it up before the first round (the jobs have been due since `now`).
    queue.runner_grace = timedelta(seconds=30)
    assert await queue.run_due() == 0  # left to the batches for their grace
    clock.set_offset(queue.runner_grace)
    assert await queue.run_due() == 2
    async with pool.acquire() as conn:
        stages = await conn.fetch(
            "SELECT stage FROM payouts WHERE id = ANY($1::uuid[]) ORDER BY created_at", ids
        )
        # The hold took the watched account below its threshold, the release back to twice it.
        notified = await conn.fetchval(
            "SELECT count(*) FROM events WHERE event_type = 'balance_notification'"
            " AND merchant_id = $1",
            watched.merchant_id,
        )
        assert await check_ledger(conn) == []
    assert sorted(r["stage"] for r in stages) == ["executed", "failed"]
    assert notified == 2  # below_threshold, then recovered
    credited = await get_account(pool, payee.id)
    assert credited is not None
    assert credited.available_balance == 101
