"""The payout state machine, in plain Python.

One lifecycle serves both APIs:

    pending --authorize--> authorized --submit--> submitted --execute--> executed
       |                       |                      |
       +-----------------------+----------------------+--fail--> failed (with a reason)

v3 shows `pending`, `authorized` (also while submitted), `executed` and `failed`; v1 shows
the same steps as events `payout_authorised`, `payout_submitted`, `payout_settled`, and a
failure as `payout_rejected` (insufficient funds, AML) or `payout_failed` (anything else).

The times of one payout's steps are strictly increasing (created < authorised < submitted <
executed or failed), even when several steps are taken at one instant (one job run, one
transaction): a step is dated `now`, or one microsecond after the payout's previous step when
`now` is not later. Its events are numbered in that order (`event_sequence`), and delivered in it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from bankrail.core.problems import InvalidParameters, NotFound, ProblemError, invalid_field
from bankrail.merchants.models import AccountFacts, AccountIdentifiers

# The least gap between two steps of one payout: PostgreSQL keeps timestamps to the
# microsecond, so steps apart by this much stay apart once stored.
STEP_GAP = timedelta(microseconds=1)


class Stage(StrEnum):
    """Where a payout is in its lifecycle."""

    PENDING = "pending"
    AUTHORIZED = "authorized"
    SUBMITTED = "submitted"
    EXECUTED = "executed"
    FAILED = "failed"


class FailureReason(StrEnum):
    """Why a payout failed, as API v3 names it."""

    INSUFFICIENT_FUNDS = "insufficient_funds"
    BLOCKED = "blocked"
    INVALID_IBAN = "invalid_iban"
    SCHEME_ERROR = "scheme_error"
    SERVER_ERROR = "server_error"


# Reasons that v1 reports as a rejection at acceptance rather than a later failure.
REJECTIONS = frozenset({FailureReason.INSUFFICIENT_FUNDS, FailureReason.BLOCKED})
TERMINAL = frozenset({Stage.EXECUTED, Stage.FAILED})


class InvalidTransition(Exception):
    """The payout cannot take this step from its current stage."""


@dataclass(frozen=True)
class PayoutState:
    """The lifecycle fields of a payout."""

    stage: Stage
    created_at: datetime
    authorized_at: datetime | None = None
    submitted_at: datetime | None = None
    executed_at: datetime | None = None
    failed_at: datetime | None = None
    failure_reason: FailureReason | None = None

    def _require(self, *stages: Stage) -> None:
        if self.stage not in stages:
            raise InvalidTransition(f"a {self.stage} payout cannot take this step")

    @property
    def last_step_at(self) -> datetime:
        """When the payout last changed stage (its creation, before any step)."""
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

    def authorize(self, now: datetime) -> PayoutState:
        """Funds are held and screening passed."""
        self._require(Stage.PENDING)
        return replace(self, stage=Stage.AUTHORIZED, authorized_at=self._step_time(now))

    def submit(self, now: datetime) -> PayoutState:
        """Handed to the scheme."""
        self._require(Stage.AUTHORIZED)
        return replace(self, stage=Stage.SUBMITTED, submitted_at=self._step_time(now))

    def execute(self, now: datetime) -> PayoutState:
        """The scheme paid the beneficiary."""
        self._require(Stage.SUBMITTED)
        return replace(self, stage=Stage.EXECUTED, executed_at=self._step_time(now))

    def fail(self, now: datetime, reason: FailureReason) -> PayoutState:
        """The payout ends unpaid; rejections happen only before authorisation."""
        self._require(Stage.PENDING, Stage.AUTHORIZED, Stage.SUBMITTED)
        if reason in REJECTIONS and self.stage is not Stage.PENDING:
            raise InvalidTransition(f"{reason} can only reject a pending payout")
        return replace(
            self, stage=Stage.FAILED, failed_at=self._step_time(now), failure_reason=reason
        )

    @property
    def step_at(self) -> datetime:
        """When the payout reached its current stage."""
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
        """The place of the event that reports the current stage among the payout's events
        (1 for the first step after creation, 2 for the next...): their delivery order."""
        return sum(
            moment is not None
            for moment in (self.authorized_at, self.submitted_at, self.executed_at, self.failed_at)
        )

    @property
    def holds_funds(self) -> bool:
        """True while money is set aside for this payout (it is taken at acceptance)."""
        return self.stage in (Stage.AUTHORIZED, Stage.SUBMITTED)

    @property
    def v3_status(self) -> str:
        """The status API v3 shows."""
        if self.stage is Stage.SUBMITTED:
            return Stage.AUTHORIZED.value
        return self.stage.value

    @property
    def v1_status(self) -> str:
        """The status API v1 shows in transaction records."""
        return {
            Stage.PENDING: "pending",
            Stage.AUTHORIZED: "authorised",
            Stage.SUBMITTED: "submitted",
            Stage.EXECUTED: "settled",
        }.get(self.stage) or ("rejected" if self.failure_reason in REJECTIONS else "failed")


def v1_reason(reason: FailureReason) -> str:
    """A failure reason as API v1 names it."""
    if reason is FailureReason.BLOCKED:
        return "aml_check_failed"
    if reason is FailureReason.INVALID_IBAN:
        return "scheme_error"
    return reason.value


@dataclass(frozen=True)
class Advance:
    """What one run of a payout's job does: every state it reaches, in order, and what follows."""

    state: PayoutState
    steps: tuple[PayoutState, ...]
    next_step_at: datetime | None
    moves_money: bool


def advance(
    state: PayoutState,
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
    together are dated one microsecond apart (`PayoutState._step_time`), so that each state of
    `steps` is later than the one before it."""
    steps: list[PayoutState] = []
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


# Acceptance: what a payout request becomes, decided from what one read found.

OPEN_LOOP_FIELD = "beneficiary.account_identifier"
CLOSED_LOOP_FIELD = "beneficiary.payment_source_id"


def check_route(currency: str, identifiers: AccountIdentifiers, field: str) -> None:
    """GBP pays a UK account (sort code or GB IBAN); EUR pays a non-GB IBAN (spec 2.4.1)."""
    if identifiers.sort_code is not None:
        if currency != "GBP":
            raise invalid_field(field, "sort code and account number accounts are paid in GBP")
        return
    country = identifiers.iban[:2]
    if currency == "GBP" and country != "GB":
        raise invalid_field(field, "GBP payouts go to a UK account (sort code or GB IBAN)")
    if currency == "EUR" and country == "GB":
        raise invalid_field(field, "EUR payouts go to a non-GB IBAN")
    if currency not in ("GBP", "EUR"):
        raise invalid_field("currency", "payouts are made in GBP or EUR")


def stored_open_loop(
    beneficiary: dict[str, Any], identifiers: AccountIdentifiers
) -> dict[str, Any]:
    """The beneficiary as kept on an open-loop payout."""
    stored = {k: v for k, v in beneficiary.items() if v is not None}
    if stored["account_identifier"]["type"] == "iban":
        stored["account_identifier"] = {"type": "iban", "iban": identifiers.iban}
    stored["account_identifiers"] = identifiers.as_list()
    return stored


@dataclass(frozen=True)
class PayoutRequest:
    """A request to create a payout, parsed and authenticated, from either API.

    `account_id` names the paying account (v3); without it the merchant's first account in
    `currency` pays (v1). `identifiers` are the open-loop payee's, normalised, or the problem
    that normalising them raised (decided in the rules' order); None for a closed-loop
    `payment_source` beneficiary, which the source's own identifiers route.
    """

    api: str
    merchant_id: uuid.UUID
    account_id: uuid.UUID | None
    currency: str
    amount: int
    beneficiary: dict[str, Any]
    identifiers: AccountIdentifiers | ProblemError | None
    field: str
    reference: str
    now: datetime
    transaction_id: uuid.UUID | None = None
    context_code: str | None = None
    metadata: dict[str, str] | None = None

    @property
    def closed_loop(self) -> bool:
        """A payout back to a payment source the user paid from."""
        return bool(self.beneficiary["type"] == "payment_source")

    @property
    def payee_identifiers(self) -> AccountIdentifiers | None:
        """The identifiers to look the payee up by (open loop, when valid)."""
        return self.identifiers if isinstance(self.identifiers, AccountIdentifiers) else None


@dataclass(frozen=True)
class SourceFacts:
    """A payment source the user paid into the account from (closed loop)."""

    id: uuid.UUID
    user_id: str
    account_holder_name: str
    identifiers: AccountIdentifiers


@dataclass(frozen=True)
class PayoutFacts:
    """What the acceptance read found for one request, besides its idempotency key."""

    account: AccountFacts | None
    source: SourceFacts | None
    # The account at Bankrail that the payee's identifiers name, and its currency.
    payee: tuple[uuid.UUID, str] | None
    screened: bool


@dataclass(frozen=True)
class NewPayout:
    """An accepted payout, as it is to be written."""

    id: uuid.UUID
    account: AccountFacts
    name: str
    identifiers: AccountIdentifiers
    beneficiary: dict[str, Any]
    destination_account_id: uuid.UUID | None
    pending_failure: FailureReason | None

    @property
    def holds_funds(self) -> bool:
        """True when its funds are held at acceptance (it fails later otherwise)."""
        return self.pending_failure is None


def decide_payout(
    request: PayoutRequest, facts: PayoutFacts, available: int, payout_id: uuid.UUID
) -> NewPayout:
    """The payout a request creates, given what the read found and the account's available
    funds left by the requests accepted before it; raises ProblemError for a request that
    creates nothing (in the order the rules are checked). Insufficient funds and a screened
    beneficiary are not errors: the payout is accepted and fails asynchronously."""
    account = facts.account
    if account is None:
        if request.account_id is not None:
            raise NotFound(f"Merchant account {request.account_id} not found.")
        raise invalid_field("currency", f"the merchant has no {request.currency} account")
    if request.currency != account.currency:
        raise invalid_field(
            "currency", f"must be {account.currency}, the merchant account's currency"
        )
    if request.closed_loop:
        source = facts.source
        if source is None:
            raise InvalidParameters(
                "The payment source did not pay into this merchant account for this user.",
                {
                    CLOSED_LOOP_FIELD: [
                        "no settled payment from this user and source into this merchant account"
                    ]
                },
            )
        identifiers = source.identifiers
        name = source.account_holder_name
        beneficiary: dict[str, Any] = {
            "type": "payment_source",
            "user_id": source.user_id,
            "payment_source_id": str(source.id),
            "reference": request.beneficiary["reference"],
            "account_holder_name": name,
            "account_identifiers": identifiers.as_list(),
        }
    else:
        if isinstance(request.identifiers, ProblemError):
            raise request.identifiers
        assert request.identifiers is not None
        identifiers = request.identifiers
        name = request.beneficiary["account_holder_name"]
        beneficiary = stored_open_loop(request.beneficiary, identifiers)
    check_route(account.currency, identifiers, request.field)
    payee = facts.payee if facts.payee and facts.payee[1] == account.currency else None
    if payee is not None and payee[0] == account.id:
        raise invalid_field(request.field, "a merchant account cannot pay itself")
    pending_failure: FailureReason | None = None
    if facts.screened:
        pending_failure = FailureReason.BLOCKED
    elif available < request.amount:
        pending_failure = FailureReason.INSUFFICIENT_FUNDS
    return NewPayout(
        id=payout_id,
        account=account,
        name=name,
        identifiers=identifiers,
        beneficiary=beneficiary,
        destination_account_id=payee[0] if payee else None,
        pending_failure=pending_failure,
    )
