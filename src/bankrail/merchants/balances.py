"""Every movement of a merchant account's money, each one double-entry and each followed, in
the same transaction, by the re-evaluation of the account's balance notification state."""

from __future__ import annotations

import uuid
from datetime import datetime

from bankrail.db.pool import Connection
from bankrail.events import notifications
from bankrail.events.outbox import record_event
from bankrail.ledger.models import Posting, transfer
from bankrail.ledger.service import ensure_account, post
from bankrail.merchants.models import MerchantAccount

__all__ = [
    "clearing_account",
    "clearing_code",
    "consume_hold",
    "credit_from_clearing",
    "hold_funds",
    "release_hold",
    "transfer_between_accounts",
]


def clearing_code(rail: str, currency: str, account_id: uuid.UUID) -> str:
    """The code of the clearing ledger account of one merchant account on one rail."""
    return f"clearing:{rail}:{currency}:{account_id}"


async def clearing_account(conn: Connection, rail: str, account: MerchantAccount) -> int:
    """The ledger account that stands for the outside world on one rail, for one merchant
    account. (One per merchant account rather than one per rail: a single shared account
    would sum every merchant's volume and could overflow 64 bits, failing everyone.)"""
    return await ensure_account(
        conn,
        clearing_code(rail, account.currency, account.id),
        account.currency,
        allow_negative=True,
    )


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
    source = await clearing_account(conn, rail, account)
    await post(
        conn,
        kind=kind,
        reference_id=reference_id,
        postings=transfer(source, account.available_ledger_id, amount),
        now=now,
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
    """Set funds aside for a payout (or another outgoing `purpose`, such as a refund):
    available falls, current does not.

    Raises InsufficientFunds when the available balance is too low (nothing is written).
    """
    await post(
        conn,
        kind=f"{purpose}_hold",
        reference_id=reference_id,
        postings=transfer(account.available_ledger_id, account.held_ledger_id, amount),
        now=now,
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
    await post(
        conn,
        kind=f"{purpose}_release",
        reference_id=reference_id,
        postings=transfer(account.held_ledger_id, account.available_ledger_id, amount),
        now=now,
    )
    await reevaluate_notifications(conn, account.id, now)


async def consume_hold(
    conn: Connection,
    account: MerchantAccount,
    *,
    amount: int,
    rail: str,
    reference_id: uuid.UUID,
    now: datetime,
    purpose: str = "payout",
) -> None:
    """Held funds leave the service over a rail (the payout or refund executed): current
    falls."""
    destination = await clearing_account(conn, rail, account)
    await post(
        conn,
        kind=f"{purpose}_execution",
        reference_id=reference_id,
        postings=transfer(account.held_ledger_id, destination, amount),
        now=now,
    )


async def transfer_between_accounts(
    conn: Connection,
    source: MerchantAccount,
    destination: MerchantAccount,
    *,
    amount: int,
    reference_id: uuid.UUID,
    now: datetime,
) -> None:
    """An internal transfer: held funds of `source` credit `destination` in one transaction."""
    await post(
        conn,
        kind="internal_transfer",
        reference_id=reference_id,
        postings=[
            Posting(source.held_ledger_id, -amount),
            Posting(destination.available_ledger_id, amount),
        ],
        now=now,
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
