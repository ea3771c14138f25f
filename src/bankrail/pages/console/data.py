"""What the console reads from PostgreSQL: lists and details of payments and payouts,
merchants, signing keys, and the ledger history behind the balance charts.

Every read takes the merchant to scope it to (None: the operator's view of everything), so a
merchant can never see another merchant's objects.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bankrail.core.pagination import Window
from bankrail.db.pool import Connection
from bankrail.merchants.models import MerchantAccount
from bankrail.payments.queries import payment_rows
from bankrail.payouts.queries import V3_STATUS_STAGES, payout_rows
from bankrail.payouts.verification import BEFORE_RAILS, expires_at

PAGE_SIZE = 50

# v3 payout statuses and the lifecycle stages each one covers.
PAYOUT_STATUS_STAGES = V3_STATUS_STAGES


def payout_v3_status(stage: str) -> str:
    """The status API v3 shows for a lifecycle stage."""
    return "authorized" if stage == "submitted" else stage


@dataclass(frozen=True)
class ListFilter:
    """Filters shared by the payment and payout lists."""

    merchant_id: uuid.UUID | None
    status: str | None = None
    created_from: datetime | None = None
    created_before: datetime | None = None
    cursor: str | None = None
    api: str | None = None


@dataclass(frozen=True)
class Page:
    """One page of a list, newest first, and the cursor of the next (older) page."""

    items: list[dict[str, Any]]
    next_cursor: str | None


async def list_merchants(conn: Connection) -> list[dict[str, Any]]:
    """Every merchant with its number of accounts, by name."""
    rows = await conn.fetch(
        "SELECT m.id, m.name, m.created_at,"
        " (SELECT count(*) FROM merchant_accounts ma WHERE ma.merchant_id = m.id) AS accounts"
        " FROM merchants m ORDER BY lower(m.name), m.created_at, m.id"
    )
    return [dict(r) for r in rows]


async def get_merchant(conn: Connection, merchant_id: uuid.UUID) -> dict[str, Any] | None:
    """The merchant's name, webhook URIs and allowed return URIs."""
    row = await conn.fetchrow(
        "SELECT id, name, payments_webhook_uri, payouts_webhook_uri, return_uris, created_at"
        " FROM merchants WHERE id = $1",
        merchant_id,
    )
    return dict(row) if row else None


def _window(where: ListFilter, limit: int) -> Window:
    """The listing window of the console's filter: its end date is exclusive, a listing's
    `until` inclusive (PostgreSQL keeps microseconds)."""
    until = where.created_before - timedelta(microseconds=1) if where.created_before else None
    return Window(since=where.created_from, until=until, limit=limit, cursor=where.cursor)


async def _with_merchant_names(
    conn: Connection, rows: Sequence[Any], next_cursor: str | None
) -> Page:
    items = [dict(row) for row in rows]
    names = await conn.fetch(
        "SELECT id, name FROM merchants WHERE id = ANY($1::uuid[])",
        list({item["merchant_id"] for item in items}),
    )
    by_id = {row["id"]: row["name"] for row in names}
    for item in items:
        item["merchant_name"] = by_id.get(item["merchant_id"], "")
    return Page(items, next_cursor)


async def list_payments(conn: Connection, where: ListFilter, limit: int = PAGE_SIZE) -> Page:
    """Payments (pay-ins), newest first: the rows of the `GET /v3/payments` listing."""
    rows, next_cursor = await payment_rows(
        conn, where.merchant_id, _window(where, limit), status=where.status
    )
    return await _with_merchant_names(conn, rows, next_cursor)


async def get_payment(
    conn: Connection, payment_id: uuid.UUID, merchant_id: uuid.UUID | None
) -> dict[str, Any] | None:
    """One payment with everything the detail page shows; None when absent or not the
    merchant's."""
    row = await conn.fetchrow(
        "SELECT p.*, m.name AS merchant_name FROM payments p"
        " JOIN merchants m ON m.id = p.merchant_id"
        " WHERE p.id = $1 AND ($2::uuid IS NULL OR p.merchant_id = $2)",
        payment_id,
        merchant_id,
    )
    return dict(row) if row else None


async def list_payouts(conn: Connection, where: ListFilter, limit: int = PAGE_SIZE) -> Page:
    """Payouts of both APIs, newest first: the rows of the `GET /v3/payouts` listing."""
    rows, next_cursor = await payout_rows(
        conn, where.merchant_id, _window(where, limit), status=where.status, api=where.api
    )
    page = await _with_merchant_names(conn, rows, next_cursor)
    for item in page.items:
        item["status"] = payout_v3_status(item["stage"])
    return page


async def get_payout(
    conn: Connection, payout_id: uuid.UUID, merchant_id: uuid.UUID | None
) -> dict[str, Any] | None:
    """One payout with its lifecycle times (and, for a verified payout still waiting for its
    payee, `authorization_expires_at`); None when absent or not the merchant's."""
    row = await conn.fetchrow(
        "SELECT p.*, m.name AS merchant_name FROM payouts p"
        " JOIN merchants m ON m.id = p.merchant_id"
        " WHERE p.id = $1 AND ($2::uuid IS NULL OR p.merchant_id = $2)",
        payout_id,
        merchant_id,
    )
    if row is None:
        return None
    payout = dict(row)
    payout["status"] = payout_v3_status(payout["stage"])
    # A verified payout still waiting for its payee fails `expired` at this moment.
    payout["authorization_expires_at"] = (
        expires_at(payout["created_at"]) if payout["stage"] in BEFORE_RAILS else None
    )
    return payout


async def list_signing_keys(conn: Connection, merchant_id: uuid.UUID) -> list[dict[str, Any]]:
    """The merchant's active (registered, not revoked) public keys, newest first."""
    rows = await conn.fetch(
        "SELECT kid, created_at FROM signing_keys WHERE merchant_id = $1 AND revoked_at IS NULL"
        " ORDER BY created_at DESC, kid",
        merchant_id,
    )
    return [dict(r) for r in rows]


async def delivery_event_types(conn: Connection, merchant_id: uuid.UUID | None) -> list[str]:
    """The event types the merchant's deliveries have, for the filter menu."""
    rows = await conn.fetch(
        "SELECT DISTINCT event_type FROM webhook_deliveries"
        " WHERE $1::uuid IS NULL OR merchant_id = $1 ORDER BY event_type",
        merchant_id,
    )
    return [str(r["event_type"]) for r in rows]


@dataclass(frozen=True)
class BalancePoint:
    """The account's current balance right after one ledger transaction."""

    at: datetime
    change: int
    balance: int


@dataclass(frozen=True)
class BalanceHistory:
    """The last movements of an account's current balance (available + held)."""

    start_at: datetime
    start_balance: int
    points: list[BalancePoint]
    complete: bool


async def balance_history(
    conn: Connection, account: MerchantAccount, max_points: int = 200
) -> BalanceHistory:
    """The running sum of the postings on the account's available and held ledger accounts,
    one point per ledger transaction that changed it, oldest first.

    Only the newest postings are read: the balances are worked out backwards from the
    cached ledger balances, read in the same snapshot, so the cost does not grow with the
    account's age.
    """
    ledger_ids = [account.available_ledger_id, account.held_ledger_id]
    posting_limit = max_points * 3
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        current = await conn.fetchval(
            "SELECT coalesce(sum(balance), 0) FROM ledger_accounts WHERE id = ANY($1::bigint[])",
            ledger_ids,
        )
        rows = await conn.fetch(
            "SELECT transaction_id, created_at, amount FROM ledger_postings"
            " WHERE account_id = ANY($1::bigint[]) ORDER BY created_at DESC, id DESC LIMIT $2",
            ledger_ids,
            posting_limit,
        )
    # group the postings by transaction, newest first (a transaction's postings share a time)
    groups: list[tuple[uuid.UUID, datetime, int]] = []
    index: dict[uuid.UUID, int] = {}
    for row in rows:
        txid = row["transaction_id"]
        if txid in index:
            tx, at, amount = groups[index[txid]]
            groups[index[txid]] = (tx, min(at, row["created_at"]), amount + row["amount"])
        else:
            index[txid] = len(groups)
            groups.append((txid, row["created_at"], row["amount"]))
    complete = len(rows) < posting_limit
    if not complete and groups:
        groups.pop()  # the oldest transaction may have been cut in two by the limit
    balance = int(current or 0)
    newest_first: list[BalancePoint] = []
    for _, at, change in groups:
        if change == 0:  # a hold or release moves money between available and held
            continue
        newest_first.append(BalancePoint(at, change, balance))
        balance -= change
    newest_first = newest_first[:max_points]
    if len(newest_first) == max_points:
        complete = False
    points = list(reversed(newest_first))
    start_balance = points[0].balance - points[0].change if points else balance
    start_at = account.created_at if complete or not points else points[0].at
    return BalanceHistory(start_at, start_balance, points, complete)
