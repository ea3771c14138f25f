"""Payment sources: the remitter bank accounts that paid into a merchant account.

A source is stable per (merchant, user, remitter account). Closed-loop payouts may pay back
only to a source that came with a settled payment from that user into the same account.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bankrail.core.ids import new_id
from bankrail.db.pool import Connection
from bankrail.merchants.models import AccountIdentifiers


@dataclass(frozen=True)
class PaymentSource:
    """A remitter account, as delivered in `payment_settled` (spec 2.8)."""

    id: uuid.UUID
    user_id: str
    account_holder_name: str
    identifiers: AccountIdentifiers

    def to_api(self) -> dict[str, Any]:
        """The payment source resource."""
        return source_document(str(self.id), self.account_holder_name, self.identifiers)


def source_document(
    source_id: str, account_holder_name: str, identifiers: AccountIdentifiers
) -> dict[str, Any]:
    """The payment source resource (spec 2.8): what `PaymentSource.to_api` and a payment's
    `payment_source` (`joined_source`) both write."""
    return {
        "id": source_id,
        "account_holder_name": account_holder_name,
        "account_identifiers": identifiers.as_list(),
    }


JOINED_SOURCE_FIELDS = (
    ("s.id", "source_id"),
    ("s.account_holder_name", "source_holder"),
    ("s.iban", "source_iban"),
    ("s.sort_code", "source_sort_code"),
    ("s.account_number", "source_account_number"),
)
"""(expression, name) of what `joined_source` reads of a statement that joined
`payment_sources s`."""


def joined_source(row: Any) -> dict[str, Any] | None:
    """The payment source resource of a row that joined its source as
    `JOINED_SOURCE_FIELDS` (one statement for a payment and its source); None when the
    row has no source."""
    source_id = row["source_id"]
    if source_id is None:
        return None
    identifiers = AccountIdentifiers(
        row["source_iban"] or "", row["source_sort_code"], row["source_account_number"]
    )
    return source_document(str(source_id), row["source_holder"], identifiers)


def _identity(identifiers: AccountIdentifiers) -> str:
    if identifiers.iban:
        return f"iban:{identifiers.iban}"
    return f"scan:{identifiers.sort_code}:{identifiers.account_number}"


async def record_payment_source(
    conn: Connection,
    *,
    merchant_id: uuid.UUID,
    merchant_account_id: uuid.UUID,
    user_id: str,
    account_holder_name: str,
    identifiers: AccountIdentifiers,
    payment_id: uuid.UUID | None,
    now: datetime,
) -> PaymentSource:
    """The source for this user and remitter account (created on first sight), now usable
    for closed-loop payouts from `merchant_account_id`. Call in the settlement transaction."""
    identity = _identity(identifiers)
    source_id = await conn.fetchval(
        "INSERT INTO payment_sources (id, merchant_id, user_id, account_holder_name, iban,"
        " sort_code, account_number, identity, created_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        " ON CONFLICT (merchant_id, user_id, identity) DO UPDATE"
        " SET account_holder_name = EXCLUDED.account_holder_name RETURNING id",
        new_id(),
        merchant_id,
        user_id,
        account_holder_name,
        identifiers.iban or None,
        identifiers.sort_code,
        identifiers.account_number,
        identity,
        now,
    )
    await conn.execute(
        "INSERT INTO payment_source_accounts (payment_source_id, merchant_account_id,"
        " first_payment_id, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        source_id,
        merchant_account_id,
        payment_id,
        now,
    )
    return PaymentSource(source_id, user_id, account_holder_name, identifiers)


_COLUMNS = "s.id, s.user_id, s.account_holder_name, s.iban, s.sort_code, s.account_number"


def _source(row: Any) -> PaymentSource:
    return PaymentSource(
        row["id"],
        row["user_id"],
        row["account_holder_name"],
        AccountIdentifiers(row["iban"] or "", row["sort_code"], row["account_number"]),
    )


async def get_payment_source(conn: Connection, source_id: uuid.UUID) -> PaymentSource | None:
    """A payment source by id."""
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM payment_sources s WHERE s.id = $1", source_id
    )
    return _source(row) if row else None


async def payable_source(
    conn: Connection,
    *,
    merchant_account_id: uuid.UUID,
    user_id: str,
    payment_source_id: uuid.UUID,
) -> PaymentSource | None:
    """The source, if that user paid from it into that account with a settled payment."""
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS}"
        " FROM payment_sources s JOIN payment_source_accounts a ON a.payment_source_id = s.id"
        " WHERE s.id = $1 AND s.user_id = $2 AND a.merchant_account_id = $3",
        payment_source_id,
        user_id,
        merchant_account_id,
    )
    return _source(row) if row else None


async def list_payment_sources(
    conn: Connection, merchant_account_id: uuid.UUID, user_id: str | None
) -> list[PaymentSource]:
    """Sources usable for closed-loop payouts from this account (optionally one user's)."""
    rows = await conn.fetch(
        f"SELECT {_COLUMNS}"
        " FROM payment_sources s JOIN payment_source_accounts a ON a.payment_source_id = s.id"
        " WHERE a.merchant_account_id = $1 AND ($2::text IS NULL OR s.user_id = $2)"
        " ORDER BY a.created_at, s.id",
        merchant_account_id,
        user_id,
    )
    return [_source(r) for r in rows]
