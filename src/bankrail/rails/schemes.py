"""The simulated payout schemes: which scheme carries a payout, and how long each step takes.

Sandbox outcomes are chosen through the beneficiary reference, so that a merchant can drive
every path from an ordinary request (case-insensitive tokens, anywhere in the reference):

| token                | effect                                                  |
|----------------------|---------------------------------------------------------|
| `fail:scheme_error`  | the scheme rejects the payout after submission          |
| `fail:server_error`  | an internal error fails the payout after submission     |
| `fail:invalid_iban`  | the beneficiary bank rejects the account (v1: scheme_error) |
| `delay:N`            | execution waits N seconds of service time (at most 30 days) |

Without a token the payout succeeds at once. Only a service with the `outcome_tokens` sandbox
power reads them (`core.powers`): in production a reference is only a reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bankrail.core.powers import SandboxPowers
from bankrail.rails.lifecycle import FailureReason

INTERNAL_TRANSFER = "internal_transfer"
FASTER_PAYMENTS = "faster_payments_service"
SEPA_INSTANT = "sepa_credit_transfer_instant"
SEPA = "sepa_credit_transfer"

# The schemes that carry payouts out of Bankrail, per currency, instant first.
PAYOUT_SCHEMES: dict[str, tuple[str, ...]] = {
    "GBP": (FASTER_PAYMENTS,),
    "EUR": (SEPA_INSTANT, SEPA),
}
INSTANT_SCHEMES = frozenset({FASTER_PAYMENTS, SEPA_INSTANT})

_FAIL = re.compile(r"fail:(scheme_error|server_error|invalid_iban)", re.IGNORECASE)
_DELAY = re.compile(r"delay:([0-9]+)", re.IGNORECASE)
MAX_DELAY_SECONDS = 30 * 86400


def scheme_for(currency: str, internal: bool) -> str:
    """`internal_transfer` between Bankrail accounts, else the currency's instant scheme."""
    if internal:
        return INTERNAL_TRANSFER
    return FASTER_PAYMENTS if currency == "GBP" else SEPA_INSTANT


class SchemeUnavailable(ValueError):
    """A scheme selection that no scheme of the payout's currency satisfies."""


def choose_scheme(currency: str, internal: bool, selection: dict[str, Any] | None) -> str:
    """The scheme a payout runs on, given the merchant's `scheme_selection` (None: instant
    preferred). A payee held at Bankrail is paid by `internal_transfer` whatever was selected
    (the money never leaves the ledger); otherwise `instant_only` and `instant_preferred`
    take the currency's instant scheme (every sandbox payee is reachable instantly), and
    `preselected` takes the named scheme when the currency has it. Raises SchemeUnavailable
    for a preselected scheme the currency lacks."""
    schemes = PAYOUT_SCHEMES.get(currency, ())
    if selection is not None and selection["type"] == "preselected":
        chosen = str(selection["scheme_id"])
        if chosen not in schemes:
            names = ", ".join(schemes) or "none"
            raise SchemeUnavailable(f"{currency} payouts run on {names}, not {chosen}")
        return INTERNAL_TRANSFER if internal else chosen
    return scheme_for(currency, internal)


@dataclass(frozen=True)
class SandboxOutcome:
    """What the simulated scheme will do with a payout."""

    failure: FailureReason | None
    execution_delay_seconds: int


def sandbox_outcome(
    reference: str, powers: SandboxPowers, default_delay_seconds: int = 0
) -> SandboxOutcome:
    """Read the sandbox tokens of a beneficiary reference; without the `outcome_tokens`
    power, none: success after the default delay."""
    if not powers.outcome_tokens:
        return SandboxOutcome(failure=None, execution_delay_seconds=default_delay_seconds)
    failure = _FAIL.search(reference)
    delay = _DELAY.search(reference)
    return SandboxOutcome(
        failure=FailureReason(failure.group(1).lower()) if failure else None,
        execution_delay_seconds=min(int(delay.group(1)), MAX_DELAY_SECONDS)
        if delay
        else default_delay_seconds,
    )
