"""`GET /v3/payments`: a merchant's own payments, newest first, filtered and paged, each
document rendered once per version of its rows and kept (payments/documents.py). The
console's payments list reads the same rows through `payment_rows`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from bankrail.core.jsonbody import dumps
from bankrail.core.pagination import Window, newest_first_page
from bankrail.db.pool import Connection
from bankrail.payments._store import (
    DOCUMENT_FROM,
    DOCUMENT_VERSION,
    PAYMENT_COLUMNS,
    VERSIONED_DOCUMENT_SELECT,
    render_row,
)
from bankrail.payments.documents import PaymentDocuments

__all__ = ["PAGE_SELECT", "PAYMENT_SELECT", "list_payments", "payment_rows"]

PAYMENT_SELECT = f"SELECT {PAYMENT_COLUMNS} FROM payments p"
"""The whole payments row (the console's list)."""

PAGE_SELECT = f"SELECT p.id, p.created_at, {DOCUMENT_VERSION}{DOCUMENT_FROM}"
"""What a page of `GET /v3/payments` reads first: which payments it lists (and the cursor's
position of each) and the version of each one's document."""


async def payment_rows(
    conn: Connection,
    merchant_id: uuid.UUID | None,
    window: Window,
    *,
    merchant_account_id: uuid.UUID | None = None,
    status: str | None = None,
    user_id: str | None = None,
    select: str = PAYMENT_SELECT,
) -> tuple[Sequence[Any], str | None]:
    """One page of payments rows as `select` (a statement's head whose payments are `p`)
    reads them, newest first, of the merchant (None: of every merchant, the console
    operator's view), and the cursor of the next page (None on the last)."""
    after_time, after_id = window.after()
    # Only the filters given are in the statement: a catch-all `($n IS NULL OR ...)` form
    # cannot use the index once PostgreSQL settles on a generic plan for it.
    conditions: list[str] = []
    values: list[Any] = []
    for condition, value in (
        ("p.merchant_id = ${}", merchant_id),
        ("p.merchant_account_id = ${}", merchant_account_id),
        ("p.status = ${}", status),
        ("p.user_id = ${}", user_id),
        ("p.created_at >= ${}", window.since),
        ("p.created_at <= ${}", window.until),
        # The page starts below the cursor; the first bound lets the index start there.
        ("p.created_at <= ${}", after_time),
    ):
        if value is not None:
            values.append(value)
            conditions.append(condition.format(len(values)))
    if after_time is not None:
        values.append(after_id)
        conditions.append(f"(p.created_at, p.id) < (${len(values) - 1}, ${len(values)})")
    values.append(window.limit + 1)
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    rows = await conn.fetch(
        f"{select}{where} ORDER BY p.created_at DESC, p.id DESC LIMIT ${len(values)}",
        *values,
    )
    return newest_first_page(rows, window.limit)


async def list_payments(
    conn: Connection,
    merchant_id: uuid.UUID,
    window: Window,
    documents: PaymentDocuments,
    *,
    merchant_account_id: uuid.UUID | None = None,
    status: str | None = None,
    user_id: str | None = None,
) -> tuple[list[bytes], str | None]:
    """One page of the merchant's payments, each the document `GET /v3/payments/{id}` gives
    (the same statement's head and `render_row`) as its JSON bytes, and the cursor of the
    next page (None on the last).

    The page reads its payments' ids and versions (`PAGE_SELECT`), takes from `documents`
    those it holds at these versions, and reads and renders the others in one statement
    (`VERSIONED_DOCUMENT_SELECT`), keeping each by the version that statement read. A payment
    that changed between the two statements is listed as the second read it, the newer state
    (each statement sees what was committed when it began); one deleted in between is left
    out."""
    page, next_cursor = await payment_rows(
        conn,
        merchant_id,
        window,
        merchant_account_id=merchant_account_id,
        status=status,
        user_id=user_id,
        select=PAGE_SELECT,
    )
    # Any UPDATE of a payments row (or of its source) gives it a new `xmin`, so a payment that
    # changed is not found at its new version and is rendered again: never served stale.
    found = [documents.get(row["id"], (row["version"], row["source_version"])) for row in page]
    missing = [row["id"] for row, document in zip(page, found, strict=True) if document is None]
    if missing:
        rendered: dict[uuid.UUID, bytes] = {}
        # The ids were read of this merchant; the merchant's condition keeps them so.
        for row in await conn.fetch(
            f"{VERSIONED_DOCUMENT_SELECT} WHERE p.id = ANY($1) AND p.merchant_id = $2",
            missing,
            merchant_id,
        ):
            document = dumps(render_row(row))
            documents.put(row["id"], (row["version"], row["source_version"]), document)
            rendered[row["id"]] = document
        found = [
            document if document is not None else rendered.get(row["id"])
            for row, document in zip(page, found, strict=True)
        ]
    return [document for document in found if document is not None], next_cursor
