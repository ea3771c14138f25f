"""Running the jobs of many payouts at once.

Under load, most due payout jobs are alike: an open-loop payout whose money leaves over a
scheme (or comes back on a failure) from an account without a balance threshold. This takes
a batch of them with two statements, each its own transaction
(db/functions/payout_advancement.sql): one leases
the jobs and reads their payouts, the Python state machine decides each payout's steps,
exactly as `service.advance_payout` does for one, and one statement checks that the
decisions still hold and writes every row, its commit included. The
merchant's ledger rows are locked once per batch, at the end, and only while PostgreSQL
writes and commits, never while this process's event loop is busy elsewhere. Every other
payout job (an internal transfer, an account with a threshold to re-evaluate, a job without
its payout) is left to `advance_payout`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from bankrail.core.ids import new_id
from bankrail.db.pool import Connection
from bankrail.events.outbox import Family, NewEvent, new_event
from bankrail.ledger.holds import clearing_code
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

# How long a batch holds the jobs it took (service time): when its worker dies before writing,
# they run again once this has passed, or at once when the sandbox clock is advanced past it.
# A batch normally writes within milliseconds; one that writes after its lease has ended
# (another batch may have run its jobs) writes only what still holds.
LEASE = timedelta(seconds=10)

# Due payout jobs whose payout this batch can take, leased.
_LEASE = (
    f"SELECT c.job_id, {_COLUMNS}, c.held_ledger_id, c.available_ledger_id"
    " FROM bankrail_lease_payout_jobs($1, $2, $3, $4) c"
)

_WRITE = "SELECT bankrail_advance_leased_payouts({})".format(
    ", ".join(f"${i}" for i in range(1, 33))
)

# Jobs a batch took but did not run, due again at once for the next claim (the job loops
# woken, as by a new job).
_GIVE_BACK = (
    "WITH j AS (UPDATE jobs SET lease_until = NULL WHERE id = ANY($1::bigint[]))"
    " SELECT pg_notify('bankrail_jobs', '')"
)


@dataclass
class _Batch:
    """The rows one batch writes, as the parallel arrays `bankrail_advance_leased_payouts`
    takes."""

    now: datetime
    job_ids: list[int] = field(default_factory=list)
    # A payout's second job in the same lease: given back, not run.
    duplicate_job_ids: list[int] = field(default_factory=list)
    # The stage each payout of `payouts` was at when its steps were decided.
    from_stages: list[str] = field(default_factory=list)
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
        self.from_stages.append(row["stage"])
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
            (new_id(), kind, payout_id, held, to_id, to_code, row["currency"], amount)
        )

    def _event(self, row: Any, family: Family, typed_body: tuple[str, dict[str, Any]]) -> None:
        event_type, body = typed_body
        self.events.append(
            new_event(
                merchant_id=row["merchant_id"], family=family, event_type=event_type, body=body
            )
        )

    def arguments(self) -> list[Any]:
        """The arguments of `bankrail_advance_leased_payouts`, in order."""
        payouts = list(zip(*self.payouts, strict=True)) or [()] * 12
        events = self.events
        next_steps = list(zip(*self.next_steps, strict=True)) or [()] * 2
        moves = list(zip(*self.moves, strict=True)) or [()] * 8
        return [
            self.from_stages,
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
    """Take up to `limit` due payout jobs that can run together and every payout's due
    steps, with the same states, events, activity and ledger postings as `advance_payout`
    would; returns how many jobs it ran. Commits its own work on `conn` (see
    `jobs.queue.BatchRunner`).

    Nothing is written when a payout was advanced by another path since the lease (or the
    lease ended and another batch ran the jobs): the jobs are then given back, and 0 is
    returned. When the write fails, the jobs are given back before the error is raised.
    A payout with two jobs in the lease is taken once; its other job stays queued.
    """
    rows = await conn.fetch(_LEASE, now, limit, ADVANCE_JOB, LEASE)
    if not rows:
        return 0
    batch = _Batch(now)
    seen: set[uuid.UUID] = set()
    for row in rows:
        if row["id"] in seen:
            batch.duplicate_job_ids.append(row["job_id"])
        else:
            seen.add(row["id"])
            batch.add(row)
    leased = [row["job_id"] for row in rows]
    try:
        written: bool = await conn.fetchval(_WRITE, *batch.arguments())
    except Exception:
        await conn.execute(_GIVE_BACK, leased)
        raise
    given_back = batch.duplicate_job_ids if written else leased
    if given_back:
        await conn.execute(_GIVE_BACK, given_back)
    return len(batch.job_ids) if written else 0
