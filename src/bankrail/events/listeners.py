"""Webhook listeners (`bankrail listen`, docs/webhooks.md "Listeners"): one more destination
of the delivery core, reached through a stream the merchant's CLI opens to the server.

A listener is a merchant's, named by an id its CLI keeps across reconnects. While it is
attached (seen within `DETACHED_AFTER` of service time), every event its filter takes gets a
delivery of its own beside the one to the registered URI (`bankrail_record_events`,
db/functions/events.sql). Its stream claims its due deliveries with a lease, as the HTTP
delivery workers claim theirs, sends each with the headers the registered URI would get, and
the CLI reports the local app's answer: `record_answer` records it as an attempt through the
same `record_outcomes` and retry schedule as every other delivery (events/delivery.py). A 2xx
delivers; anything else is tried again on the schedule, until the 72-hour window ends.

Nothing is lost across reconnects, several API hosts or a server restart: the deliveries are
rows in PostgreSQL, and a stream (re)attaching takes over its listener's unanswered ones
(their leases are released, so they are sent again at once). A listener detached longer than
`DETACHED_AFTER` gets no new deliveries, and its pending ones are discarded by the worker's
retention step (`discard_abandoned`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from bankrail.core.problems import Conflict, NotFound
from bankrail.core.timefmt import iso_utc
from bankrail.db.pool import Connection
from bankrail.events.delivery import Claimed, Outcome, record_outcomes

__all__ = [
    "DETACHED_AFTER",
    "LISTENER_BATCH",
    "LISTENER_LEASE",
    "ListenerDelivery",
    "attach",
    "check_owner",
    "claim",
    "discard_abandoned",
    "record_answer",
    "touch",
]

# A listener not seen for this long (service time) is detached: no new deliveries, and its
# pending ones are discarded. The same interval is written in bankrail_record_events.
DETACHED_AFTER = timedelta(hours=24)
# How long a stream holds a delivery it sent while the CLI forwards it (one at a time, each
# for at most 10 s); a stream of the same listener that attaches again releases it at once,
# so the lease only keeps the stream that sent it from sending it again.
LISTENER_LEASE = timedelta(minutes=5)
# The most deliveries a stream sends before their answers are in.
LISTENER_BATCH = 10


@dataclass(frozen=True)
class ListenerDelivery:
    """A delivery a listener's stream holds the lease of, with what it sends: the event, and
    the path its signature covers (the registered URI's, else the listener's forward path)."""

    claimed: Claimed
    event_id: uuid.UUID
    event_type: str
    signed_path: str


async def attach(
    conn: Connection,
    *,
    merchant_id: uuid.UUID,
    listener_id: uuid.UUID,
    event_types: list[str] | None,
    forward_path: str,
    now: datetime,
) -> None:
    """Attach the listener (made on first use) with its event filter (None: every event) and
    forward path, seen `now`; its unanswered deliveries are released, to be sent again on
    this stream. NotFound when the id is another merchant's listener."""
    attached = await conn.fetchval(
        "INSERT INTO webhook_listeners AS l (id, merchant_id, event_types, forward_path,"
        " created_at, last_seen_at) VALUES ($1, $2, $3, $4, $5, $5)"
        " ON CONFLICT (id) DO UPDATE SET event_types = EXCLUDED.event_types,"
        " forward_path = EXCLUDED.forward_path, last_seen_at = EXCLUDED.last_seen_at"
        " WHERE l.merchant_id = EXCLUDED.merchant_id RETURNING l.id",
        listener_id,
        merchant_id,
        event_types,
        forward_path,
        now,
    )
    if attached is None:
        raise NotFound(f"Webhook listener {listener_id} not found.")
    await conn.execute(
        "UPDATE webhook_deliveries SET lease_until = NULL WHERE listener_id = $1"
        " AND status = 'pending' AND lease_until IS NOT NULL",
        listener_id,
    )


async def check_owner(conn: Connection, merchant_id: uuid.UUID, listener_id: uuid.UUID) -> None:
    """Nothing when `listener_id` is the merchant's listener or no listener yet (it would be
    made on first use); NotFound when it is another merchant's. Reads only."""
    owner = await conn.fetchval(
        "SELECT merchant_id FROM webhook_listeners WHERE id = $1", listener_id
    )
    if owner is not None and owner != merchant_id:
        raise NotFound(f"Webhook listener {listener_id} not found.")


async def touch(conn: Connection | asyncpg.Pool, listener_id: uuid.UUID, now: datetime) -> None:
    """Record that the listener's stream is still open at `now`."""
    await conn.execute(
        "UPDATE webhook_listeners SET last_seen_at = greatest(last_seen_at, $2) WHERE id = $1",
        listener_id,
        now,
    )


# The listener's due deliveries, due first, as the HTTP claim takes them: not one already
# leased, nor one whose ordering key has a pending delivery before it; and none while any of
# the listener's is leased (sent, its answer not yet in): the CLI forwards one at a time, so
# a stream sends the next batch once the one before is answered.
_CLAIM = (
    "WITH due AS (SELECT d.id FROM webhook_deliveries d"
    " WHERE d.listener_id = $1 AND d.status = 'pending' AND d.next_attempt_at <= $2"
    " AND NOT EXISTS (SELECT 1 FROM webhook_deliveries b WHERE b.listener_id = $1"
    " AND b.status = 'pending' AND b.lease_until >= clock_timestamp())"
    " AND (d.lease_until IS NULL OR d.lease_until < clock_timestamp())"
    " AND (d.ordering_key IS NULL OR NOT EXISTS (SELECT 1 FROM webhook_deliveries p"
    " WHERE p.ordering_key = d.ordering_key AND p.ordering_seq < d.ordering_seq"
    " AND p.status = 'pending'))"
    " ORDER BY d.next_attempt_at, d.created_at LIMIT $3 FOR UPDATE OF d SKIP LOCKED)"
    " UPDATE webhook_deliveries d SET lease_until = clock_timestamp() + $4"
    " FROM due, events e, webhook_listeners l"
    " WHERE d.id = due.id AND e.id = d.event_id AND l.id = d.listener_id"
    " RETURNING d.id, d.uri, e.payload, d.attempt_count, d.window_start, d.lease_until,"
    " d.event_id, d.event_type, l.forward_path, d.next_attempt_at, d.created_at"
)


async def claim(
    conn: Connection | asyncpg.Pool,
    listener_id: uuid.UUID,
    now: datetime,
    limit: int = LISTENER_BATCH,
) -> list[ListenerDelivery]:
    """Lease up to `limit` of the listener's deliveries that are due at `now`, in the order
    they fell due; none while one it leased before awaits its answer."""
    rows = await conn.fetch(_CLAIM, listener_id, now, limit, LISTENER_LEASE)
    rows = sorted(rows, key=lambda r: (r["next_attempt_at"], r["created_at"]))
    return [
        ListenerDelivery(
            Claimed(
                r["id"],
                r["uri"] or r["forward_path"],
                bytes(r["payload"]),
                r["attempt_count"],
                r["window_start"],
                r["lease_until"],
            ),
            r["event_id"],
            r["event_type"],
            urlsplit(r["uri"]).path or "/" if r["uri"] else r["forward_path"],
        )
        for r in rows
    ]


async def record_answer(
    conn: Connection,
    *,
    merchant_id: uuid.UUID,
    listener_id: uuid.UUID,
    delivery_id: uuid.UUID,
    outcome: Outcome,
    now: datetime,
) -> dict[str, Any]:
    """Record what the local app answered to a delivery the listener's stream sent, as one
    attempt of it (a 2xx delivers it; anything else schedules the next attempt), and return
    the delivery's state. NotFound when it is not a delivery of the merchant's listener;
    Conflict when it awaits no answer (answered already, or never sent)."""
    row = await conn.fetchrow(
        "SELECT d.id, d.uri, d.status, d.attempt_count, d.window_start, d.lease_until"
        " FROM webhook_deliveries d JOIN webhook_listeners l ON l.id = d.listener_id"
        " WHERE d.id = $1 AND d.listener_id = $2 AND l.merchant_id = $3 FOR UPDATE OF d",
        delivery_id,
        listener_id,
        merchant_id,
    )
    if row is None:
        raise NotFound(f"Webhook delivery {delivery_id} of listener {listener_id} not found.")
    if row["status"] != "pending" or row["lease_until"] is None:
        raise Conflict(f"Webhook delivery {delivery_id} is not awaiting an answer.")
    claimed = Claimed(
        row["id"],
        row["uri"] or "",
        b"",
        row["attempt_count"],
        row["window_start"],
        row["lease_until"],
    )
    await record_outcomes(conn, [(claimed, outcome)], now)
    state = await conn.fetchrow(
        "SELECT status, attempt_count, next_attempt_at FROM webhook_deliveries WHERE id = $1",
        delivery_id,
    )
    assert state is not None
    return {
        "delivery_id": str(delivery_id),
        "status": state["status"],
        "attempt_count": state["attempt_count"],
        "next_attempt_at": iso_utc(state["next_attempt_at"]) if state["next_attempt_at"] else None,
    }


async def discard_abandoned(conn: Connection, detached_since: datetime, limit: int) -> int:
    """Discard up to `limit` pending deliveries of listeners last seen at or before
    `detached_since` (a retention step: `DETACHED_AFTER` ago), then forget up to `limit` such
    listeners that no delivery names any more (finished deliveries go with the webhook
    retention); returns how many rows it changed."""
    discarded = await conn.fetchval(
        "WITH d AS (SELECT d.id FROM webhook_deliveries d"
        " JOIN webhook_listeners l ON l.id = d.listener_id"
        " WHERE d.status = 'pending' AND d.listener_id IS NOT NULL"
        " AND l.last_seen_at <= $1 LIMIT $2 FOR UPDATE OF d SKIP LOCKED),"
        " u AS (UPDATE webhook_deliveries w SET status = 'discarded', next_attempt_at = NULL,"
        " lease_until = NULL, updated_at = $3 FROM d WHERE w.id = d.id RETURNING w.id)"
        " SELECT count(*) FROM u",
        detached_since,
        limit,
        detached_since + DETACHED_AFTER,
    )
    if discarded >= limit:
        return int(discarded)
    # A listener seen since is attached again: the lock and the re-check of last_seen_at keep
    # a reattaching CLI's listener.
    forgotten = await conn.fetchval(
        "WITH f AS (SELECT l.id FROM webhook_listeners l WHERE l.last_seen_at <= $1"
        " AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.listener_id = l.id)"
        " LIMIT $2 FOR UPDATE OF l SKIP LOCKED),"
        " g AS (DELETE FROM webhook_listeners w USING f WHERE w.id = f.id"
        " AND w.last_seen_at <= $1 RETURNING w.id)"
        " SELECT count(*) FROM g",
        detached_since,
        limit - discarded,
    )
    return int(discarded) + int(forgotten)
