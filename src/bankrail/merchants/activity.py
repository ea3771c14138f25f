"""The per-account list of money movements that merchants read (v3 and v1 transaction lists)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bankrail.core.pagination import decode_cursor, encode_cursor
from bankrail.db.pool import Connection
from bankrail.merchants.transactions import (
    LISTED,
    SOURCE_COLUMNS,
    SOURCE_JOIN,
    TYPE_FILTERS,
    render_item,
)


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
    """Movements in ascending time order within an inclusive range, as v3 items
    (`merchants.transactions`); `type_` is one of `TYPE_FILTERS`."""
    after_time: datetime | None = None
    after_id: uuid.UUID | None = None
    if cursor:
        after_time, after_id = decode_cursor(cursor)
    rows = await conn.fetch(
        "SELECT a.id, a.type, a.amount_in_minor, a.currency, a.status, a.created_at,"
        f" a.details, {SOURCE_COLUMNS} FROM account_activity a{SOURCE_JOIN}"
        f" WHERE a.merchant_account_id = $1 AND {LISTED}"
        " AND ($2::timestamptz IS NULL OR a.created_at >= $2)"
        " AND ($3::timestamptz IS NULL OR a.created_at <= $3)"
        " AND ($4::text IS NULL OR a.type = $4)"
        " AND ($5::timestamptz IS NULL OR (a.created_at, a.id) > ($5, $6::uuid))"
        " ORDER BY a.created_at, a.id LIMIT $7",
        merchant_account_id,
        start,
        end,
        TYPE_FILTERS[type_] if type_ else None,
        after_time,
        after_id,
        limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    items = [render_item(row) for row in rows]
    next_cursor = encode_cursor(rows[-1]["created_at"], rows[-1]["id"]) if more else None
    return ActivityPage(items, next_cursor)
