"""Refund use cases after acceptance (acceptance.py): take a refund's steps on the simulated
rails, and read refunds back.

Acceptance held the funds in the merchant account that received the payment (available
balance fell at the 201), counted the refund against the payment, and scheduled the refund's
first step. Each later step runs as a durable job in the transaction that also moves the
money and records its event, as a payout's does.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from bankrail.core.powers import SandboxPowers
from bankrail.core.problems import NotFound
from bankrail.core.timefmt import iso_utc
from bankrail.db.pool import Connection
from bankrail.events.outbox import record_event
from bankrail.jobs.queue import enqueue
from bankrail.ledger.movements import REFUND, end_hold
from bankrail.merchants.activity import record_activity
from bankrail.merchants.balances import move
from bankrail.merchants.service import get_account
from bankrail.rails.lifecycle import FailureReason, RailState, Stage, advance, state_of
from bankrail.rails.schemes import sandbox_outcome
from bankrail.refunds.acceptance import ADVANCE_JOB

__all__ = [
    "ADVANCE_JOB",
    "advance_refund",
    "get_refund",
    "list_refunds",
]

_COLUMNS = (
    "id, merchant_id, payment_id, merchant_account_id, amount_in_minor, currency, reference,"
    " metadata, scheme_id, stage, pending_failure, failure_reason, created_at, authorized_at,"
    " submitted_at, executed_at, failed_at"
)


# Long on purpose: one job step's effects in the order they must happen, in one transaction.
async def advance_refund(
    conn: Connection, payload: dict[str, Any], now: datetime, *, powers: SandboxPowers
) -> None:
    """Take the refund's steps that are due at `now` (a job handler; runs in the job's
    transaction): the money moves, and the terminal event is recorded, with the step."""
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM refunds WHERE id = $1 FOR UPDATE",
        uuid.UUID(payload["refund_id"]),
    )
    if row is None:
        return
    outcome = sandbox_outcome(row["reference"], powers)
    pending = row["pending_failure"]
    plan = advance(
        state_of(row),
        now,
        pending_failure=FailureReason(pending) if pending else None,
        scheme_failure=outcome.failure,
        execution_delay=timedelta(seconds=outcome.execution_delay_seconds),
    )
    if not plan.steps:
        return  # terminal: a duplicate job finds nothing to do
    state = plan.state
    await conn.execute(
        "UPDATE refunds SET stage = $2, authorized_at = $3, submitted_at = $4,"
        " executed_at = $5, failed_at = $6, failure_reason = $7 WHERE id = $1",
        row["id"],
        state.stage.value,
        state.authorized_at,
        state.submitted_at,
        state.executed_at,
        state.failed_at,
        state.failure_reason.value if state.failure_reason else None,
    )
    await _record_activity(
        conn,
        row["id"],
        row["merchant_account_id"],
        row["amount_in_minor"],
        row["currency"],
        state.v3_status,
        now,
    )
    if plan.next_step_at is not None:
        await enqueue(conn, ADVANCE_JOB, {"refund_id": str(row["id"])}, plan.next_step_at)
    if state.stage is Stage.FAILED:
        await conn.execute(
            "UPDATE payments SET refunded_amount_in_minor = refunded_amount_in_minor - $2"
            " WHERE id = $1",
            row["payment_id"],
            row["amount_in_minor"],
        )
    if state.stage in (Stage.EXECUTED, Stage.FAILED):
        await _announce(conn, row, state, now)
    if not plan.moves_money:
        return  # a refund refused before its hold was taken has nothing to give back
    account = await get_account(conn, row["merchant_account_id"])
    assert account is not None
    failed = state.stage is Stage.FAILED
    movement = end_hold(
        account, REFUND, row["amount_in_minor"], row["id"], failed=failed, rail=row["scheme_id"]
    )
    await move(conn, movement, now)


async def _announce(conn: Connection, row: Any, state: RailState, now: datetime) -> None:
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
    await record_event(
        conn,
        merchant_id=row["merchant_id"],
        family="payments",
        event_type=event_type,
        body=body,
        now=now,
    )


async def _record_activity(
    conn: Connection,
    refund_id: uuid.UUID,
    account_id: uuid.UUID,
    amount: int,
    currency: str,
    status: str,
    now: datetime,
    details: dict[str, Any] | None = None,
) -> None:
    await record_activity(
        conn,
        item_id=refund_id,
        merchant_account_id=account_id,
        type_="refund",
        amount=amount,
        currency=currency,
        status=status,
        now=now,
        details=details,
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
