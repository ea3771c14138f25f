"""The transactional outbox: events are written in the transaction of the change they report.

Each event becomes one webhook delivery to the merchant's URI for its family (payments API v3
or payouts API v1); with no URI configured the delivery is recorded as `skipped`, never lost.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from bankrail.core.jsonbody import dumps
from bankrail.db.pool import Connection

Family = Literal["payments", "payouts"]
WEBHOOK_CHANNEL = "bankrail_webhooks"


def envelope(family: Family, event_type: str, event_id: uuid.UUID, body: dict[str, Any]) -> bytes:
    """The exact bytes delivered: v1 `{event_type, event_schema_version, event_id, event_body}`,
    v3 `{type, event_version, event_id, ...fields}`."""
    if family == "payouts":
        document: dict[str, Any] = {
            "event_type": event_type,
            "event_schema_version": 1,
            "event_id": str(event_id),
            "event_body": body,
        }
    else:
        document = {"type": event_type, "event_version": 1, "event_id": str(event_id), **body}
    return dumps(document)


async def record_event(
    conn: Connection,
    *,
    merchant_id: uuid.UUID,
    family: Family,
    event_type: str,
    body: dict[str, Any],
    now: datetime,
) -> uuid.UUID:
    """Store the event and its pending delivery; returns the event id."""
    event_id = uuid.uuid4()
    column = "payments_webhook_uri" if family == "payments" else "payouts_webhook_uri"
    uri = await conn.fetchval(f"SELECT {column} FROM merchants WHERE id = $1", merchant_id)
    await conn.execute(
        "INSERT INTO events (id, merchant_id, family, event_type, payload, created_at)"
        " VALUES ($1, $2, $3, $4, $5, $6)",
        event_id,
        merchant_id,
        family,
        event_type,
        envelope(family, event_type, event_id, body),
        now,
    )
    await conn.execute(
        "INSERT INTO webhook_deliveries (id, event_id, merchant_id, event_type, uri, status,"
        " next_attempt_at, created_at, updated_at, window_start)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $8)",
        uuid.uuid4(),
        event_id,
        merchant_id,
        event_type,
        uri,
        "pending" if uri else "skipped",
        now if uri else None,
        now,
    )
    if uri:
        await conn.execute(f"NOTIFY {WEBHOOK_CHANNEL}")
    return event_id
