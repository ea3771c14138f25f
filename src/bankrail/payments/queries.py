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
from bankrail.payments._store import HELD_DOCUMENT_SELECT, PAYMENT_COLUMNS, render_row
from bankrail.payments.documents import PaymentDocuments, Version

__all__ = ["PAYMENT_SELECT", "list_payments", "payment_rows"]

PAYMENT_SELECT = f"SELECT {PAYMENT_COLUMNS} FROM payments p"
"""The whole payments row (the console's list)."""


async def payment_rows(
    conn: Connection,
    merchant_id: uuid.UUID | None,
    window: Window,
    *,
    merchant_account_id: uuid.UUID | None = None,
    status: str | None = None,
    user_id: str | None = None,
    select: str = PAYMENT_SELECT,
    select_values: Sequence[Any] = (),
) -> tuple[Sequence[Any], str | None]:
    """One page of payments rows as `select` (a statement's head whose payments are `p`,
    its own parameters `select_values`, numbered from `$1`) reads them, newest first, of the
    merchant (None: of every merchant, the console operator's view), and the cursor of the
    next page (None on the last)."""
    after_time, after_id = window.after()
    # Only the filters given are in the statement: a catch-all `($n IS NULL OR ...)` form
    # cannot use the index once PostgreSQL settles on a generic plan for it.
    conditions: list[str] = []
    values: list[Any] = list(select_values)
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
    (the same columns and `render_row`) as its JSON bytes, and the cursor of the next page
    (None on the last), in one statement.

    The statement is told which documents `documents` holds of the payments this listing
    showed when it was last read (`HELD_DOCUMENT_SELECT`); of those still at the version held
    it reads only the id and version, and the page splices the document held. Every other
    payment (new on the page, or changed since) is read whole, rendered and kept by the
    version read. A listing read for the first time keeps nothing: its documents are kept
    from its second read on, so that a walk through the history, which reads each page once,
    pays nothing for keeping what it will not read again. Nothing is kept or served inside a
    transaction: a row written twice by one transaction has the same version twice."""
    page_key = (merchant_id, merchant_account_id, status, user_id, window)
    keeps = not conn.is_in_transaction()
    first = not keeps or documents.first_read(page_key)
    held = documents.held_for(page_key) if not first else None
    page, next_cursor = await payment_rows(
        conn,
        merchant_id,
        window,
        merchant_account_id=merchant_account_id,
        status=status,
        user_id=user_id,
        select=HELD_DOCUMENT_SELECT,
        select_values=(held.keys if held is not None else [],),
    )
    if held is None:
        return [dumps(render_row(row)) for row in page], next_cursor
    found: list[bytes] = []
    listed: list[tuple[uuid.UUID, Version]] = []
    for row in page:
        # Kept by the version the row has now: any UPDATE of a payments row (or of its
        # source) gives it a new `xmin`, so a changed payment is never served stale.
        version: Version = (row["version"], row["source_version"])
        payment_id = row["id"]
        listed.append((payment_id, version))
        document = (
            documents.served(payment_id, held)
            if row["held"]
            else documents.get(payment_id, version)  # another listing's, say
        )
        if document is None:
            document = dumps(render_row(row))
            documents.put(payment_id, version, document)
        found.append(document)
    documents.listed(page_key, listed)
    return found, next_cursor
