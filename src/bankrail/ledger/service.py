"""Writing and checking the ledger in PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from bankrail.core.ids import new_id
from bankrail.db.pool import Connection
from bankrail.ledger.models import (
    BalanceOverflow,
    InsufficientFunds,
    Posting,
    UnbalancedTransaction,
    validate_postings,
)

__all__ = ["check_ledger", "ensure_account", "post"]

# Raised by bankrail_post_transactions (db/functions/ledger.sql): an unknown ledger account,
# mixed currencies, postings that do not balance.
_UNBALANCED_STATES = frozenset({"BRL01", "BRL02", "BRL03"})

# The one posting primitive, for one transaction here; the batch writers of the payout path
# call the same function from SQL.
_POST = (
    "SELECT bankrail_post_transactions(ARRAY[$1::uuid], ARRAY[$2::text], ARRAY[$3::uuid],"
    " ARRAY[$4::timestamptz], array_fill($1::uuid, ARRAY[cardinality($5::bigint[])]),"
    " $5::bigint[], $6::bigint[])"
)


async def ensure_account(
    conn: Connection, code: str, currency: str, *, allow_negative: bool
) -> int:
    """The id of the ledger account with this code, created if it does not exist."""
    account_id = await conn.fetchval("SELECT id FROM ledger_accounts WHERE code = $1", code)
    if account_id is None:
        account_id = await conn.fetchval(
            "INSERT INTO ledger_accounts (code, currency, allow_negative) VALUES ($1, $2, $3)"
            " ON CONFLICT (code) DO NOTHING RETURNING id",
            code,
            currency,
            allow_negative,
        )
    if account_id is None:
        account_id = await conn.fetchval("SELECT id FROM ledger_accounts WHERE code = $1", code)
    assert isinstance(account_id, int)
    return account_id


async def post(
    conn: Connection,
    *,
    kind: str,
    reference_id: uuid.UUID | None,
    postings: Sequence[Posting],
    now: datetime,
    transaction_id: uuid.UUID | None = None,
) -> uuid.UUID:
    """Record one balanced transaction and update the balances it touches.

    Must run inside the caller's transaction, so the movement commits together with the
    change that causes it. Raises InsufficientFunds when an account that may not go
    negative would, BalanceOverflow when a balance would leave the 64-bit range, and
    UnbalancedTransaction for postings that do not balance or mix currencies (the transaction's
    id is `transaction_id` when given, else a new one); the caller's
    transaction is then unusable unless the call was wrapped in a savepoint.
    """
    validate_postings(postings)
    transaction_id = transaction_id or new_id()
    # One round trip: the transaction row, the account locks taken in id order (so
    # concurrent transactions over overlapping accounts never deadlock), the balance updates
    # and the postings.
    try:
        await conn.execute(
            _POST,
            transaction_id,
            kind,
            reference_id,
            now,
            [p.account_id for p in postings],
            [p.amount for p in postings],
        )
    except asyncpg.CheckViolationError as exc:
        raise InsufficientFunds(str(exc)) from exc
    except asyncpg.NumericValueOutOfRangeError as exc:
        raise BalanceOverflow(str(exc)) from exc
    except asyncpg.PostgresError as exc:
        if exc.sqlstate in _UNBALANCED_STATES:
            raise UnbalancedTransaction(str(exc)) from exc
        raise
    return transaction_id


async def check_ledger(conn: Connection) -> list[dict[str, Any]]:
    """Every violation of the ledger invariants (docs/architecture.md); empty when the books
    are clean."""
    violations: list[dict[str, Any]] = []
    for row in await conn.fetch(
        "SELECT transaction_id, sum(amount) AS total FROM ledger_postings"
        " GROUP BY transaction_id HAVING sum(amount) <> 0"
    ):
        violations.append(
            {
                "rule": "transaction_postings_sum_to_zero",
                "transaction_id": str(row["transaction_id"]),
                "sum": int(row["total"]),
            }
        )
    for row in await conn.fetch(
        "SELECT t.id FROM ledger_transactions t"
        " WHERE (SELECT count(*) FROM ledger_postings p WHERE p.transaction_id = t.id) < 2"
    ):
        violations.append({"rule": "transaction_has_postings", "transaction_id": str(row["id"])})
    for row in await conn.fetch(
        "SELECT a.code, a.balance, coalesce(s.total, 0) AS total FROM ledger_accounts a"
        " LEFT JOIN (SELECT account_id, sum(amount) AS total FROM ledger_postings"
        " GROUP BY account_id) s ON s.account_id = a.id"
        " WHERE a.balance <> coalesce(s.total, 0)"
    ):
        violations.append(
            {
                "rule": "balance_equals_sum_of_postings",
                "account": row["code"],
                "balance": int(row["balance"]),
                "sum_of_postings": int(row["total"]),
            }
        )
    for row in await conn.fetch(
        "SELECT code, balance FROM ledger_accounts WHERE NOT allow_negative AND balance < 0"
    ):
        violations.append(
            {"rule": "available_never_negative", "account": row["code"], "balance": row["balance"]}
        )
    for row in await conn.fetch(
        "SELECT p.transaction_id FROM ledger_postings p JOIN ledger_accounts a"
        " ON a.id = p.account_id GROUP BY p.transaction_id"
        " HAVING count(DISTINCT a.currency) > 1"
    ):
        violations.append(
            {"rule": "single_currency_transaction", "transaction_id": str(row["transaction_id"])}
        )
    return violations
