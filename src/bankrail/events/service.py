"""Reading the delivery log, replaying deliveries, and deleting finished ones once their
retention has passed."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from bankrail.core.pagination import decode_cursor, encode_cursor
from bankrail.core.problems import Conflict, NotFound
from bankrail.core.timefmt import iso_utc
from bankrail.db.pool import Connection
from bankrail.events.outbox import WEBHOOK_CHANNEL

# A delivery that is no longer tried: the predicate of the index webhook_deliveries_finished
# (migration 0016), character for character.
FINISHED = "status <> 'pending'"

# $1: the newest updated_at whose retention has passed; $2: the most deliveries to delete.
# Each delivery is deleted with its attempts and its event (an event has one delivery, which
# a replay sends again rather than adding another). Rows another transaction holds (a replay
# of that very delivery) are skipped, and one made pending again meanwhile is kept.
DELETE_FINISHED_SQL = (
    "WITH d AS (SELECT id FROM webhook_deliveries"
    f" WHERE {FINISHED} AND updated_at <= $1"
    " ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED),"
    " a AS (DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM d)),"
    " gone AS (DELETE FROM webhook_deliveries w USING d WHERE w.id = d.id"
    f" AND w.{FINISHED} RETURNING w.id, w.event_id),"
    " e AS (DELETE FROM events e USING gone WHERE e.id = gone.event_id"
    " AND NOT EXISTS (SELECT 1 FROM webhook_deliveries o"
    " WHERE o.event_id = e.id AND o.id NOT IN (SELECT id FROM gone)))"
    " SELECT count(*) FROM gone"
)

_COLUMNS = (
    "d.id, d.event_id, d.event_type, d.merchant_id, d.uri, d.status, d.attempt_count,"
    " d.next_attempt_at, d.created_at, d.listener_id"
)


def _delivery(row: Any) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        "event_id": str(row["event_id"]),
        "event_type": row["event_type"],
        "merchant_id": str(row["merchant_id"]),
        "uri": row["uri"],
        "status": row["status"],
        "attempt_count": row["attempt_count"],
        "next_attempt_at": iso_utc(row["next_attempt_at"]) if row["next_attempt_at"] else None,
        "created_at": iso_utc(row["created_at"]),
        "listener_id": str(row["listener_id"]) if row["listener_id"] else None,
    }


async def list_deliveries(
    conn: Connection,
    *,
    merchant_id: uuid.UUID | None,
    status: str | None,
    event_type: str | None,
    event_id: uuid.UUID | None,
    cursor: str | None,
    limit: int,
) -> tuple[list[dict[str, Any]], str | None]:
    """Deliveries, newest first, filtered; returns the page and the next cursor."""
    before_time: datetime | None = None
    before_id: uuid.UUID | None = None
    if cursor:
        before_time, before_id = decode_cursor(cursor)
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM webhook_deliveries d"
        " WHERE ($1::uuid IS NULL OR d.merchant_id = $1)"
        " AND ($2::text IS NULL OR d.status = $2)"
        " AND ($3::text IS NULL OR d.event_type = $3)"
        " AND ($4::uuid IS NULL OR d.event_id = $4)"
        " AND ($5::timestamptz IS NULL OR (d.created_at, d.id) < ($5, $6::uuid))"
        " ORDER BY d.created_at DESC, d.id DESC LIMIT $7",
        merchant_id,
        status,
        event_type,
        event_id,
        before_time,
        before_id,
        limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = encode_cursor(rows[-1]["created_at"], rows[-1]["id"]) if more else None
    return [_delivery(r) for r in rows], next_cursor


async def get_delivery(
    conn: Connection, delivery_id: uuid.UUID, merchant_id: uuid.UUID | None = None
) -> dict[str, Any]:
    """A delivery with its attempts and event payload; 404 when absent (or another
    merchant's)."""
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS}, e.payload FROM webhook_deliveries d JOIN events e"
        " ON e.id = d.event_id WHERE d.id = $1 AND ($2::uuid IS NULL OR d.merchant_id = $2)",
        delivery_id,
        merchant_id,
    )
    if row is None:
        raise NotFound(f"Webhook delivery {delivery_id} not found.")
    attempts = await conn.fetch(
        "SELECT at, status_code, error, latency_ms FROM webhook_attempts"
        " WHERE delivery_id = $1 ORDER BY id",
        delivery_id,
    )
    result = _delivery(row)
    result["payload"] = bytes(row["payload"]).decode()
    result["attempts"] = [
        {
            "at": iso_utc(a["at"]),
            "status_code": a["status_code"],
            "error": a["error"],
            "latency_ms": round(a["latency_ms"], 3),
        }
        for a in attempts
    ]
    return result


async def replay_delivery(
    conn: Connection, delivery_id: uuid.UUID, now: datetime, merchant_id: uuid.UUID | None = None
) -> dict[str, Any]:
    """Send the same event (same event_id) again now, to the merchant's current URI (a
    listener's delivery: to its listener); the 72-hour retry window starts again. With no URI
    configured it stays `skipped`. Conflict
    (409) while an attempt of the delivery is in flight: its lease holds one of its
    destination's slots, and its answer is still to be recorded."""
    row = await conn.fetchrow(
        "SELECT d.id, e.family, m.payments_webhook_uri, m.payouts_webhook_uri, d.listener_id,"
        " d.status = 'pending' AND d.lease_until > clock_timestamp() AS in_flight"
        " FROM webhook_deliveries d JOIN events e ON e.id = d.event_id"
        " JOIN merchants m ON m.id = d.merchant_id"
        " WHERE d.id = $1 AND ($2::uuid IS NULL OR d.merchant_id = $2) FOR UPDATE OF d",
        delivery_id,
        merchant_id,
    )
    if row is None:
        raise NotFound(f"Webhook delivery {delivery_id} not found.")
    if row["in_flight"]:
        raise Conflict(
            f"An attempt of webhook delivery {delivery_id} is in flight; replay it once it ends."
        )
    uri = row["payments_webhook_uri"] if row["family"] == "payments" else row["payouts_webhook_uri"]
    if row["listener_id"] is not None:
        # A listener's delivery goes to its listener again, whatever the URI.
        await conn.execute(
            "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = $2,"
            " window_start = $2, lease_until = NULL, updated_at = $2 WHERE id = $1",
            delivery_id,
            now,
        )
        return await get_delivery(conn, delivery_id)
    await conn.execute(
        "UPDATE webhook_deliveries SET uri = $2, status = $3, next_attempt_at = $4,"
        " window_start = $5, lease_until = NULL, updated_at = $5 WHERE id = $1",
        delivery_id,
        uri,
        "pending" if uri else "skipped",
        now if uri else None,
        now,
    )
    if uri:
        await conn.execute(f"NOTIFY {WEBHOOK_CHANNEL}")
    return await get_delivery(conn, delivery_id)


async def delete_finished_deliveries(
    conn: Connection, finished_before: datetime, limit: int
) -> int:
    """Delete up to `limit` deliveries that are no longer pending and last changed at or
    before `finished_before`, oldest first, with their attempts and events; returns how many
    deliveries were deleted. A pending delivery is never deleted."""
    deleted = await conn.fetchval(DELETE_FINISHED_SQL, finished_before, limit)
    return int(deleted)
