"""Payout holds, execution and recovery on real PostgreSQL (docs/architecture.md, docs/api.md).

Payouts are accepted with `payouts.service.accept_payouts` (each alone, in its own connection
and transaction) and moved on by a `JobQueue` running `advance_payout`.
"""

from __future__ import annotations

import asyncio
import uuid
from functools import partial
from typing import Any

import asyncpg
import pytest

from bankrail.core.clock import ServiceClock
from bankrail.core.jsonbody import loads
from bankrail.core.powers import SANDBOX
from bankrail.core.problems import ProblemError
from bankrail.jobs.queue import JobQueue
from bankrail.ledger.service import check_ledger
from bankrail.merchants.models import AccountIdentifiers, MerchantAccount
from bankrail.merchants.service import get_account
from bankrail.payments.sources import record_payment_source
from bankrail.payouts.jobs import advance_payout
from bankrail.payouts.service import ADVANCE_JOB
from support.accounts import funded_account, sort_code_beneficiary
from support.payouts import accept_one, accepted_payout, payout_request


async def _clock(pool: asyncpg.Pool) -> ServiceClock:
    clock = ServiceClock()
    async with pool.acquire() as conn:
        await clock.refresh(conn)
    return clock


def _queue(pool: asyncpg.Pool, clock: ServiceClock) -> JobQueue:
    queue = JobQueue(pool, clock)
    queue.register(ADVANCE_JOB, partial(advance_payout, powers=SANDBOX))
    return queue


async def _drain(queue: JobQueue, pool: asyncpg.Pool, *, max_rounds: int = 50) -> int:
    """Run due jobs until the jobs table is empty; fail if a job keeps failing."""
    ran = 0
    for _ in range(max_rounds):
        ran += await queue.run_due(limit=10_000)
        async with pool.acquire() as conn:
            left = await conn.fetchval("SELECT count(*) FROM jobs")
            errors = await conn.fetch("SELECT kind, last_error FROM jobs WHERE attempts > 0")
        assert not errors, [dict(e) for e in errors]
        if left == 0:
            return ran
    raise AssertionError(f"jobs left after {max_rounds} rounds")


async def _fresh(pool: asyncpg.Pool, account_id: uuid.UUID) -> MerchantAccount:
    async with pool.acquire() as conn:
        account = await get_account(conn, account_id)
    assert account is not None
    return account


async def _payout(pool: asyncpg.Pool, payout_id: uuid.UUID) -> asyncpg.Record:
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM payouts WHERE id = $1", payout_id)
    assert row is not None
    return row


async def _ledger_kinds(pool: asyncpg.Pool, reference_id: uuid.UUID) -> list[str]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT kind FROM ledger_transactions WHERE reference_id = $1"
            " ORDER BY created_at, kind",
            reference_id,
        )
    return [r["kind"] for r in rows]


async def _assert_ledger_clean(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        assert await check_ledger(conn) == []


# --- concurrency: holds never overdraw ------------------------------------------------------


async def test_fifty_concurrent_payouts_against_funds_for_ten(pool: asyncpg.Pool) -> None:
    clock = await _clock(pool)
    account = await funded_account(pool, clock.now(), 1_000)
    assert (account.available_balance, account.current_balance) == (1_000, 1_000)

    start = asyncio.Event()

    async def one(i: int) -> uuid.UUID:
        await start.wait()
        beneficiary = sort_code_beneficiary(f"payout {i}", account_number=f"{10_000_000 + i}")
        return await accepted_payout(pool, account, 100, beneficiary, clock.now())

    tasks = [asyncio.create_task(one(i)) for i in range(50)]
    start.set()
    payout_ids = await asyncio.gather(*tasks)
    assert len(set(payout_ids)) == 50

    # Acceptance held the funds of exactly ten payouts; the rest wait to fail.
    held = await _fresh(pool, account.id)
    assert held.available_balance == 0
    assert held.held_balance == 1_000
    assert held.current_balance == 1_000
    async with pool.acquire() as conn:
        pending = await conn.fetch(
            "SELECT stage, pending_failure FROM payouts WHERE merchant_account_id = $1", account.id
        )
        holds = await conn.fetchval(
            "SELECT count(*) FROM ledger_transactions WHERE kind = 'payout_hold'"
            " AND reference_id = ANY($1::uuid[])",
            payout_ids,
        )
    assert {r["stage"] for r in pending} == {"pending"}
    assert (
        sorted(str(r["pending_failure"]) for r in pending)
        == ["None"] * 10 + ["insufficient_funds"] * 40
    )
    assert holds == 10
    await _assert_ledger_clean(pool)

    await _drain(_queue(pool, clock), pool)

    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT id, stage, failure_reason, executed_at, failed_at FROM payouts"
            " WHERE merchant_account_id = $1",
            account.id,
        )
        executions = await conn.fetchval(
            "SELECT count(*) FROM ledger_transactions WHERE kind = 'payout_execution'"
            " AND reference_id = ANY($1::uuid[])",
            payout_ids,
        )
        releases = await conn.fetchval(
            "SELECT count(*) FROM ledger_transactions WHERE kind = 'payout_release'"
            " AND reference_id = ANY($1::uuid[])",
            payout_ids,
        )
        negative = await conn.fetchval(
            "SELECT count(*) FROM ledger_accounts WHERE NOT allow_negative AND balance < 0"
        )
    executed = [r for r in rows if r["stage"] == "executed"]
    failed = [r for r in rows if r["stage"] == "failed"]
    assert len(executed) == 10
    assert len(failed) == 40
    assert all(r["executed_at"] is not None and r["failure_reason"] is None for r in executed)
    assert {r["failure_reason"] for r in failed} == {"insufficient_funds"}
    assert all(r["failed_at"] is not None for r in failed)
    assert executions == 10
    assert releases == 0  # rejected payouts never held anything
    assert negative == 0

    final = await _fresh(pool, account.id)
    assert final.available_balance == 0
    assert final.held_balance == 0
    assert final.current_balance == 0
    await _assert_ledger_clean(pool)


# --- a scheme failure releases the hold -----------------------------------------------------


async def test_scheme_error_releases_the_hold(pool: asyncpg.Pool) -> None:
    clock = await _clock(pool)
    account = await funded_account(pool, clock.now(), 5_000)
    payout_id = await accepted_payout(
        pool, account, 1_200, sort_code_beneficiary("inv 9 fail:scheme_error"), clock.now()
    )
    during = await _fresh(pool, account.id)
    assert (during.available_balance, during.current_balance) == (3_800, 5_000)

    await _drain(_queue(pool, clock), pool)

    row = await _payout(pool, payout_id)
    assert row["stage"] == "failed"
    assert row["failure_reason"] == "scheme_error"
    assert row["authorized_at"] is not None
    assert row["submitted_at"] is not None
    assert row["executed_at"] is None
    after = await _fresh(pool, account.id)
    assert (after.available_balance, after.held_balance, after.current_balance) == (5_000, 0, 5_000)
    assert sorted(await _ledger_kinds(pool, payout_id)) == ["payout_hold", "payout_release"]
    await _assert_ledger_clean(pool)


# --- internal transfers ---------------------------------------------------------------------


async def test_internal_transfer_credits_the_payee_in_the_same_ledger_transaction(
    pool: asyncpg.Pool,
) -> None:
    clock = await _clock(pool)
    payer = await funded_account(pool, clock.now(), 10_000, name="Payer Ltd")
    payee = await funded_account(pool, clock.now(), 50, name="Payee Ltd")
    assert payee.identifiers.sort_code is not None
    assert payee.identifiers.account_number is not None
    beneficiary = sort_code_beneficiary(
        "internal",
        sort_code=payee.identifiers.sort_code,
        account_number=payee.identifiers.account_number,
        name="Payee Ltd",
    )
    payout_id = await accepted_payout(pool, payer, 2_500, beneficiary, clock.now())
    row = await _payout(pool, payout_id)
    assert row["scheme_id"] == "internal_transfer"
    assert row["destination_account_id"] == payee.id

    await _drain(_queue(pool, clock), pool)

    row = await _payout(pool, payout_id)
    assert row["stage"] == "executed"
    assert row["scheme_id"] == "internal_transfer"
    payer_after = await _fresh(pool, payer.id)
    payee_after = await _fresh(pool, payee.id)
    assert (payer_after.available_balance, payer_after.current_balance) == (7_500, 7_500)
    assert payer_after.held_balance == 0
    assert payee_after.available_balance == payee.available_balance + 2_500
    assert payee_after.current_balance == payee.current_balance + 2_500

    async with pool.acquire() as conn:
        transfers = await conn.fetch(
            "SELECT id FROM ledger_transactions WHERE reference_id = $1"
            " AND kind = 'internal_transfer'",
            payout_id,
        )
        assert len(transfers) == 1
        postings = await conn.fetch(
            "SELECT account_id, amount FROM ledger_postings WHERE transaction_id = $1",
            transfers[0]["id"],
        )
        topup = await conn.fetchrow(
            "SELECT merchant_account_id, amount_in_minor FROM topups WHERE id = $1", payout_id
        )
    assert sorted((p["account_id"], p["amount"]) for p in postings) == sorted(
        [(payer.held_ledger_id, -2_500), (payee.available_ledger_id, 2_500)]
    )
    assert topup is not None
    assert (topup["merchant_account_id"], topup["amount_in_minor"]) == (payee.id, 2_500)
    assert sorted(await _ledger_kinds(pool, payout_id)) == ["internal_transfer", "payout_hold"]
    await _assert_ledger_clean(pool)


# --- crash recovery and exactly-once --------------------------------------------------------


async def _fingerprint(pool: asyncpg.Pool, payout_id: uuid.UUID) -> tuple[Any, ...]:
    async with pool.acquire() as conn:
        payout = await conn.fetchrow("SELECT * FROM payouts WHERE id = $1", payout_id)
        return (
            dict(payout) if payout else None,
            await conn.fetchval("SELECT count(*) FROM ledger_transactions"),
            await conn.fetchval("SELECT count(*) FROM ledger_postings"),
            await conn.fetchval("SELECT count(*) FROM events"),
            await conn.fetchval("SELECT count(*) FROM jobs"),
            await conn.fetchval("SELECT coalesce(sum(balance), 0) FROM ledger_accounts"),
            tuple(
                (r["code"], r["balance"])
                for r in await conn.fetch("SELECT code, balance FROM ledger_accounts ORDER BY code")
            ),
        )


async def test_accepted_payout_survives_a_restart_and_executes_once(pool: asyncpg.Pool) -> None:
    clock = await _clock(pool)
    account = await funded_account(pool, clock.now(), 3_000)
    payout_id = await accepted_payout(pool, account, 700, sort_code_beneficiary(), clock.now())
    # The process "dies" here: no queue ever ran. A new process starts with a new clock
    # and a new queue.
    restarted_clock = await _clock(pool)
    ran = await _drain(_queue(pool, restarted_clock), pool)
    assert ran == 1  # authorize, submit and execute are due at once: one job, one commit

    row = await _payout(pool, payout_id)
    assert row["stage"] == "executed"
    assert sorted(await _ledger_kinds(pool, payout_id)) == ["payout_execution", "payout_hold"]
    after = await _fresh(pool, account.id)
    assert (after.available_balance, after.held_balance, after.current_balance) == (2_300, 0, 2_300)
    await _assert_ledger_clean(pool)

    # A duplicate job for a finished payout changes nothing.
    before = await _fingerprint(pool, payout_id)
    async with pool.acquire() as conn, conn.transaction():
        await advance_payout(
            conn, {"payout_id": str(payout_id)}, restarted_clock.now(), powers=SANDBOX
        )
    assert await _fingerprint(pool, payout_id) == before
    assert sorted(await _ledger_kinds(pool, payout_id)) == ["payout_execution", "payout_hold"]


async def test_restart_mid_flight_resumes_from_the_last_committed_step(
    pool: asyncpg.Pool,
) -> None:
    clock = await _clock(pool)
    account = await funded_account(pool, clock.now(), 3_000)
    payout_id = await accepted_payout(
        pool, account, 400, sort_code_beneficiary("payout delay:60"), clock.now()
    )
    first = _queue(pool, clock)
    assert await first.run_one()  # authorize and submit, then the process dies
    assert (await _payout(pool, payout_id))["stage"] == "submitted"
    assert await first.run_one() is False  # the scheme answers in 60 s

    async with pool.acquire() as conn:
        await clock.advance(conn, 60)
    await _drain(_queue(pool, await _clock(pool)), pool)
    row = await _payout(pool, payout_id)
    assert row["stage"] == "executed"
    assert sorted(await _ledger_kinds(pool, payout_id)) == ["payout_execution", "payout_hold"]
    async with pool.acquire() as conn:
        events = await conn.fetch(
            "SELECT event_type FROM events"
            " WHERE convert_from(payload, 'UTF8')::jsonb ->> 'payout_id' = $1",
            str(payout_id),
        )
    assert [e["event_type"] for e in events] == ["payout_executed"]
    await _assert_ledger_clean(pool)


@pytest.mark.parametrize("reference", ["payout", "fail:scheme_error"])
async def test_advancing_a_finished_payout_again_is_a_no_op(
    pool: asyncpg.Pool, reference: str
) -> None:
    clock = await _clock(pool)
    account = await funded_account(pool, clock.now(), 1_000)
    payout_id = await accepted_payout(
        pool, account, 100, sort_code_beneficiary(reference), clock.now()
    )
    await _drain(_queue(pool, clock), pool)
    before = await _fingerprint(pool, payout_id)
    for _ in range(2):
        async with pool.acquire() as conn, conn.transaction():
            await advance_payout(conn, {"payout_id": str(payout_id)}, clock.now(), powers=SANDBOX)
    assert await _fingerprint(pool, payout_id) == before
    await _assert_ledger_clean(pool)


# --- closed loop (payment sources recorded directly: pay-ins do not exist yet) ---------------


async def test_closed_loop_payout_to_a_recorded_payment_source(pool: asyncpg.Pool) -> None:
    clock = await _clock(pool)
    account = await funded_account(pool, clock.now(), 2_000)
    other = await funded_account(pool, clock.now(), 2_000)
    remitter = AccountIdentifiers("", "040004", "87654321")
    async with pool.acquire() as conn, conn.transaction():
        source = await record_payment_source(
            conn,
            merchant_id=account.merchant_id,
            merchant_account_id=account.id,
            user_id="user-1",
            account_holder_name="Ann Payer",
            identifiers=remitter,
            payment_id=None,
            now=clock.now(),
        )

    def beneficiary(user_id: str = "user-1", source_id: uuid.UUID = source.id) -> dict[str, Any]:
        return {
            "type": "payment_source",
            "user_id": user_id,
            "payment_source_id": str(source_id),
            "reference": "refund 1",
        }

    outcome = await accept_one(
        pool, payout_request(account, clock.now(), amount=600, beneficiary=beneficiary())
    )
    assert not isinstance(outcome, ProblemError)
    payout_id = uuid.UUID(loads(outcome[1])["id"])
    accepted = await _payout(pool, payout_id)
    assert accepted["beneficiary_name"] == "Ann Payer"
    assert accepted["destination_account_id"] is None
    assert accepted["beneficiary"] == {
        "type": "payment_source",
        "user_id": "user-1",
        "payment_source_id": str(source.id),
        "reference": "refund 1",
        "account_holder_name": "Ann Payer",
        "account_identifiers": [
            {
                "type": "sort_code_account_number",
                "sort_code": "040004",
                "account_number": "87654321",
            }
        ],
    }

    # Another user, another account, or an unknown source: 400 naming the source (stored
    # under the key like every client error of v3).
    for account_used, ben in (
        (account, beneficiary(user_id="user-2")),
        (other, beneficiary()),
        (account, beneficiary(source_id=uuid.uuid4())),
    ):
        refused = await accept_one(pool, payout_request(account_used, clock.now(), beneficiary=ben))
        assert not isinstance(refused, ProblemError)
        assert refused[0] == 400
        assert "beneficiary.payment_source_id" in loads(refused[1])["errors"]

    await _drain(_queue(pool, clock), pool)
    row = await _payout(pool, payout_id)
    assert row["stage"] == "executed"
    assert row["scheme_id"] == "faster_payments_service"
    after = await _fresh(pool, account.id)
    assert (after.available_balance, after.current_balance) == (1_400, 1_400)
    await _assert_ledger_clean(pool)
