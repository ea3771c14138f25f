"""A merchant account's balance as the merchant sees it: each movement of its money (the
movements themselves are named in `ledger.movements`) followed, in the same transaction, by
the re-evaluation of the balance notification state of the account whose available balance
it changed."""

from __future__ import annotations

import uuid
from datetime import datetime

from bankrail.db.pool import Connection
from bankrail.events import notifications
from bankrail.events.outbox import record_event
from bankrail.ledger.movements import Movement, record

__all__ = ["move", "reevaluate_notifications"]


async def move(conn: Connection, movement: Movement, now: datetime) -> None:
    """Write the movement in the caller's transaction, then move the notification state of
    the account whose available balance it changed (raises InsufficientFunds, nothing
    written, when that balance would fall below zero)."""
    await record(conn, movement, now)
    if movement.available_of is not None:
        await reevaluate_notifications(conn, movement.available_of, now)


async def reevaluate_notifications(conn: Connection, account_id: uuid.UUID, now: datetime) -> None:
    """Move the account's notification state after a balance change, emitting a
    `balance_notification` event for each state reached."""
    row = await conn.fetchrow(
        "SELECT ma.merchant_id, ma.balance_threshold, ma.notification_state,"
        " av.balance AS available, h.balance AS held FROM merchant_accounts ma"
        " JOIN ledger_accounts av ON av.id = ma.available_ledger_id"
        " JOIN ledger_accounts h ON h.id = ma.held_ledger_id WHERE ma.id = $1",
        account_id,
    )
    if row is None or row["balance_threshold"] is None:
        return
    step = notifications.next_state(
        row["notification_state"], row["balance_threshold"], row["available"]
    )
    if step.state != row["notification_state"]:
        await conn.execute(
            "UPDATE merchant_accounts SET notification_state = $2 WHERE id = $1",
            account_id,
            step.state,
        )
    if step.notify is not None:
        await record_event(
            conn,
            merchant_id=row["merchant_id"],
            family="payments",
            event_type=notifications.BALANCE_NOTIFICATION,
            body=notifications.balance_notification(
                account_id, step.notify, row["balance_threshold"], row["available"], row["held"]
            ),
            now=now,
        )
