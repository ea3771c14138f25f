"""The end of a merchant's data: a sandbox merchant started clean (`reset`), a merchant removed
(`delete`), and a merchant closed with its history kept (`close`). Each runs in one
transaction; the ledger check stays clean after every one of them."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import asyncpg
import orjson

from bankrail.core.problems import Conflict, NotFound
from bankrail.db.pool import Connection
from bankrail.ledger import movements
from bankrail.merchants.service import list_accounts, lock_account, merchant_exists
from bankrail.security.keys import announce_revocation

__all__ = ["close_merchant", "delete_merchant", "has_ledger_history", "reset_merchant"]

T = TypeVar("T")


async def _require(conn: Connection, merchant_id: uuid.UUID) -> None:
    if not await merchant_exists(conn, merchant_id):
        raise NotFound(f"Merchant {merchant_id} does not exist.")


_ATTEMPTS = 5


async def _retrying_deadlocks(work: Callable[[], Awaitable[T]]) -> T:
    """`work` (one transaction), run again when PostgreSQL ended it to break a deadlock: the
    purge locks a dozen tables that background jobs write in their own orders."""
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            return await work()
        except asyncpg.DeadlockDetectedError:
            if attempt == _ATTEMPTS:
                raise
    raise AssertionError("unreachable")


async def reset_merchant(conn: Connection, merchant_id: uuid.UUID, now: datetime) -> dict[str, Any]:
    """Start the merchant clean: its payments, payouts, refunds, mandates, payment sources,
    transactions, events and webhook deliveries are gone and every account's balances are
    zero (moved to its sandbox-reset ledger account, so the books stay balanced); its accounts
    (ids, IBANs), clients, keys, console users and settings stay. Returns how many objects of
    each kind went. 404 for an unknown merchant."""

    async def once() -> dict[str, Any]:
        async with conn.transaction():
            return await _reset_in_transaction(conn, merchant_id, now)

    return await _retrying_deadlocks(once)


async def _reset_in_transaction(
    conn: Connection, merchant_id: uuid.UUID, now: datetime
) -> dict[str, Any]:
    await _require(conn, merchant_id)
    removed: dict[str, Any] = orjson.loads(
        await conn.fetchval("SELECT bankrail_purge_merchant_objects($1)::text", merchant_id)
    )
    for listed in await list_accounts(conn, merchant_id):
        account = await lock_account(conn, listed.id)
        for ledger_id, balance in (
            (account.available_ledger_id, account.available_balance),
            (account.held_ledger_id, account.held_balance),
        ):
            if balance > 0:
                await movements.record(
                    conn, movements.sandbox_reset(account, ledger_id, balance), now
                )
    await conn.execute(
        "UPDATE merchant_accounts SET notification_state = 'normal' WHERE merchant_id = $1",
        merchant_id,
    )
    return removed


async def has_ledger_history(conn: Connection, merchant_id: uuid.UUID) -> bool:
    """Whether money ever moved on one of the merchant's accounts."""
    return bool(
        await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM merchant_accounts ma JOIN ledger_postings p"
            " ON p.account_id IN (ma.available_ledger_id, ma.held_ledger_id)"
            " WHERE ma.merchant_id = $1)",
            merchant_id,
        )
    )


async def delete_merchant(
    conn: Connection, merchant_id: uuid.UUID, now: datetime, *, sandbox: bool
) -> None:
    """Remove the merchant entirely: what `reset_merchant` removes, then its console users,
    clients, keys, accounts and the merchant itself (the ledger keeps its balanced history).
    In production (`sandbox` false) this is refused (409) while the merchant has ledger
    history: close it instead. 404 for an unknown merchant."""

    async def once() -> None:
        async with conn.transaction():
            # The purge's table locks come first: no posting can start after the check.
            await _reset_in_transaction(conn, merchant_id, now)
            if not sandbox and await has_ledger_history(conn, merchant_id):
                raise Conflict(
                    f"Merchant {merchant_id} has ledger history, which production keeps: "
                    f"close it instead (POST /admin/merchants/{merchant_id}/close)."
                )
            await conn.execute("SELECT bankrail_delete_merchant($1)", merchant_id)
            await announce_revocation(conn)

    await _retrying_deadlocks(once)


async def close_merchant(conn: Connection, merchant_id: uuid.UUID, now: datetime) -> datetime:
    """Close the merchant: its API clients and signing keys are revoked (effective on every
    host within a second, as a revocation), its console users disabled (their sessions end),
    and no new ones can be made; its objects, accounts and ledger history stay readable to the
    operator. Closing again changes nothing. Returns when it was closed. 404 for an unknown
    merchant."""
    async with conn.transaction():
        closed_at = await conn.fetchval(
            "UPDATE merchants SET closed_at = coalesce(closed_at, $2) WHERE id = $1"
            " RETURNING closed_at",
            merchant_id,
            now,
        )
        if closed_at is None:
            raise NotFound(f"Merchant {merchant_id} does not exist.")
        await conn.execute(
            "UPDATE api_clients SET revoked_at = $2 WHERE merchant_id = $1 AND revoked_at IS NULL",
            merchant_id,
            now,
        )
        await conn.execute(
            "UPDATE signing_keys SET revoked_at = $2 WHERE merchant_id = $1 AND revoked_at IS NULL",
            merchant_id,
            now,
        )
        await conn.execute(
            "UPDATE console_users SET disabled_at = $2"
            " WHERE merchant_id = $1 AND disabled_at IS NULL",
            merchant_id,
            now,
        )
        await announce_revocation(conn)
    result: datetime = closed_at
    return result
