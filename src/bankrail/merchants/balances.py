"""A merchant account's balance as the merchant sees it: each movement of its money (the
movements themselves are `ledger.holds`) followed, in the same transaction, by the
re-evaluation of the account's balance notification state."""

from __future__ import annotations

import uuid
from datetime import datetime

from bankrail.db.pool import Connection
from bankrail.events import notifications
from bankrail.events.outbox import record_event
from bankrail.ledger import holds
from bankrail.merchants.models import MerchantAccount

__all__ = [
    "credit_from_clearing",
    "hold_funds",
    "reevaluate_notifications",
    "release_hold",
    "transfer_between_accounts",
]


async def credit_from_clearing(
    conn: Connection,
    account: MerchantAccount,
    *,
    rail: str,
    amount: int,
    kind: str,
    reference_id: uuid.UUID,
    now: datetime,
) -> None:
    """Money arrives from outside (a top-up or a settled pay-in)."""
    await holds.credit_from_clearing(
        conn, account, rail=rail, amount=amount, kind=kind, reference_id=reference_id, now=now
    )
    await reevaluate_notifications(conn, account.id, now)


async def hold_funds(
    conn: Connection,
    account: MerchantAccount,
    *,
    amount: int,
    reference_id: uuid.UUID,
    now: datetime,
    purpose: str = "payout",
) -> None:
    """Set funds aside for a payout (or another outgoing `purpose`, such as a refund); raises
    InsufficientFunds, nothing written, when the available balance is too low."""
    await holds.hold_funds(
        conn, account, amount=amount, reference_id=reference_id, now=now, purpose=purpose
    )
    await reevaluate_notifications(conn, account.id, now)


async def release_hold(
    conn: Connection,
    account: MerchantAccount,
    *,
    amount: int,
    reference_id: uuid.UUID,
    now: datetime,
    purpose: str = "payout",
) -> None:
    """Give held funds back to the available balance (the payout or refund failed)."""
    await holds.release_hold(
        conn, account, amount=amount, reference_id=reference_id, now=now, purpose=purpose
    )
    await reevaluate_notifications(conn, account.id, now)


async def transfer_between_accounts(
    conn: Connection,
    source: MerchantAccount,
    destination: MerchantAccount,
    *,
    amount: int,
    reference_id: uuid.UUID,
    now: datetime,
) -> None:
    """An internal transfer: held funds of `source` credit `destination`."""
    await holds.transfer_between_accounts(
        conn, source, destination, amount=amount, reference_id=reference_id, now=now
    )
    await reevaluate_notifications(conn, destination.id, now)


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
            event_type="balance_notification",
            body={
                "merchant_account_id": str(account_id),
                "status": step.notify,
                "threshold_in_minor": row["balance_threshold"],
                "current_balance_in_minor": row["available"] + row["held"],
                "available_balance_in_minor": row["available"],
            },
            now=now,
        )
