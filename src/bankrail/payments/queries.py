"""`GET /v3/payments`: a merchant's own payments, newest first, filtered and paged. The
console's payments list reads the same rows through `payment_rows`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from bankrail.core.pagination import Window, newest_first_page
from bankrail.db.pool import Connection
from bankrail.payments._store import PAYMENT_COLUMNS, render_row
from bankrail.payments.sources import payment_sources_by_id

__all__ = ["list_payments", "payment_rows"]


async def payment_rows(
    conn: Connection,
    merchant_id: uuid.UUID | None,
    window: Window,
    *,
    merchant_account_id: uuid.UUID | None = None,
    status: str | None = None,
    user_id: str | None = None,
) -> tuple[Sequence[Any], str | None]:
    """One page of payments rows, newest first, of the merchant (None: of every merchant,
    the console operator's view), and the cursor of the next page (None on the last)."""
    after_time, after_id = window.after()
    rows = await conn.fetch(
        f"SELECT {PAYMENT_COLUMNS} FROM payments"
        " WHERE ($1::uuid IS NULL OR merchant_id = $1)"
        " AND ($2::uuid IS NULL OR merchant_account_id = $2)"
        " AND ($3::text IS NULL OR status = $3) AND ($4::text IS NULL OR user_id = $4)"
        " AND ($5::timestamptz IS NULL OR created_at >= $5)"
        " AND ($6::timestamptz IS NULL OR created_at <= $6)"
        " AND ($7::timestamptz IS NULL OR (created_at, id) < ($7, $8::uuid))"
        " ORDER BY created_at DESC, id DESC LIMIT $9",
        merchant_id,
        merchant_account_id,
        status,
        user_id,
        window.since,
        window.until,
        after_time,
        after_id,
        window.limit + 1,
    )
    return newest_first_page(rows, window.limit)


async def list_payments(
    conn: Connection,
    merchant_id: uuid.UUID,
    window: Window,
    *,
    merchant_account_id: uuid.UUID | None = None,
    status: str | None = None,
    user_id: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the merchant's payments, each as `GET /v3/payments/{id}` renders it, and
    the cursor of the next page (None on the last)."""
    page, next_cursor = await payment_rows(
        conn,
        merchant_id,
        window,
        merchant_account_id=merchant_account_id,
        status=status,
        user_id=user_id,
    )
    sources = await payment_sources_by_id(
        conn, [row["payment_source_id"] for row in page if row["payment_source_id"]]
    )
    items = []
    for row in page:
        source = sources.get(row["payment_source_id"]) if row["payment_source_id"] else None
        items.append(render_row(row, source.to_api() if source else None))
    return items, next_cursor
