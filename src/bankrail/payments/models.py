"""The pay-in state machine of spec 3.3, in plain Python.

    authorization_required -> authorizing -> authorized -> payment_executed -> payment_settled
              any non-terminal status --fail(reason)--> payment_failed (failure_stage = from)

Only `payment_executed`, `payment_settled` and `payment_failed` are announced by webhook.
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
    EXECUTED = "payment_executed"
    SETTLED = "payment_settled"
    FAILED = "payment_failed"


TERMINAL = frozenset({PaymentStatus.SETTLED, PaymentStatus.FAILED})
ANNOUNCED = frozenset({PaymentStatus.EXECUTED, PaymentStatus.SETTLED, PaymentStatus.FAILED})
# The merchant may cancel until the bank has accepted the payment.
CANCELLABLE = frozenset(
    {PaymentStatus.AUTHORIZATION_REQUIRED, PaymentStatus.AUTHORIZING, PaymentStatus.AUTHORIZED}
)
# A payment must be authorised within the window; later steps are the bank's.
EXPIRABLE = frozenset({PaymentStatus.AUTHORIZATION_REQUIRED, PaymentStatus.AUTHORIZING})


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

    def _require(self, *allowed: PaymentStatus) -> None:
        if self.status not in allowed:
            raise InvalidTransition(f"the payment is {self.status}")

    def start_authorization(self) -> PaymentState:
        """The payer started the journey (authorization-flow call or hosted page)."""
        self._require(PaymentStatus.AUTHORIZATION_REQUIRED)
        return replace(self, status=PaymentStatus.AUTHORIZING)

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
        return replace(
            self,
            status=PaymentStatus.FAILED,
            failed_at=now,
            failure_stage=self.status,
            failure_reason=reason,
        )

    def expires_at(self) -> datetime:
        """When an unauthorised payment fails with `expired`."""
        return self.created_at + AUTHORIZATION_WINDOW
