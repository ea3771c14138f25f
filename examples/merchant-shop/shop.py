"""A small shop's money flows on Bankrail: customers deposit into a wallet by paying in from
their bank, and withdraw back to the account they paid from (a closed-loop payout).

The shop keeps its state in memory to stay short; a real one keeps it in its database, in the
same transaction as the `event_id` it records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

PROVIDERS = {"GBP": "mock-payments-gb-redirect", "EUR": "mock-payments-de-redirect"}


class ShopError(Exception):
    """A request the shop refuses (e.g. a withdrawal larger than the wallet)."""


@dataclass
class Withdrawal:
    """A payout back to a customer: `status` is `pending`, `executed` or `failed`."""

    user_id: str
    amount: int
    status: str = "pending"


@dataclass
class Shop:
    """Wallets of customers, credited when a deposit settles and debited when a withdrawal is
    requested (given back if the payout fails).

    `client` is an `httpx.Client` on Bankrail authenticated as the merchant (for example
    with `bankrail.testing.BankrailAuth`); `account_id` the merchant account in `currency`.
    """

    client: httpx.Client
    account_id: str
    currency: str = "GBP"
    return_uri: str = "https://shop.example/deposits/done"
    wallets: dict[str, int] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    deposits: dict[str, str] = field(default_factory=dict)  # payment id -> user id
    withdrawals: dict[str, Withdrawal] = field(default_factory=dict)  # payout id -> it
    handled: set[str] = field(default_factory=set)  # event ids

    def start_deposit(self, user_id: str, amount: int) -> tuple[str, str]:
        """Create a pay-in for the customer; returns its id and the bank page to send the
        customer to."""
        created = self.client.post(
            "/v3/payments",
            json={
                "amount_in_minor": amount,
                "currency": self.currency,
                "payment_method": {
                    "type": "bank_transfer",
                    "provider_selection": {
                        "type": "preselected",
                        "provider_id": PROVIDERS[self.currency],
                    },
                    "beneficiary": {
                        "type": "merchant_account",
                        "merchant_account_id": self.account_id,
                    },
                },
                "user": {"id": user_id},
            },
        )
        created.raise_for_status()
        payment_id = str(created.json()["id"])
        flow = self.client.post(
            f"/v3/payments/{payment_id}/authorization-flow",
            json={"provider_selection": {}, "redirect": {"return_uri": self.return_uri}},
        )
        flow.raise_for_status()
        self.deposits[payment_id] = user_id
        return payment_id, str(flow.json()["authorization_flow"]["actions"]["next"]["uri"])

    def withdraw(self, user_id: str, amount: int, reference: str = "withdrawal") -> str:
        """Pay `amount` from the wallet back to the account the customer paid from."""
        if amount <= 0 or self.wallets.get(user_id, 0) < amount:
            raise ShopError("not enough in the wallet")
        source = self.sources.get(user_id)
        if source is None:
            raise ShopError("no settled deposit to pay back to")
        answer = self.client.post(
            "/v3/payouts",
            json={
                "merchant_account_id": self.account_id,
                "amount_in_minor": amount,
                "currency": self.currency,
                "beneficiary": {
                    "type": "payment_source",
                    "user_id": user_id,
                    "payment_source_id": source,
                    "reference": reference,
                },
            },
        )
        answer.raise_for_status()
        payout_id = str(answer.json()["id"])
        self.wallets[user_id] -= amount
        self.withdrawals[payout_id] = Withdrawal(user_id, amount)
        return payout_id

    def handle_webhook(self, event: dict[str, Any]) -> bool:
        """Apply a (verified) webhook once: a retried or replayed event, which carries the same
        `event_id`, changes nothing. Returns whether it was applied."""
        if event["event_id"] in self.handled:
            return False
        kind = event.get("type")
        if kind == "payment_settled" and event["payment_id"] in self.deposits:
            user_id = self.deposits[event["payment_id"]]
            payment = self.client.get(f"/v3/payments/{event['payment_id']}")
            payment.raise_for_status()
            amount = int(payment.json()["amount_in_minor"])
            self.wallets[user_id] = self.wallets.get(user_id, 0) + amount
            self.sources[user_id] = event["payment_source"]["id"]
        elif kind == "payout_executed" and event["payout_id"] in self.withdrawals:
            self.withdrawals[event["payout_id"]].status = "executed"
        elif kind == "payout_failed" and event["payout_id"] in self.withdrawals:
            withdrawal = self.withdrawals[event["payout_id"]]
            withdrawal.status = "failed"
            self.wallets[withdrawal.user_id] += withdrawal.amount
        self.handled.add(event["event_id"])
        return True
