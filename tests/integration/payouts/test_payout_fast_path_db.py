"""The one-statement `POST /v3/payouts` (migration 0005) on real PostgreSQL.

Promise: in the common case it commits exactly the rows the general path writes (payout,
hold, activity, first job, stored answer), and in every other case it writes nothing and
says so, so the general path decides the answer.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import orjson
import pytest

from bankrail.core.clock import ServiceClock
from bankrail.ledger.service import check_ledger
from bankrail.merchants.balances import hold_funds
from bankrail.merchants.service import get_account
from bankrail.payouts.service import (
    ADVANCE_JOB,
    PayoutBatcher,
    accept_payout,
    open_loop_destination,
)
from bankrail.rails.screening import replace_screening_list
from bankrail.security.idempotency import lock_key
from support.accounts import funded_account, sort_code_beneficiary
from support.payouts import accept_at_once, until_waiting_for_a_lock

_COMPARED = (
    "api, merchant_account_id, transaction_id, amount_in_minor, currency, beneficiary,"
    " beneficiary_name, beneficiary_iban, beneficiary_sort_code, beneficiary_account_number,"
    " reference, context_code, scheme_id, destination_account_id, stage, pending_failure"
)


async def _written(pool: asyncpg.Pool, payout_id: uuid.UUID) -> dict[str, Any]:
    """Everything a payout's acceptance wrote, without its id and time."""
    async with pool.acquire() as conn:
        payout = await conn.fetchrow(f"SELECT {_COMPARED} FROM payouts WHERE id = $1", payout_id)
        activity = await conn.fetchrow(
            "SELECT type, amount_in_minor, status, details FROM account_activity WHERE id = $1",
            payout_id,
        )
        ledger = await conn.fetch(
            "SELECT t.kind, p.amount FROM ledger_transactions t"
            " JOIN ledger_postings p ON p.transaction_id = t.id"
            " WHERE t.reference_id = $1 ORDER BY p.amount",
            payout_id,
        )
        jobs = await conn.fetch(
            "SELECT kind, payload FROM jobs WHERE payload ->> 'payout_id' = $1", str(payout_id)
        )
    assert payout is not None
    assert activity is not None
    details = dict(activity["details"])
    details.pop("transaction_id")  # the payout's own id
    return {
        "payout": dict(payout),
        "activity": {**dict(activity), "details": details},
        "ledger": [tuple(r) for r in ledger],
        "jobs": [(r["kind"], r["payload"] == {"payout_id": str(payout_id)}) for r in jobs],
    }


async def _counts(pool: asyncpg.Pool) -> tuple[int, ...]:
    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM payouts), (SELECT count(*) FROM ledger_transactions),"
            " (SELECT count(*) FROM jobs), (SELECT count(*) FROM idempotency_keys),"
            " (SELECT count(*) FROM account_activity)"
        )
    assert row is not None
    return tuple(row)


async def test_the_common_case_commits_what_the_general_path_writes(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    answer = await accept_at_once(PayoutBatcher(pool), account, now)
    assert answer is not None
    payout_id = uuid.UUID(orjson.loads(answer)["id"])

    async with pool.acquire() as conn, conn.transaction():
        destination = await open_loop_destination(
            conn, account, "GBP", sort_code_beneficiary("rent")
        )
        general_id = await accept_payout(
            conn,
            api="v3",
            account=account,
            amount=300,
            destination=destination,
            reference="rent",
            metadata={"order": "42"},
            now=now,
        )
    fast, general = await _written(pool, payout_id), await _written(pool, general_id)
    assert fast == general
    assert fast["jobs"] == [(ADVANCE_JOB, True)]
    async with pool.acquire() as conn:
        stored = await conn.fetchrow(
            "SELECT status_code, body FROM idempotency_keys WHERE scope = 'v3:client'"
            " AND key = 'k1'"
        )
        metadata = await conn.fetchval("SELECT metadata FROM payouts WHERE id = $1", payout_id)
        assert await check_ledger(conn) == []
    assert stored is not None
    assert (stored["status_code"], stored["body"]) == (202, answer)
    assert metadata == {"order": "42"}
    after = await get_account(pool, account.id)  # type: ignore[arg-type]
    assert after is not None
    assert (after.available_balance, after.held_balance) == (400, 600)


@pytest.mark.parametrize(
    "case",
    [
        "key_already_used",
        "insufficient_funds",
        "screened_name",
        "payee_is_a_bankrail_account",
        "balance_threshold",
        "another_merchants_account",
        "currency_mismatch",
        "gbp_to_a_foreign_iban",
    ],
)
async def test_every_other_case_writes_nothing(pool: asyncpg.Pool, case: str) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    kwargs: dict[str, Any] = {}
    if case == "key_already_used":
        assert await accept_at_once(PayoutBatcher(pool), account, now) is not None
    elif case == "insufficient_funds":
        kwargs["amount"] = 1_001
    elif case == "screened_name":
        async with pool.acquire() as conn:
            await replace_screening_list(conn, ["Jane Doe"])
    elif case == "payee_is_a_bankrail_account":
        other = await funded_account(pool, now, 1)
        assert other.identifiers.sort_code
        assert other.identifiers.account_number
        kwargs["beneficiary"] = sort_code_beneficiary(
            "rent",
            sort_code=other.identifiers.sort_code,
            account_number=other.identifiers.account_number,
        )
    elif case == "balance_threshold":
        async with pool.acquire() as conn:
            await conn.execute(
                "UPDATE merchant_accounts SET balance_threshold = 10 WHERE id = $1", account.id
            )
    elif case == "another_merchants_account":
        kwargs["merchant_id"] = uuid.uuid4()
    elif case == "currency_mismatch":
        kwargs["currency"] = "EUR"
    else:
        kwargs["beneficiary"] = {
            **sort_code_beneficiary("rent"),
            "account_identifier": {"type": "iban", "iban": "DE89370400440532013000"},
        }
    before = await _counts(pool)
    assert await accept_at_once(PayoutBatcher(pool), account, now, **kwargs) is None
    assert await _counts(pool) == before


async def test_a_key_in_flight_elsewhere_is_left_to_the_general_path(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    before = await _counts(pool)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("v3:client", "k1"))
        assert await accept_at_once(PayoutBatcher(pool), account, now) is None
    assert await _counts(pool) == before


async def test_concurrent_payouts_share_commits_and_never_overdraw(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    batcher = PayoutBatcher(pool)  # one per process, as in the service
    answers = await asyncio.gather(
        *(accept_at_once(batcher, account, now, key=f"k{i}", amount=300) for i in range(8)),
        *(accept_at_once(batcher, account, now, key="twice", amount=1) for _ in range(2)),
    )
    taken = [a for a in answers[:8] if a is not None]
    assert len(taken) == 3  # 3 x 300 fit in 1,000 (after the 1 below, 999 is left)
    assert sum(a is not None for a in answers[8:]) == 1  # one key, one payout
    after = await get_account(pool, account.id)  # type: ignore[arg-type]
    assert after is not None
    assert (after.available_balance, after.held_balance) == (99, 901)
    async with pool.acquire() as conn:
        assert await check_ledger(conn) == []
        assert await conn.fetchval("SELECT count(*) FROM payouts") == 4


async def test_a_balance_that_falls_before_the_batch_locks_it_sends_the_batch_elsewhere(
    pool: asyncpg.Pool,
) -> None:
    """The batch reads balances before it locks the ledger rows; a hold committed in between
    that leaves too little makes the whole batch roll back, so the general path decides."""
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    async with pool.acquire() as other:
        transaction = other.transaction()
        await transaction.start()
        await other.execute(
            "SELECT 1 FROM ledger_accounts WHERE id = $1 FOR UPDATE", account.available_ledger_id
        )
        batch = asyncio.create_task(accept_at_once(PayoutBatcher(pool), account, now, amount=600))
        # Until the batch waits for the ledger row.
        assert await until_waiting_for_a_lock(pool, "bankrail_accept_v3_payouts", batch) == 1
        before = await _counts(pool)
        await hold_funds(other, account, amount=500, reference_id=uuid.uuid4(), now=now)
        await transaction.commit()
        assert await batch is None
    assert await _counts(pool) == (before[0], before[1] + 1, *before[2:])  # the hold alone
    after = await get_account(pool, account.id)  # type: ignore[arg-type]
    assert after is not None
    assert (after.available_balance, after.held_balance) == (500, 500)
    async with pool.acquire() as conn:
        assert await check_ledger(conn) == []
