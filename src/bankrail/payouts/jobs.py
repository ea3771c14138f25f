"""Running the jobs of many payouts at once.

Under load, most due payout jobs are alike: an open-loop payout whose money leaves over a
scheme (or comes back on a failure) from an account without a balance threshold. This takes
a batch of them in one transaction with a few round trips: the Python state machine decides
each payout's steps, exactly as `service.advance_payout` does for one, and one statement
(migration 0006) writes every row. The merchant's ledger rows are locked once per batch, at
the end, instead of once per payout. Every other payout job (an internal transfer, an account
with a threshold to re-evaluate, a job without its payout) is left to `advance_payout`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bankrail.db.pool import Connection
from bankrail.events.outbox import Family, NewEvent, new_event
from bankrail.merchants.balances import clearing_code
from bankrail.payouts.models import Stage
from bankrail.payouts.service import (
    ADVANCE_JOB,
    STATE_COLUMNS,
    activity_details,
    lifecycle_columns,
    planned_advance,
    v1_event,
    v3_terminal_event,
)

__all__ = ["advance_due_payouts"]

_COLUMNS = ", ".join(f"(c.payout).{name.strip()}" for name in STATE_COLUMNS.split(","))

# Due payout jobs whose payout this batch can take (migration 0007): the payout rows are
# locked with the jobs (a duplicate job waits for them), and the account row is share-locked
# so that no balance threshold can be set on it before the batch commits (a release would
# then owe a re-evaluation of the account's notification state).
_CLAIM = (
    f"SELECT c.job_id, {_COLUMNS}, c.held_ledger_id, c.available_ledger_id"
    " FROM bankrail_claim_payout_jobs($1, $2, $3) c"
)

_WRITE = "SELECT bankrail_advance_payouts({})".format(", ".join(f"${i}" for i in range(1, 32)))


@dataclass
class _Batch:
    """The rows one batch writes, as the parallel arrays migration 0006 takes."""

    now: datetime
    job_ids: list[int] = field(default_factory=list)
    payouts: list[tuple[Any, ...]] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)
    next_steps: list[tuple[uuid.UUID, datetime]] = field(default_factory=list)
    moves: list[tuple[uuid.UUID, str, uuid.UUID, int, int | None, str | None, str, int]] = field(
        default_factory=list
    )

    def add(self, row: Any) -> None:
        """Decide the payout's steps and queue everything they write."""
        self.job_ids.append(row["job_id"])
        plan = planned_advance(row, self.now)
        if not plan.steps:
            return  # terminal: a duplicate job finds nothing to do
        state = plan.state
        payout_id: uuid.UUID = row["id"]
        self.payouts.append(
            (
                payout_id,
                row["merchant_account_id"],
                row["amount_in_minor"],
                row["currency"],
                *lifecycle_columns(state),
                state.v3_status,
                activity_details(state),
            )
        )
        if row["api"] == "v1":
            for step in plan.steps:
                self._event(row, "payouts", v1_event(row, step, self.now))
        terminal = v3_terminal_event(row, state)
        if terminal is not None:
            self._event(row, "payments", terminal)
        if plan.next_step_at is not None:
            self.next_steps.append((payout_id, plan.next_step_at))
        if not plan.moves_money:
            return
        amount: int = row["amount_in_minor"]
        held: int = row["held_ledger_id"]
        to_id: int | None = None
        to_code: str | None = None
        if state.stage is Stage.FAILED:
            kind, to_id = "payout_release", row["available_ledger_id"]
        else:
            kind = "payout_execution"
            to_code = clearing_code(row["scheme_id"], row["currency"], row["merchant_account_id"])
        self.moves.append(
            (uuid.uuid4(), kind, payout_id, held, to_id, to_code, row["currency"], amount)
        )

    def _event(self, row: Any, family: Family, typed_body: tuple[str, dict[str, Any]]) -> None:
        event_type, body = typed_body
        self.events.append(
            new_event(
                merchant_id=row["merchant_id"], family=family, event_type=event_type, body=body
            )
        )

    def arguments(self) -> list[Any]:
        """The arguments of `bankrail_advance_payouts`, in order."""
        payouts = list(zip(*self.payouts, strict=True)) or [()] * 12
        events = self.events
        next_steps = list(zip(*self.next_steps, strict=True)) or [()] * 2
        moves = list(zip(*self.moves, strict=True)) or [()] * 8
        return [
            self.now,
            self.job_ids,
            *(list(column) for column in payouts),
            [e.id for e in events],
            [e.delivery_id for e in events],
            [e.merchant_id for e in events],
            [e.family for e in events],
            [e.event_type for e in events],
            [e.payload for e in events],
            *(list(column) for column in next_steps),
            ADVANCE_JOB,
            *(list(column) for column in moves),
        ]


async def advance_due_payouts(conn: Connection, now: datetime, limit: int) -> int:
    """Claim up to `limit` due payout jobs that can run together and take every payout's
    due steps, with the same states, events, activity and ledger postings as
    `advance_payout` would, all in the caller's transaction; returns how many jobs it took.

    A payout with two jobs in the claim is taken once; its other job stays queued.
    """
    rows = await conn.fetch(_CLAIM, now, limit, ADVANCE_JOB)
    if not rows:
        return 0
    batch = _Batch(now)
    seen: set[uuid.UUID] = set()
    for row in rows:
        if row["id"] not in seen:
            seen.add(row["id"])
            batch.add(row)
    await conn.execute(_WRITE, *batch.arguments())
    return len(batch.job_ids)
