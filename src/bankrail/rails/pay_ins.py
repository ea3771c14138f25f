"""A payer's earlier pay-ins as their own bank shows them: the accounts they paid a merchant
from and the statement lines of those settled payments.

Verified payouts (payouts/verification.py) prove a payee's account against these, without
payouts reaching into payments: this module reads the payments tables, below both areas.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, date
from typing import Any

from bankrail.db.pool import Connection
from bankrail.merchants.models import AccountIdentifiers

SETTLED = "payment_settled"


@dataclass(frozen=True)
class KnownAccount:
    """A bank account, as its bank names and identifies it."""

    account_holder_name: str
    identifiers: AccountIdentifiers


@dataclass(frozen=True)
class PayIn:
    """A settled pay-in to the merchant, as the payer's account statement shows it: the
    statement line reads the merchant's name, the payment id and its metadata values."""

    amount_in_minor: int
    currency: str
    created_on: date
    statement: str


def _identifiers(row: Any) -> AccountIdentifiers:
    return AccountIdentifiers(row["iban"] or "", row["sort_code"], row["account_number"])


async def paying_accounts(
    conn: Connection, merchant_id: uuid.UUID, user_id: str | None, name: str
) -> list[KnownAccount]:
    """The accounts from which the merchant received settled pay-ins for this user id, or
    from an account held in this name (case ignored), oldest first, each once."""
    rows = await conn.fetch(
        "SELECT DISTINCT ON (s.identity) s.account_holder_name, s.iban, s.sort_code,"
        " s.account_number, s.created_at FROM payment_sources s"
        " WHERE s.merchant_id = $1"
        " AND (s.user_id = $2 OR lower(s.account_holder_name) = lower($3))"
        " AND EXISTS (SELECT 1 FROM payments p WHERE p.payment_source_id = s.id"
        "   AND p.status = $4)"
        " ORDER BY s.identity, s.created_at",
        merchant_id,
        user_id,
        name,
        SETTLED,
    )
    rows = sorted(rows, key=lambda r: r["created_at"])
    return [KnownAccount(r["account_holder_name"], _identifiers(r)) for r in rows]


async def settled_pay_ins(
    conn: Connection, merchant_id: uuid.UUID, account: AccountIdentifiers
) -> list[PayIn]:
    """The merchant's settled pay-ins paid from `account`, as its statement shows them."""
    rows = await conn.fetch(
        "SELECT p.id, p.amount_in_minor, p.currency, p.created_at, p.metadata, m.name"
        " FROM payments p JOIN payment_sources s ON s.id = p.payment_source_id"
        " JOIN merchants m ON m.id = p.merchant_id"
        " WHERE p.merchant_id = $1 AND p.status = $2"
        " AND ((s.iban IS NOT NULL AND s.iban = $3)"
        "   OR (s.sort_code = $4 AND s.account_number = $5))",
        merchant_id,
        SETTLED,
        account.iban or None,
        account.sort_code,
        account.account_number,
    )
    return [
        PayIn(
            r["amount_in_minor"],
            r["currency"].strip(),
            r["created_at"].astimezone(UTC).date(),
            " ".join([r["name"] or "", str(r["id"]), *(r["metadata"] or {}).values()]),
        )
        for r in rows
    ]
