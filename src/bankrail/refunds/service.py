"""Refund use cases after acceptance (acceptance.py): take a refund's steps on the simulated
rails, and read refunds back.

Acceptance held the funds in the merchant account that received the payment (available
balance fell at the 201), counted the refund against the payment, and scheduled the refund's
first step. Each later step runs as a durable job, decided by the rails' lifecycle and written
by the rails' one writer of steps (`rails.advancement.RailBatch`), as a payout's: the refund's
state, activity, event and money in one statement, for one refund (`advance_refund`, the job
handler) or a leased batch of many (`advance_due_refunds`).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from bankrail.core.powers import SandboxPowers
from bankrail.core.problems import NotFound
from bankrail.core.timefmt import iso_utc
from bankrail.db.pool import Connection
from bankrail.events.outbox import NewEvent, new_event
from bankrail.jobs.queue import give_back
from bankrail.ledger.movements import REFUND, Ledgers, end_hold
from bankrail.merchants.balances import reevaluate_notifications
from bankrail.rails.advancement import RailBatch, planned_steps, step_item
from bankrail.rails.lifecycle import (
    TERMINAL,
    Advance,
    RailState,
    Stage,
    state_of,
)
from bankrail.refunds.acceptance import ADVANCE_JOB

__all__ = [
    "ADVANCE_JOB",
    "add_refund_steps",
    "advance_due_refunds",
    "advance_refund",
    "get_refund",
    "list_refunds",
]

_COLUMNS = (
    "id, merchant_id, payment_id, merchant_account_id, amount_in_minor, currency, reference,"
    " metadata, scheme_id, stage, pending_failure, failure_reason, created_at, authorized_at,"
    " submitted_at, executed_at, failed_at"
)

# One refund for `advance_refund`, locked, with the ledger rows of the account it is paid from.
_ONE = (
    "SELECT {}, ma.held_ledger_id, ma.available_ledger_id"
    " FROM refunds r JOIN merchant_accounts ma ON ma.id = r.merchant_account_id"
    " WHERE r.id = $1 FOR UPDATE OF r"
).format(", ".join(f"r.{name.strip()}" for name in _COLUMNS.split(",")))

# Due refund jobs whose refund a batch can take, leased (`advance_due_refunds`).
_LEASE = "SELECT {}, c.job_id, c.held_ledger_id, c.available_ledger_id FROM {} c".format(
    ", ".join(f"(c.refund).{name.strip()}" for name in _COLUMNS.split(",")),
    "bankrail_lease_transfer_jobs('refund', $1, $2, $3, $4)",
)

# How long a batch holds the jobs it took (service time), as payouts/jobs.py LEASE.
LEASE = timedelta(seconds=10)


def add_refund_steps(batch: RailBatch, row: Any, powers: SandboxPowers) -> Advance:
    """Decide the refund's steps due at the batch's time and add what they write to `batch`:
    its new state and activity status, its next job, its terminal event (`refund_executed` or
    `refund_failed`), the end of its hold when money moves (paid out, or given back to the
    available balance when it fails), and, when it fails, its amount given back to what is
    left to refund of its payment. `row` is a refunds row with its account's ledger rows."""
    plan = planned_steps(row, batch.now, powers)
    if not plan.steps:
        return plan  # terminal: a duplicate job finds nothing to do
    state = plan.state
    failed = state.stage is Stage.FAILED
    batch.steps.append(
        step_item(
            "refund",
            row,
            plan,
            job=ADVANCE_JOB,
            returned_payment=row["payment_id"] if failed else None,
        )
    )
    if state.stage in TERMINAL:
        batch.events.append(_terminal_event(row, state))
    if plan.moves_money:
        account = Ledgers(
            row["merchant_account_id"],
            row["currency"],
            row["available_ledger_id"],
            row["held_ledger_id"],
        )
        batch.moves.append(
            end_hold(
                account,
                REFUND,
                row["amount_in_minor"],
                row["id"],
                failed=failed,
                rail=row["scheme_id"],
            )
        )
    return plan


async def advance_refund(
    conn: Connection, payload: dict[str, Any], now: datetime, *, powers: SandboxPowers
) -> None:
    """Take the refund's steps that are due at `now` (a job handler; runs in the job's
    transaction): its state, activity, events and money are written together by the rails'
    writer, then the balance notifications of its account move."""
    row = await conn.fetchrow(_ONE, uuid.UUID(payload["refund_id"]))
    if row is None:
        return
    batch = RailBatch(now)
    plan = add_refund_steps(batch, row, powers)
    if not plan.steps:
        return
    await batch.write(conn)
    for moved in batch.moves:
        if moved.available_of is not None:
            await reevaluate_notifications(conn, moved.available_of, now)


async def advance_due_refunds(
    conn: Connection, now: datetime, limit: int, *, powers: SandboxPowers
) -> int:
    """Take up to `limit` due refund jobs that can run together (a refund of an account
    without a balance threshold) and every refund's due steps, with the same effects as
    `advance_refund`; returns how many jobs it ran. Commits its own work on `conn` (see
    `jobs.queue.BatchRunner`): the jobs are leased by one statement and the steps written by
    another, which writes nothing (0 returned, the jobs given back) when a refund was
    advanced by another path meanwhile. A refund with two jobs in the lease is taken once."""
    rows = await conn.fetch(_LEASE, now, limit, ADVANCE_JOB, LEASE)
    if not rows:
        return 0
    batch = RailBatch(now)
    duplicates: list[int] = []
    seen: set[uuid.UUID] = set()
    for row in rows:
        if row["id"] in seen:
            duplicates.append(row["job_id"])
            continue
        seen.add(row["id"])
        batch.job_ids.append(row["job_id"])
        add_refund_steps(batch, row, powers)
    leased = [row["job_id"] for row in rows]
    try:
        written = await batch.write_leased(conn)
    except Exception:
        await give_back(conn, leased)
        raise
    await give_back(conn, duplicates if written else leased)
    return len(batch.job_ids) if written else 0


def _terminal_event(row: Any, state: RailState) -> NewEvent:
    body: dict[str, Any] = {
        "refund_id": str(row["id"]),
        "payment_id": str(row["payment_id"]),
        "scheme_id": row["scheme_id"],
        "metadata": row["metadata"] or {},
    }
    if state.stage is Stage.EXECUTED:
        assert state.executed_at is not None
        event_type = "refund_executed"
        body["executed_at"] = iso_utc(state.executed_at)
    else:
        assert state.failed_at is not None
        assert state.failure_reason is not None
        event_type = "refund_failed"
        body["failed_at"] = iso_utc(state.failed_at)
        body["failure_reason"] = state.failure_reason.value
    return new_event(
        merchant_id=row["merchant_id"], family="payments", event_type=event_type, body=body
    )


def render(row: Any) -> dict[str, Any]:
    """The refund resource."""
    state = state_of(row)
    refund: dict[str, Any] = {
        "id": str(row["id"]),
        "payment_id": str(row["payment_id"]),
        "amount_in_minor": row["amount_in_minor"],
        "currency": row["currency"],
        "reference": row["reference"],
        "metadata": row["metadata"] or {},
        "status": state.v3_status,
        "created_at": iso_utc(row["created_at"]),
    }
    for column in ("authorized_at", "executed_at", "failed_at"):
        if row[column]:
            refund[column] = iso_utc(row[column])
    if state.failure_reason is not None:
        refund["failure_reason"] = state.failure_reason.value
    return refund


async def _require_payment(conn: Connection, payment_id: uuid.UUID, merchant_id: uuid.UUID) -> None:
    found = await conn.fetchval(
        "SELECT true FROM payments WHERE id = $1 AND merchant_id = $2", payment_id, merchant_id
    )
    if not found:
        raise NotFound(f"Payment {payment_id} not found.")


async def list_refunds(
    conn: Connection, payment_id: uuid.UUID, merchant_id: uuid.UUID
) -> list[dict[str, Any]]:
    """Every refund of the merchant's payment, oldest first; 404 for another's payment."""
    await _require_payment(conn, payment_id, merchant_id)
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM refunds WHERE payment_id = $1 ORDER BY created_at, id",
        payment_id,
    )
    return [render(row) for row in rows]


async def get_refund(
    conn: Connection, payment_id: uuid.UUID, refund_id: uuid.UUID, merchant_id: uuid.UUID
) -> dict[str, Any]:
    """One refund of the merchant's payment; 404 when either is not the merchant's."""
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM refunds WHERE id = $1 AND payment_id = $2 AND merchant_id = $3",
        refund_id,
        payment_id,
        merchant_id,
    )
    if row is None:
        raise NotFound(f"Refund {refund_id} of payment {payment_id} not found.")
    return render(row)
