"""`GET /v3/payments`: a merchant's own payments, newest first, filtered and paged. The
console's payments list reads the same rows through `payment_rows`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from bankrail.core.pagination import Window, newest_first_page
from bankrail.db.pool import Connection
from bankrail.payments._store import (
    PAYMENT_COLUMNS,
    RENDERED_TIMESTAMPS,
    render_row,
    rendered_at,
)
from bankrail.payments.sources import payment_sources_by_id

__all__ = ["list_payments", "payment_rows"]


# The timestamps of a listed payment as PostgreSQL renders them, in `iso_utc`'s format
# (microseconds, `Z`): formatting fifty pages' worth of datetimes in Python was a quarter of
# the API process's CPU for a page (docs/performance.md).
_RENDERED_AT = "to_char({0} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS {0}_utc"
LISTED_COLUMNS = ", ".join(
    [
        "id, merchant_account_id, amount_in_minor, currency, user_id, selection_type,"
        " selection_filter, provider_id, scheme_id, metadata, status, failure_stage,"
        " failure_reason, payment_source_id, created_at, history,"
        " refunded_amount_in_minor, mandate_id, mandate_reference, mandate_retry,"
        " user_interaction, sent, next_action",
        *(_RENDERED_AT.format(column) for column in RENDERED_TIMESTAMPS),
    ]
)
"""What `render_row` reads of a payments row, its timestamps rendered (`<column>_utc`)."""


async def payment_rows(
    conn: Connection,
    merchant_id: uuid.UUID | None,
    window: Window,
    *,
    merchant_account_id: uuid.UUID | None = None,
    status: str | None = None,
    user_id: str | None = None,
    columns: str = PAYMENT_COLUMNS,
) -> tuple[Sequence[Any], str | None]:
    """One page of payments rows (`columns` of them), newest first, of the merchant (None:
    of every merchant, the console operator's view), and the cursor of the next page (None
    on the last)."""
    after_time, after_id = window.after()
    # Only the filters given are in the statement: a catch-all `($n IS NULL OR ...)` form
    # cannot use the index once PostgreSQL settles on a generic plan for it.
    conditions: list[str] = []
    values: list[Any] = []
    for condition, value in (
        ("merchant_id = ${}", merchant_id),
        ("merchant_account_id = ${}", merchant_account_id),
        ("status = ${}", status),
        ("user_id = ${}", user_id),
        ("created_at >= ${}", window.since),
        ("created_at <= ${}", window.until),
        # The page starts below the cursor; the first bound lets the index start there.
        ("created_at <= ${}", after_time),
    ):
        if value is not None:
            values.append(value)
            conditions.append(condition.format(len(values)))
    if after_time is not None:
        values.append(after_id)
        conditions.append(f"(created_at, id) < (${len(values) - 1}, ${len(values)})")
    values.append(window.limit + 1)
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    rows = await conn.fetch(
        f"SELECT {columns} FROM payments{where}"
        f" ORDER BY created_at DESC, id DESC LIMIT ${len(values)}",
        *values,
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
        columns=LISTED_COLUMNS,
    )
    sources = await payment_sources_by_id(
        conn, [row["payment_source_id"] for row in page if row["payment_source_id"]]
    )
    items = []
    for row in page:
        source = sources.get(row["payment_source_id"]) if row["payment_source_id"] else None
        items.append(render_row(row, source.to_api() if source else None, rendered_at))
    return items, next_cursor
