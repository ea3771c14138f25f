"""Integration tests for bankrail.rails.incoming.receive_transfer (sandbox top-ups)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg
import orjson
import pytest

from bankrail.core.problems import ProblemError
from bankrail.ledger.service import check_ledger
from bankrail.merchants.models import MerchantAccount
from bankrail.merchants.service import (
    create_merchant,
    create_merchant_account,
    get_account,
    set_webhooks,
)
from bankrail.rails.incoming import IncomingTransfer, receive_transfer

NOW = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)


async def _account(
    pool: asyncpg.Pool, currency: str = "GBP", payouts_uri: str | None = None
) -> MerchantAccount:
    async with pool.acquire() as conn, conn.transaction():
        merchant = await create_merchant(conn, "Top Up Ltd", NOW)
        if payouts_uri:
            await set_webhooks(conn, merchant, None, payouts_uri)
        return await create_merchant_account(conn, merchant, currency, None, NOW)


def _transfer(**fields: object) -> IncomingTransfer:
    base: dict[str, object] = {
        "amount_in_minor": 12_345,
        "currency": "GBP",
        "remitter_name": "Jane Payer",
        "reference": "invoice 42",
        "remitter_iban": "GB33BUKB20201555555555",
    }
    return IncomingTransfer(**{**base, **fields})  # type: ignore[arg-type]


async def _written(conn: asyncpg.Connection) -> dict[str, int]:
    counts = {}
    for table in (
        "topups",
        "ledger_transactions",
        "ledger_postings",
        "events",
        "webhook_deliveries",
        "account_activity",
    ):
        counts[table] = await conn.fetchval(f"SELECT count(*) FROM {table}")
    return counts


async def test_credit_by_iban(pool: asyncpg.Pool) -> None:
    account = await _account(pool)
    async with pool.acquire() as conn, conn.transaction():
        transfer_id, account_id = await receive_transfer(
            conn, _transfer(iban=account.identifiers.iban), NOW
        )
    assert account_id == account.id
    async with pool.acquire() as conn:
        after = await get_account(conn, account.id)
        assert after is not None
        assert after.available_balance == 12_345
        assert after.current_balance == 12_345
        topup = await conn.fetchrow("SELECT * FROM topups WHERE id = $1", transfer_id)
        assert topup is not None
        assert topup["merchant_account_id"] == account.id
        assert topup["amount_in_minor"] == 12_345
        assert topup["remitter_name"] == "Jane Payer"
        assert topup["reference"] == "invoice 42"
        assert topup["received_at"] == NOW
        activity = await conn.fetchrow(
            "SELECT type, amount_in_minor, status FROM account_activity WHERE id = $1",
            transfer_id,
        )
        assert activity is not None
        assert dict(activity) == {"type": "topup", "amount_in_minor": 12_345, "status": "settled"}
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM ledger_transactions"
                " WHERE kind = 'topup' AND reference_id = $1",
                transfer_id,
            )
            == 1
        )
        assert await check_ledger(conn) == []


async def test_credit_by_sort_code_and_account_number(pool: asyncpg.Pool) -> None:
    account = await _account(pool)
    other = await _account(pool)
    async with pool.acquire() as conn, conn.transaction():
        _, account_id = await receive_transfer(
            conn,
            _transfer(
                sort_code=account.identifiers.sort_code,
                account_number=account.identifiers.account_number,
            ),
            NOW,
        )
    assert account_id == account.id
    async with pool.acquire() as conn:
        credited = await get_account(conn, account.id)
        untouched = await get_account(conn, other.id)
    assert credited is not None
    assert untouched is not None
    assert credited.available_balance == 12_345
    assert untouched.available_balance == 0


async def test_credit_of_a_eur_account_by_iban(pool: asyncpg.Pool) -> None:
    account = await _account(pool, "EUR")
    async with pool.acquire() as conn, conn.transaction():
        await receive_transfer(conn, _transfer(iban=account.identifiers.iban, currency="EUR"), NOW)
        after = await get_account(conn, account.id)
    assert after is not None
    assert after.available_balance == 12_345


@pytest.mark.parametrize(
    ("destination", "field"),
    [
        ({"iban": "GB94BARC10201530093459"}, "iban"),
        ({"sort_code": "608371", "account_number": "00000000"}, "account_number"),
        ({"sort_code": "200000", "account_number": "ACCOUNT"}, "account_number"),
    ],
)
async def test_unknown_identifier_is_a_400_and_writes_nothing(
    pool: asyncpg.Pool, destination: dict[str, str], field: str
) -> None:
    account = await _account(pool)
    if destination.get("account_number") == "ACCOUNT":
        # Right account number, wrong sort code.
        destination = {**destination, "account_number": account.identifiers.account_number or ""}
    async with pool.acquire() as conn:
        before = await _written(conn)
        with pytest.raises(ProblemError) as caught:
            async with conn.transaction():
                await receive_transfer(conn, _transfer(**destination), NOW)
        assert caught.value.problem.status == 400
        assert caught.value.errors is not None
        assert field in caught.value.errors
        assert await _written(conn) == before
        after = await get_account(conn, account.id)
        assert after is not None
        assert after.available_balance == 0


async def test_wrong_currency_is_a_400_and_writes_nothing(pool: asyncpg.Pool) -> None:
    account = await _account(pool, "GBP")
    async with pool.acquire() as conn:
        before = await _written(conn)
        with pytest.raises(ProblemError) as caught:
            async with conn.transaction():
                await receive_transfer(
                    conn, _transfer(iban=account.identifiers.iban, currency="EUR"), NOW
                )
        assert caught.value.problem.status == 400
        assert caught.value.errors is not None
        assert "currency" in caught.value.errors
        assert await _written(conn) == before
        after = await get_account(conn, account.id)
        assert after is not None
        assert after.available_balance == 0


async def _event_and_delivery(
    conn: asyncpg.Connection,
) -> tuple[asyncpg.Record, asyncpg.Record]:
    event = await conn.fetchrow(
        "SELECT id, merchant_id, family, event_type, payload, created_at, xmin::text AS xmin"
        " FROM events"
    )
    delivery = await conn.fetchrow(
        "SELECT event_id, merchant_id, event_type, uri, status, next_attempt_at,"
        " xmin::text AS xmin FROM webhook_deliveries"
    )
    assert event is not None
    assert delivery is not None
    return event, delivery


async def test_topup_event_and_skipped_delivery_without_payouts_uri(pool: asyncpg.Pool) -> None:
    account = await _account(pool)
    async with pool.acquire() as conn:
        async with conn.transaction():
            transfer_id, _ = await receive_transfer(
                conn, _transfer(iban=account.identifiers.iban), NOW
            )
        event, delivery = await _event_and_delivery(conn)
        topup_xmin = await conn.fetchval("SELECT xmin::text FROM topups WHERE id = $1", transfer_id)
        ledger_xmin = await conn.fetchval(
            "SELECT xmin::text FROM ledger_transactions WHERE reference_id = $1", transfer_id
        )
    # Written by one and the same database transaction.
    assert event["xmin"] == delivery["xmin"] == topup_xmin == ledger_xmin
    assert event["merchant_id"] == account.merchant_id
    assert event["family"] == "payouts"
    assert event["event_type"] == "topup_received"
    assert event["created_at"] == NOW
    body = orjson.loads(event["payload"])
    assert body == {
        "event_type": "topup_received",
        "event_schema_version": 1,
        "event_id": str(event["id"]),
        "event_body": {
            "iban": account.identifiers.iban,
            "currency": "GBP",
            "amount_in_minor": 12_345,
            "remitter_name": "Jane Payer",
            "remitter_iban": "GB33BUKB20201555555555",
            "reference": "invoice 42",
            "received_at": "2026-03-01T12:00:00.2500000Z",
        },
    }
    uuid.UUID(body["event_id"])
    assert delivery["event_id"] == event["id"]
    assert delivery["event_type"] == "topup_received"
    assert delivery["status"] == "skipped"
    assert delivery["uri"] is None
    assert delivery["next_attempt_at"] is None


async def test_topup_delivery_is_pending_with_a_payouts_uri(pool: asyncpg.Pool) -> None:
    uri = "http://127.0.0.1:9/payouts-webhooks"
    account = await _account(pool, payouts_uri=uri)
    async with pool.acquire() as conn:
        async with conn.transaction():
            await receive_transfer(conn, _transfer(iban=account.identifiers.iban), NOW)
        event, delivery = await _event_and_delivery(conn)
    assert event["xmin"] == delivery["xmin"]
    assert delivery["event_id"] == event["id"]
    assert delivery["status"] == "pending"
    assert delivery["uri"] == uri
    assert delivery["next_attempt_at"] == NOW


async def test_a_rolled_back_transfer_leaves_no_trace(pool: asyncpg.Pool) -> None:
    account = await _account(pool)
    async with pool.acquire() as conn:
        before = await _written(conn)
        tx = conn.transaction()
        await tx.start()
        await receive_transfer(conn, _transfer(iban=account.identifiers.iban), NOW)
        during = await _written(conn)
        await tx.rollback()
        assert all(during[t] > before[t] for t in before)
        assert await _written(conn) == before
