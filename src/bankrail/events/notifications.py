"""Low-balance notifications (spec 3.4, docs/api.md): a small state machine per account.

normal -> approaching_threshold at <= 1.5 T; -> below_threshold at <= T (one notification for
the state reached, even when both bounds are crossed at once); from below_threshold, a balance
>= 2 T sends `recovered` and the state returns to normal. From approaching_threshold, a
balance >= 2 T returns quietly to normal (the spec defines no notification for it), so that a
later fall is announced again. `balance_notification` is the body of the event announcing a
state reached, whoever writes it (merchants/balances.py after a movement, merchants/batch_holds.py
for a batch of holds).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

NORMAL = "normal"
APPROACHING = "approaching_threshold"
BELOW = "below_threshold"
RECOVERED = "recovered"


@dataclass(frozen=True)
class Transition:
    """The state after a balance change, and the notification to send (if any)."""

    state: str
    notify: str | None


def next_state(state: str, threshold: int | None, balance: int) -> Transition:
    """Where the notification state goes when the balance becomes `balance`."""
    if threshold is None:
        return Transition(NORMAL, None)
    if state == BELOW:
        if balance >= 2 * threshold:
            return Transition(NORMAL, RECOVERED)
        return Transition(BELOW, None)
    if balance <= threshold:
        return Transition(BELOW, BELOW)
    if state == NORMAL and 2 * balance <= 3 * threshold:
        return Transition(APPROACHING, APPROACHING)
    if state == APPROACHING and balance >= 2 * threshold:
        return Transition(NORMAL, None)
    return Transition(state, None)


BALANCE_NOTIFICATION = "balance_notification"


def balance_notification(
    account_id: uuid.UUID, notify: str, threshold: int, available: int, held: int
) -> dict[str, Any]:
    """The body of the `balance_notification` event (payments family) that announces the
    state `notify` reached by the account, with the balances that reached it: the one shape
    every writer of the event uses."""
    return {
        "merchant_account_id": str(account_id),
        "status": notify,
        "threshold_in_minor": threshold,
        "current_balance_in_minor": available + held,
        "available_balance_in_minor": available,
    }
