"""The per-account list of money movements that merchants read (v3 and v1 transaction lists)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bankrail.core.pagination import decode_cursor, encode_cursor
from bankrail.core.timefmt import iso_utc
from bankrail.db.pool import Connection


async def record_activity(
    conn: Connection,
    *,
    item_id: uuid.UUID,
    merchant_account_id: uuid.UUID,
    type_: str,
    amount: int,
    currency: str,
    status: str,
    now: datetime,
    details: dict[str, Any] | None = None,
) -> None:
    """Add a movement to the account's list, or update its status and details."""
    await conn.execute(
        "INSERT INTO account_activity (id, merchant_account_id, type, amount_in_minor, currency,"
        " status, created_at, updated_at, details) VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8)"
        " ON CONFLICT (merchant_account_id, id) DO UPDATE SET status = EXCLUDED.status,"
        " updated_at = EXCLUDED.updated_at,"
        " details = account_activity.details || EXCLUDED.details",
        item_id,
        merchant_account_id,
        type_,
        amount,
        currency,
        status,
        now,
        details or {},
    )


# Details kept for the v1 transaction records, not shown in the v3 list.
_INTERNAL_DETAILS = frozenset({"api", "v1_status", "context_code", "transaction_id"})


@dataclass(frozen=True)
class ActivityPage:
    """One page of an account's movements, and the cursor of the next page."""

    items: list[dict[str, Any]]
    next_cursor: str | None


async def list_activity(
    conn: Connection,
    merchant_account_id: uuid.UUID,
    *,
    start: datetime | None,
    end: datetime | None,
    type_: str | None,
    cursor: str | None,
    limit: int,
) -> ActivityPage:
    """Movements in ascending time order within an inclusive range."""
    after_time: datetime | None = None
    after_id: uuid.UUID | None = None
    if cursor:
        after_time, after_id = decode_cursor(cursor)
    rows = await conn.fetch(
        "SELECT id, type, amount_in_minor, currency, status, created_at, details"
        " FROM account_activity WHERE merchant_account_id = $1"
        " AND ($2::timestamptz IS NULL OR created_at >= $2)"
        " AND ($3::timestamptz IS NULL OR created_at <= $3)"
        " AND ($4::text IS NULL OR type = $4)"
        " AND ($5::timestamptz IS NULL OR (created_at, id) > ($5, $6::uuid))"
        " ORDER BY created_at, id LIMIT $7",
        merchant_account_id,
        start,
        end,
        type_,
        after_time,
        after_id,
        limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    items = [
        {
            **{k: v for k, v in row["details"].items() if k not in _INTERNAL_DETAILS},
            "id": str(row["id"]),
            "type": row["type"],
            "amount_in_minor": row["amount_in_minor"],
            "currency": row["currency"],
            "status": row["status"],
            "created_at": iso_utc(row["created_at"]),
        }
        for row in rows
    ]
    next_cursor = encode_cursor(rows[-1]["created_at"], rows[-1]["id"]) if more else None
    return ActivityPage(items, next_cursor)
