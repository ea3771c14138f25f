"""Incoming bank transfers: a transfer to one of an account's identifiers in its currency is a
top-up, credited at once (spec 1.1: settled funds are available immediately)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from bankrail.core.ids import new_id
from bankrail.core.problems import InvalidParameters
from bankrail.core.timefmt import iso_utc, iso_utc_7
from bankrail.db.pool import Connection
from bankrail.events.outbox import record_event
from bankrail.ledger.movements import top_up
from bankrail.merchants.activity import record_activity
from bankrail.merchants.balances import move
from bankrail.merchants.models import MerchantAccount
from bankrail.merchants.service import find_account_by_identifier

INCOMING_RAIL = "bank_transfer"


@dataclass(frozen=True)
class IncomingTransfer:
    """A transfer arriving from outside the service."""

    amount_in_minor: int
    currency: str
    remitter_name: str
    reference: str
    iban: str | None = None
    sort_code: str | None = None
    account_number: str | None = None
    remitter_iban: str | None = None


async def receive_transfer(
    conn: Connection, transfer: IncomingTransfer, now: datetime
) -> tuple[uuid.UUID, uuid.UUID]:
    """Credit the matching merchant account; returns (transfer id, merchant account id).

    An identifier no account has, or a currency other than the account's, is a 400 and
    credits nothing.
    """
    account = await find_account_by_identifier(
        conn,
        iban=transfer.iban,
        sort_code=transfer.sort_code,
        account_number=transfer.account_number,
    )
    field = "iban" if transfer.iban else "account_number"
    if account is None:
        raise InvalidParameters(
            "No merchant account has this identifier.",
            {field: ["no merchant account has this identifier"]},
        )
    if account.currency != transfer.currency:
        raise InvalidParameters(
            f"The account is held in {account.currency}, not {transfer.currency}.",
            {"currency": [f"must be {account.currency} for this account"]},
        )
    transfer_id = new_id()
    await move(conn, top_up(account, INCOMING_RAIL, transfer.amount_in_minor, transfer_id), now)
    await record_internal_credit(
        conn,
        account,
        transfer_id=transfer_id,
        amount=transfer.amount_in_minor,
        remitter_name=transfer.remitter_name,
        remitter_iban=transfer.remitter_iban,
        reference=transfer.reference,
        now=now,
    )
    return transfer_id, account.id


async def record_internal_credit(
    conn: Connection,
    account: MerchantAccount,
    *,
    transfer_id: uuid.UUID,
    amount: int,
    remitter_name: str,
    remitter_iban: str | None,
    reference: str,
    now: datetime,
) -> None:
    """Record money received into `account` (already credited in the ledger by the caller):
    the top-up row, the account's activity list, and the `topup_received` event."""
    await conn.execute(
        "INSERT INTO topups (id, merchant_account_id, amount_in_minor, currency, remitter_name,"
        " remitter_iban, reference, received_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        transfer_id,
        account.id,
        amount,
        account.currency,
        remitter_name,
        remitter_iban,
        reference,
        now,
    )
    await record_activity(
        conn,
        item_id=transfer_id,
        merchant_account_id=account.id,
        type_="topup",
        amount=amount,
        currency=account.currency,
        status="settled",
        now=now,
        details={
            "remitter_name": remitter_name,
            "remitter_iban": remitter_iban,
            "reference": reference,
            "settled_at": iso_utc(now),
        },
    )
    await record_event(
        conn,
        merchant_id=account.merchant_id,
        family="payouts",
        event_type="topup_received",
        body={
            "iban": account.identifiers.iban,
            "currency": account.currency,
            "amount_in_minor": amount,
            "remitter_name": remitter_name,
            "remitter_iban": remitter_iban,
            "reference": reference,
            # Seven fractional digits, as every v1 timestamp (spec 2.3).
            "received_at": iso_utc_7(now),
        },
        now=now,
    )
