"""The one writer of rail steps: every transfer that moves through the rails (payouts and
refunds; sweeps and verified payouts are more kinds of the same data) has its steps decided by
`lifecycle.advance` and written by `bankrail_advance_transfers`
(db/functions/rail_advancement.sql), set-based, whether one transfer moves or many.

A `RailBatch` gathers what a batch writes, one group per kind of row: the jobs it finished,
each transfer's new lifecycle fields with its activity row and next job, the events, and the
ledger movements. The area that owns a transfer decides its events, activity details and
money (payouts/jobs.py, refunds/service.py); this module knows only the shape of the write.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from bankrail.core.powers import SandboxPowers
from bankrail.db.pool import Connection
from bankrail.events.outbox import NewEvent
from bankrail.ledger.movements import Clearing, Movement
from bankrail.rails.lifecycle import Advance, FailureReason, RailState, advance, state_of
from bankrail.rails.schemes import sandbox_outcome

__all__ = [
    "RailBatch",
    "TransferKind",
    "event_item",
    "movement_item",
    "planned_steps",
    "step_item",
]

TransferKind = Literal["payout", "refund"]
"""The kinds of transfer the writer knows: the table it updates, and the type of the
transfer's row in the account's activity list."""

_WRITE = "SELECT bankrail_advance_transfers($1, $2, $3, $4, $5)"
_WRITE_LEASED = "SELECT bankrail_advance_leased_transfers($1, $2, $3, $4, $5)"


def planned_steps(row: Any, now: datetime, powers: SandboxPowers) -> Advance:
    """The steps a transfer's row (payouts or refunds: they share the lifecycle's columns,
    `reference` and `pending_failure`) takes when its job runs at `now`: the failure decided
    at acceptance, if any, and the scheme's outcome (with the `outcome_tokens` power, the
    reference's sandbox tokens decide its delay and outcome)."""
    outcome = sandbox_outcome(row["reference"], powers)
    pending = row["pending_failure"]
    return advance(
        state_of(row),
        now,
        pending_failure=FailureReason(pending) if pending else None,
        scheme_failure=outcome.failure,
        execution_delay=timedelta(seconds=outcome.execution_delay_seconds),
    )


def step_item(
    kind: TransferKind,
    row: Any,
    plan: Advance,
    *,
    job: str,
    details: dict[str, Any] | None = None,
    returned_payment: uuid.UUID | None = None,
) -> dict[str, Any]:
    """One transfer's row of the `p_steps` group: the transfer (`row`, with the lifecycle
    columns, `id`, `merchant_account_id`, `amount_in_minor` and `currency`) as `plan` leaves
    it, the status and `details` its activity row records, its next job of kind `job` when
    `plan` has a next step, and the payment whose refunded amount it gives back, if any."""
    state: RailState = plan.state
    transfer_id = str(row["id"])
    next_at = plan.next_step_at
    return {
        "kind": kind,
        "id": transfer_id,
        "account_id": str(row["merchant_account_id"]),
        "amount": row["amount_in_minor"],
        "currency": row["currency"],
        "from_stage": row["stage"],
        "stage": state.stage.value,
        "authorized_at": state.authorized_at,
        "submitted_at": state.submitted_at,
        "executed_at": state.executed_at,
        "failed_at": state.failed_at,
        "failure_reason": state.failure_reason.value if state.failure_reason else None,
        "status": state.v3_status,
        "details": details or {},
        "next_job": job if next_at is not None else None,
        "next_payload": {f"{kind}_id": transfer_id} if next_at is not None else None,
        "next_at": next_at,
        "returned_payment": str(returned_payment) if returned_payment else None,
    }


def event_item(event: NewEvent) -> dict[str, Any]:
    """An event's row of the `p_events` group (its envelope as text: it is JSON)."""
    ordering = event.ordering
    return {
        "id": str(event.id),
        "delivery_id": str(event.delivery_id),
        "merchant_id": str(event.merchant_id),
        "family": event.family,
        "event_type": event.event_type,
        "payload": event.payload.decode(),
        "ordering_key": str(ordering.key) if ordering else None,
        "ordering_seq": ordering.sequence if ordering else None,
    }


def movement_item(movement: Movement) -> dict[str, Any]:
    """A movement's row of the `p_moves` group; its source is a merchant's ledger account
    (the end of a hold always is)."""
    assert isinstance(movement.source, int), "rail movements leave a merchant's ledger account"
    destination = movement.destination
    return {
        "id": str(movement.id),
        "kind": movement.kind,
        "reference_id": str(movement.reference_id),
        "from": movement.source,
        "to": destination if isinstance(destination, int) else None,
        "to_code": destination.code if isinstance(destination, Clearing) else None,
        "currency": movement.currency,
        "amount": movement.amount,
    }


@dataclass
class RailBatch:
    """The rows one batch of rail steps writes, in the groups `bankrail_advance_transfers`
    takes."""

    now: datetime
    job_ids: list[int] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)
    moves: list[Movement] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.job_ids or self.steps)

    def arguments(self) -> list[Any]:
        """The arguments of `bankrail_advance_transfers` (and of its leased form), in order."""
        return [
            self.now,
            self.job_ids,
            self.steps,
            [event_item(event) for event in self.events],
            [movement_item(move) for move in self.moves],
        ]

    async def write(self, conn: Connection) -> None:
        """Write every row of the batch, in the caller's transaction."""
        await conn.execute(_WRITE, *self.arguments())

    async def write_leased(self, conn: Connection) -> bool:
        """Write every row of the batch, in a transaction of its own, if every decision still
        holds (each job queued, each transfer at the stage it was decided from, each account
        without a balance threshold); False, nothing written, otherwise."""
        written: bool = await conn.fetchval(_WRITE_LEASED, *self.arguments())
        return written
