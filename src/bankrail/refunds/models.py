"""The rules of a refund that need no storage: what may be refunded, and its lifecycle.

A refund travels the rails as a payout does (held at acceptance, authorised, submitted,
then executed or failed), so its lifecycle is the payout's state machine; this module adds
the rules that belong to refunds alone."""

from __future__ import annotations

from dataclasses import dataclass

from bankrail.core.problems import Conflict, invalid_field

__all__ = ["RefundablePayment", "check_refundable"]

REFUNDABLE_STATUS = "payment_settled"


@dataclass(frozen=True)
class RefundablePayment:
    """What a refund's acceptance needs to know of its payment."""

    status: str
    amount_in_minor: int
    refunded_amount_in_minor: int

    @property
    def refundable_amount_in_minor(self) -> int:
        """What is left to refund: the payment less its refunds that have not failed."""
        return self.amount_in_minor - self.refunded_amount_in_minor


def check_refundable(payment: RefundablePayment, amount: int | None) -> int:
    """The amount to refund: `amount`, or when None (no `amount_in_minor`) all that is left
    to refund. Raise Conflict (409) unless the payment has settled or when nothing is left,
    and InvalidParameters (400 on `amount_in_minor`) when `amount` is more than is left."""
    if payment.status != REFUNDABLE_STATUS:
        raise Conflict(f"Only a settled payment can be refunded; this one is {payment.status}.")
    left = payment.refundable_amount_in_minor
    if amount is None:
        if left <= 0:
            raise Conflict("Nothing is left to refund of this payment.")
        return left
    if amount > left:
        raise invalid_field(
            "amount_in_minor",
            f"must be at most {left}, what is left to refund of this payment",
        )
    return amount
