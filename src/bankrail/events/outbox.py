"""The transactional outbox: events are written in the transaction of the change they report.

Each event becomes one webhook delivery to the merchant's URI for its family (payments API v3
or payouts API v1); with no URI configured the delivery is recorded as `skipped`, never lost.

Events that must reach the receiver in order (the v1 events of one payout) carry an
`Ordering`: the key they share and their place in the sequence. A delivery is not attempted
while a delivery of the same key with a lower place is still pending (events/delivery.py).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from bankrail.core.ids import new_id
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


@dataclass(frozen=True)
class Ordering:
    """Where an event's delivery stands among the deliveries that share its key: it waits
    until every one with a lower `sequence` is no longer pending."""

    key: uuid.UUID
    sequence: int


@dataclass(frozen=True)
class NewEvent:
    """An event ready to be stored: its id, its delivery's id and the exact bytes to deliver."""

    id: uuid.UUID
    delivery_id: uuid.UUID
    merchant_id: uuid.UUID
    family: Family
    event_type: str
    payload: bytes
    ordering: Ordering | None = None


def new_event(
    *,
    merchant_id: uuid.UUID,
    family: Family,
    event_type: str,
    body: dict[str, Any],
    ordering: Ordering | None = None,
) -> NewEvent:
    """A new event of `family` for the merchant, with fresh ids and its envelope."""
    event_id = new_id()
    return NewEvent(
        event_id,
        new_id(),
        merchant_id,
        family,
        event_type,
        envelope(family, event_type, event_id, body),
        ordering,
    )


async def record_event(
    conn: Connection,
    *,
    merchant_id: uuid.UUID,
    family: Family,
    event_type: str,
    body: dict[str, Any],
    now: datetime,
    ordering: Ordering | None = None,
) -> uuid.UUID:
    """Store the event and its pending delivery (delivered in `ordering`, when given);
    returns the event id."""
    event = new_event(
        merchant_id=merchant_id,
        family=family,
        event_type=event_type,
        body=body,
        ordering=ordering,
    )
    column = "payments_webhook_uri" if family == "payments" else "payouts_webhook_uri"
    # One round trip: read the merchant's URI, store the event and its delivery, and wake the
    # delivery workers when there is somewhere to deliver.
    await conn.execute(
        f"WITH m AS (SELECT {column} AS uri FROM merchants WHERE id = $2),"
        " e AS (INSERT INTO events (id, merchant_id, family, event_type, payload, created_at)"
        " VALUES ($1, $2, $3, $4, $5, $6) RETURNING id),"
        " d AS (INSERT INTO webhook_deliveries (id, event_id, merchant_id, event_type, uri,"
        " status, next_attempt_at, created_at, updated_at, window_start, ordering_key,"
        " ordering_seq)"
        " SELECT $7, e.id, $2, $4, (SELECT uri FROM m),"
        " CASE WHEN (SELECT uri FROM m) IS NULL THEN 'skipped' ELSE 'pending' END,"
        " CASE WHEN (SELECT uri FROM m) IS NULL THEN NULL ELSE $6::timestamptz END, $6, $6, $6,"
        " $8, $9 FROM e)"
        f" SELECT pg_notify('{WEBHOOK_CHANNEL}', '') FROM m WHERE uri IS NOT NULL",
        event.id,
        merchant_id,
        family,
        event_type,
        event.payload,
        now,
        event.delivery_id,
        ordering.key if ordering else None,
        ordering.sequence if ordering else None,
    )
    return event.id
