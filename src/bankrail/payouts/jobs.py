"""Running payout jobs: the steps of a payout after its acceptance.

Every payout's steps are decided by the rails' state machine (`rails.lifecycle.advance`,
through `_Batch`) and written by the rails' one writer of steps (`rails.advancement.RailBatch`,
`bankrail_advance_transfers` in db/functions/rail_advancement.sql), which refunds' steps take
too, whether one payout moves or many:

- `advance_due_payouts` takes a batch of due jobs with two statements, each its own
  transaction: one leases the jobs and reads their payouts; after the decisions, one checks
  that they still hold and writes every row, its commit included. The merchant's ledger rows
  are locked once per batch, at the end, and only while PostgreSQL writes and commits, never
  while this process's event loop is busy elsewhere. It takes the payouts whose steps need
  nothing else: an open-loop payout of an account without a balance threshold.
- `advance_payout` is the job handler for one payout, in the job's transaction: the same
  decision and the same write for a batch of one, and then what the other payouts need
  after their money moves: an internal transfer's credit to the payee (its top-up row and
  event), and the balance notifications of the accounts whose available balance changed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from bankrail.core.powers import SandboxPowers
from bankrail.db.pool import Connection
from bankrail.events.outbox import Family, Ordering, new_event
from bankrail.jobs.queue import give_back
from bankrail.ledger.movements import PAYOUT, Ledgers, Movement, Payee, end_hold
from bankrail.merchants.balances import reevaluate_notifications
from bankrail.merchants.service import get_account
from bankrail.payouts.service import (
    ADVANCE_JOB,
    STATE_COLUMNS,
    activity_details,
    v1_event,
    v3_terminal_event,
)
from bankrail.rails.advancement import RailBatch, planned_steps, step_item
from bankrail.rails.incoming import record_internal_credit
from bankrail.rails.lifecycle import Advance, RailState, Stage

__all__ = ["advance_due_payouts", "advance_payout"]

_COLUMNS = ", ".join(f"(c.payout).{name.strip()}" for name in STATE_COLUMNS.split(","))

# How long a batch holds the jobs it took (service time): when its worker dies before writing,
# they run again once this has passed, or at once when the sandbox clock is advanced past it.
# A batch normally writes within milliseconds; one that writes after its lease has ended
# (another batch may have run its jobs) writes only what still holds.
LEASE = timedelta(seconds=10)

# Due payout jobs whose payout this batch can take, leased.
_LEASE = (
    f"SELECT c.job_id, {_COLUMNS}, c.held_ledger_id, c.available_ledger_id"
    " FROM bankrail_lease_transfer_jobs('payout', $1, $2, $3, $4) c"
)


@dataclass
class _Batch:
    """The payout steps of one batch: the rail writer's rows (`RailBatch`), decided here."""

    now: datetime
    powers: SandboxPowers
    rows: RailBatch = field(init=False)
    # A payout's second job in the same lease: given back, not run.
    duplicate_job_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rows = RailBatch(self.now)

    def add(self, row: Any, job_id: int | None, payee_ledger_id: int | None = None) -> Advance:
        """Decide the payout's steps and queue everything they write (its job, when given,
        is deleted with them; an internal transfer credits `payee_ledger_id`)."""
        if job_id is not None:
            self.rows.job_ids.append(job_id)
        plan = planned_steps(row, self.now, self.powers)
        if not plan.steps:
            return plan  # terminal: a duplicate job finds nothing to do
        state = plan.state
        self.rows.steps.append(
            step_item("payout", row, plan, job=ADVANCE_JOB, details=activity_details(state))
        )
        if row["api"] == "v1":
            for step in plan.steps:
                event_type, body, ordering = v1_event(row, step)
                self._event(row, "payouts", (event_type, body), ordering)
        terminal = v3_terminal_event(row, state)
        if terminal is not None:
            self._event(row, "payments", terminal)
        if plan.moves_money:
            self.rows.moves.append(self._movement(row, state, payee_ledger_id))
        return plan

    @staticmethod
    def _movement(row: Any, state: RailState, payee_ledger_id: int | None) -> Movement:
        account = Ledgers(
            row["merchant_account_id"],
            row["currency"],
            row["available_ledger_id"],
            row["held_ledger_id"],
        )
        payee = None
        if row["destination_account_id"] is not None:
            assert payee_ledger_id is not None
            payee = Payee(row["destination_account_id"], payee_ledger_id)
        return end_hold(
            account,
            PAYOUT,
            row["amount_in_minor"],
            row["id"],
            failed=state.stage is Stage.FAILED,
            rail=row["scheme_id"],
            payee=payee,
        )

    def _event(
        self,
        row: Any,
        family: Family,
        typed_body: tuple[str, dict[str, Any]],
        ordering: Ordering | None = None,
    ) -> None:
        event_type, body = typed_body
        self.rows.events.append(
            new_event(
                merchant_id=row["merchant_id"],
                family=family,
                event_type=event_type,
                body=body,
                ordering=ordering,
            )
        )


async def advance_due_payouts(
    conn: Connection, now: datetime, limit: int, *, powers: SandboxPowers
) -> int:
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
    batch = _Batch(now, powers)
    seen: set[uuid.UUID] = set()
    for row in rows:
        if row["id"] in seen:
            batch.duplicate_job_ids.append(row["job_id"])
        else:
            seen.add(row["id"])
            batch.add(row, row["job_id"])
    leased = [row["job_id"] for row in rows]
    try:
        written = await batch.rows.write_leased(conn)
    except Exception:
        await give_back(conn, leased)
        raise
    await give_back(conn, batch.duplicate_job_ids if written else leased)
    return len(batch.rows.job_ids) if written else 0


# One payout for `advance_payout`, locked, with the ledger rows of its account and, for an
# internal transfer, the payee's available ledger row.
_ONE = (
    "SELECT {}, ma.held_ledger_id, ma.available_ledger_id,"
    " d.available_ledger_id AS payee_ledger_id"
    " FROM payouts p JOIN merchant_accounts ma ON ma.id = p.merchant_account_id"
    " LEFT JOIN merchant_accounts d ON d.id = p.destination_account_id"
    " WHERE p.id = $1 FOR UPDATE OF p"
).format(", ".join(f"p.{name.strip()}" for name in STATE_COLUMNS.split(",")))


async def advance_payout(
    conn: Connection, payload: dict[str, Any], now: datetime, *, powers: SandboxPowers
) -> None:
    """Take the payout's next steps (a job handler; runs in the job's transaction, which
    deletes the job).

    Steps that are due at once (authorisation, then submission, then execution when the
    scheme answers without delay) are taken one after the other in this one transaction,
    each with its own events, rather than as one job each: the payout goes through the same
    states and emits the same events, with one commit instead of three. Each step is dated
    a microsecond after the one before (`models.advance`), and its v1 event is delivered only
    after the one before it (`v1_event`'s ordering).
    """
    row = await conn.fetchrow(_ONE, uuid.UUID(payload["payout_id"]))
    if row is None:
        return
    batch = _Batch(now, powers)
    plan = batch.add(row, None, row["payee_ledger_id"])
    if not plan.steps:
        return  # terminal: a duplicate job finds nothing to do
    await batch.rows.write(conn)
    if not plan.moves_money:
        return
    (moved,) = batch.rows.moves
    if moved.available_of is not None:
        await reevaluate_notifications(conn, moved.available_of, now)
    if plan.state.stage is Stage.FAILED or row["destination_account_id"] in (
        None,
        row["merchant_account_id"],  # paid to itself: no money arrived from elsewhere
    ):
        return
    source = await get_account(conn, row["merchant_account_id"])
    payee = await get_account(conn, row["destination_account_id"])
    assert source is not None
    assert payee is not None
    await record_internal_credit(
        conn,
        payee,
        transfer_id=row["id"],
        amount=row["amount_in_minor"],
        remitter_name=source.account_holder_name,
        remitter_iban=source.identifiers.iban,
        reference=row["reference"],
        now=now,
    )
