"""Payout acceptance (`payouts.service.accept_payouts`, run by `PayoutAcceptance`) on real
PostgreSQL.

Promise: every request is decided by the same rules whether it is committed alone or with
the other requests of the moment (group commit); the batch's read locks the accounts' ledger
rows, so no request overdraws, whichever process holds them before; a key is used once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

import asyncpg
import orjson
import pytest

from bankrail.core.clock import ServiceClock
from bankrail.core.problems import CONFLICT, ProblemError
from bankrail.ledger.service import check_ledger
from bankrail.merchants.models import AccountIdentifiers
from bankrail.merchants.service import get_account
from bankrail.payments.sources import record_payment_source
from bankrail.payouts.service import ADVANCE_JOB, PayoutAcceptance, accept_payouts
from bankrail.rails.screening import name_skeleton, replace_screening_list
from bankrail.security.idempotency import KeyedRequest, key_item, lock_key
from support.accounts import funded_account, sort_code_beneficiary
from support.payouts import (
    TTL,
    accept_at_once,
    accept_one,
    payout_request,
    render_problem,
    until_waiting_for_a_lock,
)

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


def _id(answer: tuple[int, bytes] | ProblemError) -> uuid.UUID:
    assert not isinstance(answer, ProblemError), answer
    assert answer[0] == 202, answer
    return uuid.UUID(orjson.loads(answer[1])["id"])


async def test_a_batch_and_a_batch_of_one_write_the_same_rows(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    answer = await accept_at_once(PayoutAcceptance(pool, render_problem), account, now)
    payout_id = _id(answer)
    alone_id = _id(await accept_one(pool, payout_request(account, now)))
    grouped, alone = await _written(pool, payout_id), await _written(pool, alone_id)
    assert grouped == alone
    assert grouped["jobs"] == [(ADVANCE_JOB, True)]
    assert grouped["ledger"] == [("payout_hold", -300), ("payout_hold", 300)]
    async with pool.acquire() as conn:
        stored = await conn.fetchrow(
            "SELECT status_code, body FROM idempotency_keys WHERE scope = 'v3:client'"
            " AND key = 'k1'"
        )
        metadata = await conn.fetchval("SELECT metadata FROM payouts WHERE id = $1", payout_id)
        assert await check_ledger(conn) == []
    assert stored is not None
    assert (stored["status_code"], stored["body"]) == answer
    assert metadata == {"order": "42"}
    after = await get_account(pool, account.id)  # type: ignore[arg-type]
    assert after is not None
    assert (after.available_balance, after.held_balance) == (400, 600)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("key_already_used", "replay"),
        ("insufficient_funds", ("faster_payments_service", "insufficient_funds", False)),
        ("screened_name", ("faster_payments_service", "blocked", False)),
        ("payee_is_a_bankrail_account", ("internal_transfer", None, True)),
        ("balance_threshold", ("faster_payments_service", None, True)),
        ("another_merchants_account", 404),
        ("currency_mismatch", 400),
        ("gbp_to_a_foreign_iban", 400),
    ],
)
async def test_every_rule_is_decided_by_the_one_path(
    pool: asyncpg.Pool, case: str, expected: Any
) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    acceptance = PayoutAcceptance(pool, render_problem)
    kwargs: dict[str, Any] = {}
    first = None
    if case == "key_already_used":
        first = await accept_at_once(acceptance, account, now)
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
    answer = await accept_at_once(acceptance, account, now, **kwargs)
    after = await _counts(pool)
    if expected == "replay":
        assert answer == first
        assert after == before
        return
    if isinstance(expected, int):
        # Refused, and the problem stored under the key: nothing else is written.
        assert answer[0] == expected
        assert orjson.loads(answer[1])["status"] == expected
        assert after == (before[0], before[1], before[2], before[3] + 1, before[4])
        return
    scheme, pending_failure, held = expected
    payout = await _written(pool, _id(answer))
    assert payout["payout"]["scheme_id"] == scheme
    assert payout["payout"]["pending_failure"] == pending_failure
    assert (payout["ledger"] != []) is held
    balance = await get_account(pool, account.id)  # type: ignore[arg-type]
    assert balance is not None
    assert balance.held_balance == (300 if held else 0)


async def test_a_key_in_flight_elsewhere_is_answered_409_and_writes_nothing(
    pool: asyncpg.Pool,
) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    before = await _counts(pool)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key("v3:client", "k1"))
        with pytest.raises(ProblemError) as raised:
            await accept_at_once(PayoutAcceptance(pool, render_problem), account, now)
    assert raised.value.problem.status == 409
    assert await _counts(pool) == before


async def test_concurrent_payouts_share_commits_and_never_overdraw(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    acceptance = PayoutAcceptance(pool, render_problem)  # one per process, as in the service
    answers = await asyncio.gather(
        *(accept_at_once(acceptance, account, now, key=f"k{i}", amount=300) for i in range(8)),
        *(accept_at_once(acceptance, account, now, key="twice", amount=1) for _ in range(2)),
        return_exceptions=True,
    )
    # One key, one payout: its second use is in flight (409) or replayed.
    twice = answers[8:]
    in_flight = [a for a in twice if isinstance(a, ProblemError)]
    assert all(a.problem.status == 409 for a in in_flight)
    assert len({a for a in twice if not isinstance(a, BaseException)}) == 1
    async with pool.acquire() as conn:
        failures = await conn.fetch(
            "SELECT pending_failure FROM payouts WHERE amount_in_minor = 300"
        )
        assert await check_ledger(conn) == []
        assert await conn.fetchval("SELECT count(*) FROM payouts") == 9
    # 3 x 300 fit in 1,000 (after the 1, 999 is left); the others fail for want of funds.
    assert (
        sorted(str(r["pending_failure"]) for r in failures)
        == ["None"] * 3 + ["insufficient_funds"] * 5
    )
    after = await get_account(pool, account.id)  # type: ignore[arg-type]
    assert after is not None
    assert (after.available_balance, after.held_balance) == (99, 901)


async def test_a_hold_committed_elsewhere_first_is_seen_by_the_batch(
    pool: asyncpg.Pool,
) -> None:
    """The batch reads balances after it locks the ledger rows: a hold another process
    commits while the batch waits for them leaves too little, and the batch's payout fails
    for want of funds (no overdraft, no error)."""
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    async with pool.acquire() as other:
        transaction = other.transaction()
        await transaction.start()
        await other.execute(
            "SELECT 1 FROM ledger_accounts WHERE id = $1 FOR UPDATE", account.available_ledger_id
        )
        acceptance = PayoutAcceptance(pool, render_problem)
        batch = asyncio.create_task(accept_at_once(acceptance, account, now, amount=600))
        # Until the batch waits for the ledger row.
        assert await until_waiting_for_a_lock(pool, "bankrail_read_payout_batch", batch) == 1
        # Another process's payout of 500, held in this open transaction.
        (held,) = await accept_payouts(
            other, [payout_request(account, now, amount=500)], render_problem
        )
        assert not isinstance(held, ProblemError)
        await transaction.commit()
        payout = await _written(pool, _id(await batch))
    assert payout["payout"]["pending_failure"] == "insufficient_funds"
    assert payout["ledger"] == []
    after = await get_account(pool, account.id)  # type: ignore[arg-type]
    assert after is not None
    assert (after.available_balance, after.held_balance) == (500, 500)
    async with pool.acquire() as conn:
        assert await check_ledger(conn) == []


async def test_a_request_that_storage_refuses_fails_alone(pool: asyncpg.Pool) -> None:
    """A batch whose write fails (here a held balance would leave the 64-bit range) is run
    again one request at a time: the others are accepted."""
    now = ServiceClock().now()
    edge = await funded_account(pool, now, 1_000)
    fine = await funded_account(pool, now, 1_000)
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE ledger_accounts SET balance = 9223372036854775807 - 10 WHERE id = $1",
            edge.held_ledger_id,
        )
    acceptance = PayoutAcceptance(pool, render_problem)
    refused, accepted = await asyncio.gather(
        accept_at_once(acceptance, edge, now, key="edge"),
        accept_at_once(acceptance, fine, now, key="fine"),
        return_exceptions=True,
    )
    assert isinstance(refused, asyncpg.NumericValueOutOfRangeError)
    assert not isinstance(accepted, BaseException)
    payout = await _written(pool, _id(accepted))
    assert payout["ledger"] == [("payout_hold", -300), ("payout_hold", 300)]
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM payouts") == 1
        assert await conn.fetchval("SELECT count(*) FROM idempotency_keys") == 1


async def test_a_signed_payout_takes_effect_once_even_after_its_key_expired(
    pool: asyncpg.Pool,
) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now, 1_000)
    signed = dataclasses.replace(payout_request(account, now, amount=300), signature=b"p" * 32)
    first = await accept_one(pool, signed)
    assert isinstance(first, tuple)
    assert first[0] == 202
    later = dataclasses.replace(signed, request=dataclasses.replace(signed.request, now=now + TTL))
    again = await accept_one(pool, later)
    assert isinstance(again, ProblemError)
    assert again.problem is CONFLICT
    async with pool.acquire() as conn:
        payouts = await conn.fetchval(
            "SELECT count(*) FROM payouts WHERE merchant_account_id = $1", account.id
        )
        fresh = await get_account(conn, account.id)
    assert payouts == 1
    assert fresh is not None
    assert fresh.available_balance == 700  # held once


async def test_every_loop_is_screened_by_the_one_rule_in_one_batch(pool: asyncpg.Pool) -> None:
    # One batch: an open loop to a look-alike of a listed name (case and punctuation), a
    # closed loop back to a source whose name is a look-alike (a Cyrillic capital Ie and a
    # zero-width space), and an open loop to a name not listed. The read returns the list
    # once (on the batch's first row) and `rails.screening.is_listed` decides every one.
    now = ServiceClock().now()
    account = await funded_account(pool, now, 10_000)
    async with pool.acquire() as conn, conn.transaction():
        await replace_screening_list(conn, ["Evil Corp"])
        source = await record_payment_source(
            conn,
            merchant_id=account.merchant_id,
            merchant_account_id=account.id,  # type: ignore[arg-type]
            user_id="user-1",
            account_holder_name="\u0415vil\u200b Corp",
            identifiers=AccountIdentifiers("", "040004", "87654321"),
            payment_id=None,
            now=now,
        )
    closed_loop = {
        "type": "payment_source",
        "user_id": "user-1",
        "payment_source_id": str(source.id),
        "reference": "back",
    }
    batch = [
        payout_request(account, now, beneficiary=sort_code_beneficiary("a", "eVIL  corp.")),
        payout_request(account, now, beneficiary=closed_loop),
        payout_request(account, now, beneficiary=sort_code_beneficiary("c", "Evelyn Corp")),
    ]
    async with pool.acquire() as conn, conn.transaction():
        outcomes = await accept_payouts(conn, batch, render_problem)
    failures = [
        (await _written(pool, _id(outcome)))["payout"]["pending_failure"]
        for outcome in outcomes
        if not isinstance(outcome, Exception)
    ]
    assert failures == ["blocked", "blocked", None]


async def test_a_process_reads_the_list_again_only_when_it_has_changed(
    pool: asyncpg.Pool,
) -> None:
    # The read returns the list's skeletons when the caller's version is not the list's; the
    # version changes with every change of the list, whoever writes it (here plain SQL, as a
    # host of the release before might); a payout after a change is screened by the new list.
    now = ServiceClock().now()
    account = await funded_account(pool, now, 10_000)
    keyed = KeyedRequest(f"v3:{account.merchant_id}", str(uuid.uuid4()), b"f", TTL)
    item = [{**key_item(keyed), "merchant_id": str(account.merchant_id)}]
    read = "SELECT list_version, listed_skeletons FROM bankrail_read_payout_batch($1::jsonb, $2)"
    async with pool.acquire() as conn:
        await replace_screening_list(conn, ["Evil Corp"])
        async with conn.transaction():
            first = await conn.fetchrow(read, item, None)
        assert first is not None
        assert first["listed_skeletons"] == [name_skeleton("Evil Corp")]
        async with conn.transaction():
            again = await conn.fetchrow(read, item, first["list_version"])
        assert again is not None
        assert (again["list_version"], again["listed_skeletons"]) == (first["list_version"], None)

    jane = payout_request(account, now, beneficiary=sort_code_beneficiary("r", "Jane Doe"))
    payout = await _written(pool, _id(await accept_one(pool, jane)))
    assert payout["payout"]["pending_failure"] is None
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO screening_list (normalised_name, name) VALUES ($1, 'Jane Doe')",
            name_skeleton("Jane Doe"),
        )
        changed = await conn.fetchval("SELECT version FROM screening_list_version")
    assert changed != first["list_version"]
    jane = payout_request(account, now, beneficiary=sort_code_beneficiary("r", "jane  DOE"))
    payout = await _written(pool, _id(await accept_one(pool, jane)))
    assert payout["payout"]["pending_failure"] == "blocked"
