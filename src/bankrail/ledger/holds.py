"""The money of a merchant account: its available and held ledger accounts, the clearing
accounts that stand for the outside world, and every movement between them.

Each function records one balanced transaction through `ledger.service.post` in the caller's
transaction. Re-evaluating the account's balance notification after a movement is the
merchant area's business (`merchants.balances`), not the ledger's.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Protocol

from bankrail.db.pool import Connection
from bankrail.ledger.models import Posting, transfer
from bankrail.ledger.service import ensure_account, post

__all__ = [
    "AccountLedgers",
    "clearing_account",
    "clearing_code",
    "consume_hold",
    "credit_from_clearing",
    "hold_funds",
    "release_hold",
    "transfer_between_accounts",
]


class AccountLedgers(Protocol):
    """What the ledger knows of a merchant account: its id and currency, and the ledger
    accounts of its available and held funds (a `merchants.models.MerchantAccount`)."""

    @property
    def id(self) -> uuid.UUID: ...

    @property
    def currency(self) -> str: ...

    @property
    def available_ledger_id(self) -> int: ...

    @property
    def held_ledger_id(self) -> int: ...


def clearing_code(rail: str, currency: str, account_id: uuid.UUID) -> str:
    """The code of the clearing ledger account of one merchant account on one rail."""
    return f"clearing:{rail}:{currency}:{account_id}"


async def clearing_account(conn: Connection, rail: str, account: AccountLedgers) -> int:
    """The ledger account that stands for the outside world on one rail, for one merchant
    account, created on first use. (One per merchant account rather than one per rail: a
    single shared account would sum every merchant's volume and could overflow 64 bits,
    failing everyone.) The batch writers create them with `bankrail_clearing_accounts`
    (db/functions/ledger.sql), under the same codes."""
    return await ensure_account(
        conn,
        clearing_code(rail, account.currency, account.id),
        account.currency,
        allow_negative=True,
    )


async def credit_from_clearing(
    conn: Connection,
    account: AccountLedgers,
    *,
    rail: str,
    amount: int,
    kind: str,
    reference_id: uuid.UUID,
    now: datetime,
) -> None:
    """Money arrives from outside (a top-up or a settled pay-in): available rises."""
    source = await clearing_account(conn, rail, account)
    await post(
        conn,
        kind=kind,
        reference_id=reference_id,
        postings=transfer(source, account.available_ledger_id, amount),
        now=now,
    )


async def hold_funds(
    conn: Connection,
    account: AccountLedgers,
    *,
    amount: int,
    reference_id: uuid.UUID,
    now: datetime,
    purpose: str = "payout",
) -> None:
    """Set funds aside for a payout (or another outgoing `purpose`, such as a refund; the
    transaction's kind is `{purpose}_hold`): available falls, current does not.

    Raises InsufficientFunds when the available balance is too low (nothing is written).
    """
    await post(
        conn,
        kind=f"{purpose}_hold",
        reference_id=reference_id,
        postings=transfer(account.available_ledger_id, account.held_ledger_id, amount),
        now=now,
    )


async def release_hold(
    conn: Connection,
    account: AccountLedgers,
    *,
    amount: int,
    reference_id: uuid.UUID,
    now: datetime,
    purpose: str = "payout",
) -> None:
    """Give held funds back to the available balance (the payout or refund failed; kind
    `{purpose}_release`)."""
    await post(
        conn,
        kind=f"{purpose}_release",
        reference_id=reference_id,
        postings=transfer(account.held_ledger_id, account.available_ledger_id, amount),
        now=now,
    )


async def consume_hold(
    conn: Connection,
    account: AccountLedgers,
    *,
    amount: int,
    rail: str,
    reference_id: uuid.UUID,
    now: datetime,
    purpose: str = "payout",
) -> None:
    """Held funds leave the service over a rail (the payout or refund executed; kind
    `{purpose}_execution`): current falls."""
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
    source: AccountLedgers,
    destination: AccountLedgers,
    *,
    amount: int,
    reference_id: uuid.UUID,
    now: datetime,
) -> None:
    """An internal transfer: held funds of `source` credit `destination`'s available funds in
    one transaction."""
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
