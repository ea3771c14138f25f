"""The pay-in state machine of spec 3.3, in plain Python.

    authorization_required -> authorizing -> authorized -> payment_executed -> payment_settled
              any non-terminal status --fail(reason)--> payment_failed (failure_stage = from)

A payment created with `retry` (fidelity P8) whose authorisation the bank rejects goes to
`attempt_failed` instead (failure_stage `authorizing`, reason `authorization_failed`):

    authorizing --reject_authorization--> attempt_failed --start_authorization--> authorizing
    attempt_failed --expire (the retry window is over)--> payment_failed (authorization_failed)

`attempt_failed` is not terminal. The retry window is the authorisation window: 15 minutes
from creation on the service clock, the same expiry job ends both. Only `payment_executed`,
`payment_settled` and `payment_failed` are announced by webhook.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

AUTHORIZATION_WINDOW = timedelta(minutes=15)


class PaymentStatus(StrEnum):
    """The statuses as the spec names them."""

    AUTHORIZATION_REQUIRED = "authorization_required"
    AUTHORIZING = "authorizing"
    AUTHORIZED = "authorized"
    ATTEMPT_FAILED = "attempt_failed"
    EXECUTED = "payment_executed"
    SETTLED = "payment_settled"
    FAILED = "payment_failed"


TERMINAL = frozenset({PaymentStatus.SETTLED, PaymentStatus.FAILED})
ANNOUNCED = frozenset({PaymentStatus.EXECUTED, PaymentStatus.SETTLED, PaymentStatus.FAILED})
# The merchant may cancel until the bank has accepted the payment.
CANCELLABLE = frozenset(
    {
        PaymentStatus.AUTHORIZATION_REQUIRED,
        PaymentStatus.AUTHORIZING,
        PaymentStatus.ATTEMPT_FAILED,
        PaymentStatus.AUTHORIZED,
    }
)
# A payment must be authorised within the window; later steps are the bank's.
EXPIRABLE = frozenset(
    {
        PaymentStatus.AUTHORIZATION_REQUIRED,
        PaymentStatus.AUTHORIZING,
        PaymentStatus.ATTEMPT_FAILED,
    }
)
# Where the payer may start (again) the authorisation journey.
STARTABLE = frozenset({PaymentStatus.AUTHORIZATION_REQUIRED, PaymentStatus.ATTEMPT_FAILED})


class FailureReason(StrEnum):
    """Why a payment failed."""

    AUTHORIZATION_FAILED = "authorization_failed"
    PROVIDER_REJECTED = "provider_rejected"
    CANCELED = "canceled"
    # The payer cancelled at the bank (the mock bank's Cancel), as the real sandbox reports it.
    NOT_AUTHORIZED = "not_authorized"
    # What Cancel recorded before round 3; payments failed then still carry it.
    USER_CANCELED_AT_PROVIDER = "user_canceled_at_provider"
    EXPIRED = "expired"
    # A payment on a mandate: outside the mandate's constraints, or over the payer's balance.
    CONSTRAINT_VIOLATION = "constraint_violation"
    INSUFFICIENT_FUNDS = "insufficient_funds"


class InvalidTransition(Exception):
    """The payment cannot take this step from its current status."""


@dataclass(frozen=True)
class PaymentState:
    """The lifecycle fields of a payment."""

    status: PaymentStatus
    created_at: datetime
    authorized_at: datetime | None = None
    executed_at: datetime | None = None
    settled_at: datetime | None = None
    failed_at: datetime | None = None
    failure_stage: PaymentStatus | None = None
    failure_reason: FailureReason | None = None
    # Created with `payment_method.retry`: a rejected authorisation may be tried again.
    retry: bool = False

    def _require(self, *allowed: PaymentStatus) -> None:
        if self.status not in allowed:
            raise InvalidTransition(f"the payment is {self.status}")

    def start_authorization(self) -> PaymentState:
        """The payer started the journey (authorization-flow call or hosted page), the first
        time or again after a failed attempt (which leaves no failure fields behind)."""
        self._require(*STARTABLE)
        return replace(
            self,
            status=PaymentStatus.AUTHORIZING,
            failed_at=None,
            failure_stage=None,
            failure_reason=None,
        )

    def reject_authorization(self, now: datetime) -> PaymentState:
        """The bank refused the payer's authorisation: `attempt_failed` for a payment with
        `retry`, else `payment_failed`; both with reason `authorization_failed`."""
        self._require(PaymentStatus.AUTHORIZING)
        if not self.retry:
            return self.fail(now, FailureReason.AUTHORIZATION_FAILED)
        return replace(
            self,
            status=PaymentStatus.ATTEMPT_FAILED,
            failed_at=now,
            failure_stage=PaymentStatus.AUTHORIZING,
            failure_reason=FailureReason.AUTHORIZATION_FAILED,
        )

    def expire(self, now: datetime) -> PaymentState:
        """The authorisation (and retry) window is over: an unauthorised payment fails with
        `expired`, one whose last attempt failed with that attempt's failure."""
        self._require(*EXPIRABLE)
        if self.status is PaymentStatus.ATTEMPT_FAILED:
            return replace(
                self,
                status=PaymentStatus.FAILED,
                failed_at=now,
                failure_stage=PaymentStatus.AUTHORIZING,
                failure_reason=self.failure_reason or FailureReason.AUTHORIZATION_FAILED,
            )
        return self.fail(now, FailureReason.EXPIRED)

    def authorize(self, now: datetime) -> PaymentState:
        """The payer completed the journey at the bank."""
        self._require(PaymentStatus.AUTHORIZING)
        return replace(self, status=PaymentStatus.AUTHORIZED, authorized_at=now)

    def execute(self, now: datetime) -> PaymentState:
        """The bank accepted the payment (it may still not settle)."""
        self._require(PaymentStatus.AUTHORIZED)
        return replace(self, status=PaymentStatus.EXECUTED, executed_at=now)

    def settle(self, now: datetime) -> PaymentState:
        """The funds reached the merchant account."""
        self._require(PaymentStatus.EXECUTED)
        return replace(self, status=PaymentStatus.SETTLED, settled_at=now)

    def fail(self, now: datetime, reason: FailureReason) -> PaymentState:
        """The payment stops; `failure_stage` records the status it stopped at."""
        if self.status in TERMINAL:
            raise InvalidTransition(f"the payment is {self.status}")
        # A payment between attempts stopped where its last attempt did.
        stage = (
            PaymentStatus.AUTHORIZING
            if self.status is PaymentStatus.ATTEMPT_FAILED
            else self.status
        )
        return replace(
            self,
            status=PaymentStatus.FAILED,
            failed_at=now,
            failure_stage=stage,
            failure_reason=reason,
        )

    def expires_at(self) -> datetime:
        """When an unauthorised payment fails with `expired`."""
        return self.created_at + AUTHORIZATION_WINDOW
