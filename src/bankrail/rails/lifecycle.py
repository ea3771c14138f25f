"""The lifecycle of a transfer on the rails, in plain Python: payouts and refunds follow it.

    pending --authorize--> authorized --submit--> submitted --execute--> executed
       |                       |                      |
       +-----------------------+----------------------+--fail--> failed (with a reason)

v3 shows `pending`, `authorized` (also while submitted), `executed` and `failed`. How API v1
names the same steps is the payouts' vocabulary (`payouts.models`).

The times of one transfer's steps are strictly increasing (created < authorised < submitted <
executed or failed), even when several steps are taken at one instant (one job run, one
transaction): a step is dated `now`, or one microsecond after the transfer's previous step when
`now` is not later. Its events are numbered in that order (`event_sequence`), and delivered in it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

# The least gap between two steps of one transfer: PostgreSQL keeps timestamps to the
# microsecond, so steps apart by this much stay apart once stored.
STEP_GAP = timedelta(microseconds=1)


class Stage(StrEnum):
    """Where a transfer is in its lifecycle."""

    PENDING = "pending"
    AUTHORIZED = "authorized"
    SUBMITTED = "submitted"
    EXECUTED = "executed"
    FAILED = "failed"


class FailureReason(StrEnum):
    """Why a transfer failed, as API v3 names it."""

    INSUFFICIENT_FUNDS = "insufficient_funds"
    BLOCKED = "blocked"
    INVALID_IBAN = "invalid_iban"
    SCHEME_ERROR = "scheme_error"
    SERVER_ERROR = "server_error"
    # A verified payout's payee did not prove the account (payouts.models, docs/api.md).
    AUTHORIZATION_FAILED = "authorization_failed"
    NAME_VERIFICATION_FAILED = "name_verification_failed"
    TRANSACTION_VERIFICATION_FAILED = "transaction_verification_failed"
    # A verified payout's payee did not act before its authorisation window closed.
    EXPIRED = "expired"


# Reasons that v1 reports as a rejection at acceptance rather than a later failure.
REJECTIONS = frozenset({FailureReason.INSUFFICIENT_FUNDS, FailureReason.BLOCKED})
TERMINAL = frozenset({Stage.EXECUTED, Stage.FAILED})


class InvalidTransition(Exception):
    """The transfer cannot take this step from its current stage."""


@dataclass(frozen=True)
class RailState:
    """The lifecycle fields of a transfer (a payout or a refund)."""

    stage: Stage
    created_at: datetime
    authorized_at: datetime | None = None
    submitted_at: datetime | None = None
    executed_at: datetime | None = None
    failed_at: datetime | None = None
    failure_reason: FailureReason | None = None

    def _require(self, *stages: Stage) -> None:
        if self.stage not in stages:
            raise InvalidTransition(f"a {self.stage} transfer cannot take this step")

    @property
    def last_step_at(self) -> datetime:
        """When the transfer last changed stage (its creation, before any step)."""
        return max(
            moment
            for moment in (
                self.created_at,
                self.authorized_at,
                self.submitted_at,
                self.executed_at,
                self.failed_at,
            )
            if moment is not None
        )

    def _step_time(self, now: datetime) -> datetime:
        """The time of a step taken at `now`: strictly after the previous step."""
        return max(now, self.last_step_at + STEP_GAP)

    def authorize(self, now: datetime) -> RailState:
        """Funds are held and screening passed."""
        self._require(Stage.PENDING)
        return replace(self, stage=Stage.AUTHORIZED, authorized_at=self._step_time(now))

    def submit(self, now: datetime) -> RailState:
        """Handed to the scheme."""
        self._require(Stage.AUTHORIZED)
        return replace(self, stage=Stage.SUBMITTED, submitted_at=self._step_time(now))

    def execute(self, now: datetime) -> RailState:
        """The scheme paid the beneficiary."""
        self._require(Stage.SUBMITTED)
        return replace(self, stage=Stage.EXECUTED, executed_at=self._step_time(now))

    def fail(self, now: datetime, reason: FailureReason) -> RailState:
        """The transfer ends unpaid; rejections happen only before authorisation."""
        self._require(Stage.PENDING, Stage.AUTHORIZED, Stage.SUBMITTED)
        if reason in REJECTIONS and self.stage is not Stage.PENDING:
            raise InvalidTransition(f"{reason} can only reject a pending transfer")
        return replace(
            self, stage=Stage.FAILED, failed_at=self._step_time(now), failure_reason=reason
        )

    @property
    def step_at(self) -> datetime:
        """When the transfer reached its current stage."""
        moment = {
            Stage.PENDING: self.created_at,
            Stage.AUTHORIZED: self.authorized_at,
            Stage.SUBMITTED: self.submitted_at,
            Stage.EXECUTED: self.executed_at,
            Stage.FAILED: self.failed_at,
        }[self.stage]
        assert moment is not None
        return moment

    @property
    def event_sequence(self) -> int:
        """The place of the event that reports the current stage among the transfer's events
        (1 for the first step after creation, 2 for the next...): their delivery order."""
        return sum(
            moment is not None
            for moment in (self.authorized_at, self.submitted_at, self.executed_at, self.failed_at)
        )

    @property
    def holds_funds(self) -> bool:
        """True while money is set aside for this transfer (it is taken at acceptance)."""
        return self.stage in (Stage.AUTHORIZED, Stage.SUBMITTED)

    @property
    def v3_status(self) -> str:
        """The status API v3 shows."""
        if self.stage is Stage.SUBMITTED:
            return Stage.AUTHORIZED.value
        return self.stage.value


@dataclass(frozen=True)
class Advance:
    """What one run of a transfer's job does: every state it reaches, in order, and what follows."""

    state: RailState
    steps: tuple[RailState, ...]
    next_step_at: datetime | None
    moves_money: bool


def advance(
    state: RailState,
    now: datetime,
    *,
    pending_failure: FailureReason | None,
    scheme_failure: FailureReason | None,
    execution_delay: timedelta,
) -> Advance:
    """Take every step that is due at `now`: authorisation (or the rejection decided at
    acceptance), submission, and execution (or the scheme's failure) once the scheme's delay
    has passed. `moves_money` is true when the held funds leave or come back; `next_step_at`
    is when the job must run again, or None when nothing is left to do now. Steps taken
    together are dated one microsecond apart (`RailState._step_time`), so that each state of
    `steps` is later than the one before it."""
    steps: list[RailState] = []
    next_step_at: datetime | None = None if state.stage in TERMINAL else now
    moves_money = False
    while next_step_at is not None and next_step_at <= now:
        next_step_at = None
        if state.stage is Stage.PENDING:
            if pending_failure is not None:
                state = state.fail(now, pending_failure)
            else:
                state = state.authorize(now)
                next_step_at = now
        elif state.stage is Stage.AUTHORIZED:
            state = state.submit(now)
            next_step_at = now + execution_delay
        else:  # SUBMITTED
            moves_money = True
            if scheme_failure is not None:
                state = state.fail(now, scheme_failure)
            else:
                state = state.execute(now)
        steps.append(state)
    return Advance(state, tuple(steps), next_step_at, moves_money)


def state_of(row: Any) -> RailState:
    """The lifecycle state of a payouts or refunds row (they share the lifecycle's columns)."""
    return RailState(
        stage=Stage(row["stage"]),
        created_at=row["created_at"],
        authorized_at=row["authorized_at"],
        submitted_at=row["submitted_at"],
        executed_at=row["executed_at"],
        failed_at=row["failed_at"],
        failure_reason=FailureReason(row["failure_reason"]) if row["failure_reason"] else None,
    )
