"""Integration tests for merchants.balances.reevaluate_notifications (docs/api.md)."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import orjson

from bankrail.ledger.movements import PAYOUT, hold, release, top_up
from bankrail.merchants.balances import move
from bankrail.merchants.models import MerchantAccount
from bankrail.merchants.service import (
    create_merchant,
    create_merchant_account,
    get_account,
    set_balance_threshold,
    set_webhooks,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
_SECONDS = itertools.count(1)


def _tick() -> datetime:
    """A later time for each balance change, so that events sort in the order they happened."""
    return NOW + timedelta(seconds=next(_SECONDS))


async def _account(
    conn: asyncpg.Connection, threshold: int | None, payments_uri: str | None = None
) -> MerchantAccount:
    merchant = await create_merchant(conn, "Threshold Ltd", NOW)
    if payments_uri:
        await set_webhooks(conn, merchant, payments_uri, None)
    account = await create_merchant_account(conn, merchant, "GBP", None, NOW)
    if threshold is not None:
        account = await set_balance_threshold(conn, account.id, threshold)
    return account


async def _credit(conn: asyncpg.Connection, account: MerchantAccount, amount: int) -> None:
    async with conn.transaction():
        await move(conn, top_up(account, "bank_transfer", amount, uuid.uuid4()), _tick())


async def _hold(conn: asyncpg.Connection, account: MerchantAccount, amount: int) -> None:
    async with conn.transaction():
        await move(conn, hold(account, PAYOUT, amount, uuid.uuid4()), _tick())


async def _release(conn: asyncpg.Connection, account: MerchantAccount, amount: int) -> None:
    async with conn.transaction():
        await move(conn, release(account, PAYOUT, amount, uuid.uuid4()), _tick())


async def _notifications(conn: asyncpg.Connection) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT e.id, e.family, e.payload, d.status AS delivery FROM events e"
        " JOIN webhook_deliveries d ON d.event_id = e.id"
        " WHERE e.event_type = 'balance_notification' ORDER BY e.created_at"
    )
    found = []
    for row in rows:
        payload = orjson.loads(row["payload"])
        assert row["family"] == "payments"
        assert payload["event_id"] == str(row["id"])
        found.append({**payload, "_delivery": row["delivery"]})
    return found


def _expected(
    account: MerchantAccount, status: str, current: int, available: int
) -> dict[str, Any]:
    return {
        "type": "balance_notification",
        "event_version": 1,
        "merchant_account_id": str(account.id),
        "status": status,
        "threshold_in_minor": 1_000,
        "current_balance_in_minor": current,
        "available_balance_in_minor": available,
    }


def _without_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k not in ("event_id", "_delivery")} for item in items]


async def _state(conn: asyncpg.Connection, account: MerchantAccount) -> str:
    fresh = await get_account(conn, account.id)
    assert fresh is not None
    return fresh.notification_state


async def test_full_cycle_emits_each_notification_with_its_balances(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        account = await _account(conn, 1_000)
        await _credit(conn, account, 5_000)  # normal, no event
        assert await _notifications(conn) == []
        assert await _state(conn, account) == "normal"

        await _hold(conn, account, 3_600)  # available 1 400 <= 1.5 T
        assert await _state(conn, account) == "approaching_threshold"
        await _hold(conn, account, 100)  # still approaching: nothing new
        await _hold(conn, account, 400)  # available 900 <= T
        assert await _state(conn, account) == "below_threshold"
        await _release(conn, account, 900)  # available 1 800: still below (hysteresis)
        assert await _state(conn, account) == "below_threshold"
        await _release(conn, account, 200)  # available 2 000 >= 2 T: recovered
        assert await _state(conn, account) == "normal"

        notifications = await _notifications(conn)
    assert _without_ids(notifications) == [
        _expected(account, "approaching_threshold", 5_000, 1_400),
        _expected(account, "below_threshold", 5_000, 900),
        _expected(account, "recovered", 5_000, 2_000),
    ]
    assert len({n["event_id"] for n in notifications}) == 3
    assert {n["_delivery"] for n in notifications} == {"skipped"}


async def test_crossing_both_bounds_at_once_sends_one_below_notification(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        account = await _account(conn, 1_000)
        await _credit(conn, account, 5_000)
        await _hold(conn, account, 4_500)  # 5 000 -> 500
        notifications = await _notifications(conn)
        assert await _state(conn, account) == "below_threshold"
    assert _without_ids(notifications) == [_expected(account, "below_threshold", 5_000, 500)]


async def test_a_small_first_top_up_is_below_the_threshold(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        account = await _account(conn, 1_000)
        await _credit(conn, account, 300)
        notifications = await _notifications(conn)
    assert _without_ids(notifications) == [_expected(account, "below_threshold", 300, 300)]


async def test_no_threshold_means_no_notifications(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        account = await _account(conn, None)
        await _credit(conn, account, 5_000)
        await _hold(conn, account, 4_999)
        await _release(conn, account, 4_999)
        assert await _notifications(conn) == []
        assert await _state(conn, account) == "normal"


async def test_notifications_go_to_the_payments_webhook(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        account = await _account(conn, 1_000, payments_uri="http://127.0.0.1:9/hooks")
        await _credit(conn, account, 500)
        [notification] = await _notifications(conn)
        uri = await conn.fetchval("SELECT uri FROM webhook_deliveries")
    assert notification["status"] == "below_threshold"
    assert notification["_delivery"] == "pending"
    assert uri == "http://127.0.0.1:9/hooks"


async def test_clearing_the_threshold_silences_notifications(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        account = await _account(conn, 1_000)
        await _credit(conn, account, 500)
        assert len(await _notifications(conn)) == 1
        await set_balance_threshold(conn, account.id, None)
        await _credit(conn, account, 5_000)
        await _hold(conn, account, 5_400)
        assert len(await _notifications(conn)) == 1
        assert await _state(conn, account) == "normal"


async def test_notification_is_written_with_the_balance_change(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        account = await _account(conn, 1_000)
        await _credit(conn, account, 5_000)
        tx = conn.transaction()
        await tx.start()
        await move(conn, hold(account, PAYOUT, 4_500, uuid.uuid4()), NOW)
        assert len(await _notifications(conn)) == 1
        await tx.rollback()
        assert await _notifications(conn) == []
        assert await _state(conn, account) == "normal"
