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
from bankrail.ledger.movements import Movement, Purpose, columns, hold
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

    def arguments(self) -> list[Any]:
        """The arguments of `bankrail_write_holds` after its first (the transactions' kind,
        `{purpose}_hold`): the holds, the accounts' new notification states, and the
        events."""
        ids, _, references, sources, destinations, _, _, amounts = columns(
            [movement for movement, _ in self._holds]
        )
        events = [event for event, _ in self._events]
        return [
            ids,
            references,
            sources,
            destinations,
            amounts,
            [at for _, at in self._holds],
            list(self._states),
            list(self._states.values()),
            [e.id for e in events],
            [e.delivery_id for e in events],
            [e.merchant_id for e in events],
            [e.family for e in events],
            [e.event_type for e in events],
            [e.payload for e in events],
            [at for _, at in self._events],
        ]

    def _of(self, account: AccountFacts) -> _Running:
        running = self._running.get(account.id)
        if running is None:
            running = _Running(account.available, account.held, account.notification_state)
            self._running[account.id] = running
        return running
