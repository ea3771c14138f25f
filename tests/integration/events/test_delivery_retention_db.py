"""Deleting finished webhook deliveries once their retention has passed
(events.service.delete_finished_deliveries, migration 0016)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from bankrail.events.outbox import record_event
from bankrail.events.service import DELETE_FINISHED_SQL, delete_finished_deliveries
from bankrail.merchants import service as merchants

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OLD = NOW - timedelta(days=40)


async def _delivery(conn: asyncpg.Connection, merchant_id: uuid.UUID, status: str) -> uuid.UUID:
    event_id = await record_event(
        conn, merchant_id=merchant_id, family="payouts", event_type="t", body={}, now=OLD
    )
    delivery_id: uuid.UUID = await conn.fetchval(
        "UPDATE webhook_deliveries SET status = $2 WHERE event_id = $1 RETURNING id",
        event_id,
        status,
    )
    await conn.execute(
        "INSERT INTO webhook_attempts (delivery_id, at, status_code, latency_ms)"
        " VALUES ($1, $2, 500, 1.0)",
        delivery_id,
        OLD,
    )
    return delivery_id


async def test_finished_deliveries_go_with_attempts_and_events_and_pending_ones_stay(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        merchant_id = await merchants.create_merchant(conn, "Retention Ltd", OLD)
        await merchants.set_webhooks(conn, merchant_id, None, "http://127.0.0.1:9/hook")
        pending = await _delivery(conn, merchant_id, "pending")
        for status in ("delivered", "discarded", "skipped"):
            await _delivery(conn, merchant_id, status)
        recent = await _delivery(conn, merchant_id, "delivered")
        await conn.execute(
            "UPDATE webhook_deliveries SET updated_at = $2 WHERE id = $1", recent, NOW
        )

        assert await delete_finished_deliveries(conn, NOW - timedelta(days=30), 2) == 2
        assert await delete_finished_deliveries(conn, NOW - timedelta(days=30), 2) == 1
        assert await delete_finished_deliveries(conn, NOW - timedelta(days=30), 2) == 0

        kept = {r["id"] for r in await conn.fetch("SELECT id FROM webhook_deliveries")}
        assert kept == {pending, recent}
        assert await conn.fetchval("SELECT count(*) FROM webhook_attempts") == 2
        assert await conn.fetchval("SELECT count(*) FROM events") == 2


async def test_the_batch_is_found_by_the_finished_index(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        plan = await conn.fetch(f"EXPLAIN {DELETE_FINISHED_SQL}", NOW, 10)
    text = "\n".join(r[0] for r in plan)
    assert "webhook_deliveries_finished" in text, text


async def test_skips_a_delivery_that_a_replay_holds_rather_than_waiting(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        merchant_id = await merchants.create_merchant(conn, "Replay Ltd", OLD)
        await merchants.set_webhooks(conn, merchant_id, None, "http://127.0.0.1:9/hook")
        held = await _delivery(conn, merchant_id, "delivered")
        idle = await _delivery(conn, merchant_id, "delivered")
    async with pool.acquire() as replay, replay.transaction():
        # A replay of the old delivery, not yet committed, holds its row.
        await replay.execute("SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE", held)
        async with pool.acquire() as conn:
            deleted = await asyncio.wait_for(
                delete_finished_deliveries(conn, NOW - timedelta(days=30), 10), timeout=10
            )
        assert deleted == 1
    async with pool.acquire() as conn:
        kept = {r["id"] for r in await conn.fetch("SELECT id FROM webhook_deliveries")}
    assert kept == {held}
    assert idle not in kept
