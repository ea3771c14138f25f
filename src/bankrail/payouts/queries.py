"""`GET /v3/payouts`: a merchant's own payouts, newest first, filtered and paged. The
console's payouts list reads the same rows through `payout_rows`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from bankrail.core.pagination import Window, newest_first_page
from bankrail.db.pool import Connection
from bankrail.payouts.service import STATE_COLUMNS, render_v3
from bankrail.rails.lifecycle import Stage

__all__ = ["V3_STATUS_STAGES", "list_payouts", "payout_rows"]

V3_STATUS_STAGES: dict[str, list[str]] = {
    # A verified payout's stages before the rails are its statuses (payouts/verification.py).
    "authorization_required": ["authorization_required"],
    "authorizing": ["authorizing"],
    "pending": [Stage.PENDING.value],
    "authorized": [Stage.AUTHORIZED.value, Stage.SUBMITTED.value],
    "executed": [Stage.EXECUTED.value],
    "failed": [Stage.FAILED.value],
}
"""The stages each v3 status stands for (a submitted payout shows as `authorized`)."""


async def payout_rows(
    conn: Connection,
    merchant_id: uuid.UUID | None,
    window: Window,
    *,
    merchant_account_id: uuid.UUID | None = None,
    status: str | None = None,
    api: str | None = None,
) -> tuple[Sequence[Any], str | None]:
    """One page of payouts rows (v1 and v3, or only `api`'s), newest first, of the merchant
    (None: of every merchant, the console operator's view), and the cursor of the next page
    (None on the last)."""
    after_time, after_id = window.after()
    rows = await conn.fetch(
        f"SELECT {STATE_COLUMNS} FROM payouts WHERE ($1::uuid IS NULL OR merchant_id = $1)"
        " AND ($2::uuid IS NULL OR merchant_account_id = $2)"
        " AND ($3::text[] IS NULL OR stage = ANY($3::text[]))"
        " AND ($4::timestamptz IS NULL OR created_at >= $4)"
        " AND ($5::timestamptz IS NULL OR created_at <= $5)"
        " AND ($6::timestamptz IS NULL OR (created_at, id) < ($6, $7::uuid))"
        " AND ($9::text IS NULL OR api = $9)"
        " ORDER BY created_at DESC, id DESC LIMIT $8",
        merchant_id,
        merchant_account_id,
        V3_STATUS_STAGES[status] if status else None,
        window.since,
        window.until,
        after_time,
        after_id,
        window.limit + 1,
        api,
    )
    return newest_first_page(rows, window.limit)


async def list_payouts(
    conn: Connection,
    merchant_id: uuid.UUID,
    window: Window,
    *,
    merchant_account_id: uuid.UUID | None = None,
    status: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the merchant's payouts (v1 and v3), each as `GET /v3/payouts/{id}`
    renders it, and the cursor of the next page (None on the last)."""
    page, next_cursor = await payout_rows(
        conn, merchant_id, window, merchant_account_id=merchant_account_id, status=status
    )
    return [render_v3(row) for row in page], next_cursor
