"""The funds a batch of acceptances sets aside, account by account: the one place where a
payout's and a refund's acceptance turn holds into ledger transactions and the balance
notifications they cause.

Each request of a batch sees the holds of the requests before it, so the rules decide on the
balance the account will have, not on the one the batch read. What is decided is written by
the SQL function `bankrail_write_holds` (db/functions/holds.sql), which every batch writer of
acceptances calls, in the transaction that writes the payments the holds are for. Which
ledger accounts a hold moves is `ledger.movements.hold`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bankrail.events import notifications
from bankrail.events.outbox import NewEvent, new_event
from bankrail.ledger.movements import Movement, Purpose, hold
from bankrail.merchants.models import AccountFacts

__all__ = ["BatchHolds"]


@dataclass
class _Running:
    available: int
    held: int
    state: str


@dataclass
class BatchHolds:
    """The holds of one batch for one `purpose`, each seeing those before it, and what they
    cause."""

    purpose: Purpose
    _running: dict[uuid.UUID, _Running] = field(default_factory=dict)
    _holds: list[tuple[Movement, datetime]] = field(default_factory=list)
    _states: dict[uuid.UUID, str] = field(default_factory=dict)
    _events: list[tuple[NewEvent, datetime]] = field(default_factory=list)

    def available(self, account: AccountFacts) -> int:
        """The account's available balance after the batch's holds so far."""
        return self._of(account).available

    def hold(
        self, account: AccountFacts, amount: int, reference_id: uuid.UUID, now: datetime
    ) -> None:
        """Set `amount` aside from the account's available funds for the payment
        `reference_id`, and move its notification state as the new balance asks (a
        `balance_notification` event for each state reached). The caller has checked that
        the available balance covers it."""
        running = self._of(account)
        running.available -= amount
        running.held += amount
        self._holds.append((hold(account, self.purpose, amount, reference_id), now))
        if account.balance_threshold is None:
            return
        step = notifications.next_state(running.state, account.balance_threshold, running.available)
        if step.state != running.state:
            self._states[account.id] = step.state
        running.state = step.state
        if step.notify is not None:
            event = new_event(
                merchant_id=account.merchant_id,
                family="payments",
                event_type=notifications.BALANCE_NOTIFICATION,
                body=notifications.balance_notification(
                    account.id,
                    step.notify,
                    account.balance_threshold,
                    running.available,
                    running.held,
                ),
            )
            self._events.append((event, now))

    def groups(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        """The three jsonb groups `bankrail_write_holds` takes: the holds (each of the kind
        and between the ledger accounts `ledger.movements.hold` named), the accounts' new
        notification states, and the events."""
        holds = []
        for movement, at in self._holds:
            assert isinstance(movement.source, int)
            assert isinstance(movement.destination, int)
            holds.append(
                {
                    "id": str(movement.id),
                    "kind": movement.kind,
                    "reference": str(movement.reference_id),
                    "source": movement.source,
                    "destination": movement.destination,
                    "amount": movement.amount,
                    "at": at,
                }
            )
        states = [
            {"account": str(account), "state": state} for account, state in self._states.items()
        ]
        events = [
            {
                "id": str(event.id),
                "delivery_id": str(event.delivery_id),
                "merchant_id": str(event.merchant_id),
                "family": event.family,
                "type": event.event_type,
                "payload": event.payload.hex(),
                "at": at,
            }
            for event, at in self._events
        ]
        return holds, states, events

    def _of(self, account: AccountFacts) -> _Running:
        running = self._running.get(account.id)
        if running is None:
            running = _Running(account.available, account.held, account.notification_state)
            self._running[account.id] = running
        return running
