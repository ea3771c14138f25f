"""The transactional outbox: events are written in the transaction of the change they report.

Each event becomes one webhook delivery to the merchant's URI for its family (payments API v3
or payouts API v1); with no URI configured the delivery is recorded as `skipped`, never lost.
Every event is stored by one writer, `bankrail_record_events` (db/functions/events.sql), which
owns that rule: `record_event` calls it for one event, and the batch writers (rails steps,
holds) for many.

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


_RECORD = "SELECT bankrail_record_events($1, $2, $3, $4, $5, $6, $7, $8, $9)"


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
    # The one writer of events (db/functions/events.sql), for a batch of one: it reads the
    # family's URI, stores the event and its delivery, and wakes the delivery workers when
    # there is somewhere to deliver, in one round trip.
    await conn.execute(
        _RECORD,
        [event.id],
        [event.delivery_id],
        [merchant_id],
        [family],
        [event_type],
        [event.payload],
        [now],
        [ordering.key if ordering else None],
        [ordering.sequence if ordering else None],
    )
    return event.id
