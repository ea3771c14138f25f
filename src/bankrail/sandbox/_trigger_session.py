"""The HTTP plumbing of `bankrail trigger`: the operator client and the merchant client it
registers for the purpose (`Session`), waiting for an event's webhook delivery to be
recorded, and what a trigger made (`Triggered`) or why it failed (`TriggerError`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bankrail.testing import BankrailAuth, generate_key_pem, public_key_pem

__all__ = ["Session", "TriggerError", "Triggered"]


class TriggerError(RuntimeError):
    """The event could not be made to happen; the message says why."""


@dataclass
class Triggered:
    """What a trigger made: the objects (`created`) and the event's delivery."""

    event: str
    merchant_id: str
    created: dict[str, Any]
    delivery: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The machine-readable form (`--json`)."""
        return {
            "event": self.event,
            "merchant_id": self.merchant_id,
            "created": self.created,
            "event_id": self.delivery.get("event_id"),
            "delivery": {k: v for k, v in self.delivery.items() if k != "attempts"},
        }

    def describe(self) -> str:
        """The human-readable form."""
        lines = [f"Triggered {self.event} for merchant {self.merchant_id}"]
        lines += [f"  {name:<22}{value}" for name, value in self.created.items()]
        lines.append(f"  {'event_id':<22}{self.delivery.get('event_id')}")
        uri = self.delivery.get("uri")
        where = f"to {uri}" if uri else "the merchant has no webhook URI"
        lines.append(
            f"  {'webhook delivery':<22}{self.delivery.get('id')} "
            f"({self.delivery.get('status')}, {where})"
        )
        return "\n".join(lines)


class Session:
    """The operator client and a merchant client registered for this trigger."""

    def __init__(self, url: str, admin_token: str, merchant_id: str) -> None:
        self.url = url
        self.merchant_id = merchant_id
        self.operator = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=30
        )
        self.merchant: httpx.Client | None = None
        self.accounts: dict[str, dict[str, Any]] = {}

    def close(self) -> None:
        """Close both clients."""
        self.operator.close()
        if self.merchant is not None:
            self.merchant.close()

    def ok(self, answer: httpx.Response, *codes: int) -> Any:
        """The JSON body of `answer` (None when empty or not JSON, as the mock bank's plain
        text); TriggerError unless its status is one of `codes`."""
        if answer.status_code not in codes:
            raise TriggerError(
                f"{answer.request.method} {answer.request.url.path} answered "
                f"{answer.status_code}: {answer.text}"
            )
        json_body = "json" in answer.headers.get("content-type", "")
        return answer.json() if answer.content and json_body else None

    def register(self) -> None:
        """A client and a signing key for the merchant, and its accounts."""
        base = f"/admin/merchants/{self.merchant_id}"
        client = self.ok(self.operator.post(f"{base}/clients", json={}), 201)
        pem = generate_key_pem()
        key = self.ok(
            self.operator.post(
                f"{base}/signing-keys", json={"public_key_pem": public_key_pem(pem)}
            ),
            201,
        )
        auth = BankrailAuth(client["client_id"], client["client_secret"], key["kid"], pem)
        self.merchant = httpx.Client(base_url=self.url, auth=auth, timeout=30)
        items = self.ok(self.merchant.get("/v3/merchant-accounts"), 200)["items"]
        for account in items:
            self.accounts.setdefault(account["currency"], account)
        if not self.accounts:
            raise TriggerError(f"merchant {self.merchant_id} has no merchant account")

    @property
    def client(self) -> httpx.Client:
        """The merchant client (once `register` has run)."""
        assert self.merchant is not None
        return self.merchant

    def account(self, *preferred: str) -> dict[str, Any]:
        """The merchant's account in the first of the `preferred` currencies it has."""
        for currency in preferred:
            if currency in self.accounts:
                return self.accounts[currency]
        raise TriggerError(f"merchant {self.merchant_id} has no {' or '.join(preferred)} account")

    def top_up(self, account: dict[str, Any], amount: int, reference: str) -> dict[str, Any]:
        """A sandbox bank transfer of `amount` into `account`."""
        iban = next(i["iban"] for i in account["account_identifiers"] if i["type"] == "iban")
        body = {
            "iban": iban,
            "amount_in_minor": amount,
            "currency": account["currency"],
            "remitter_name": "Bankrail Trigger",
            "reference": reference,
        }
        made: dict[str, Any] = self.ok(
            self.operator.post("/sandbox/bank-transfers", json=body), 201
        )
        return made

    def available(self, account: dict[str, Any]) -> int:
        """The available balance of `account` now."""
        found = self.ok(self.client.get(f"/v3/merchant-accounts/{account['id']}"), 200)
        return int(found["available_balance_in_minor"])

    def wait_event(
        self, event_type: str, match: Callable[[dict[str, Any]], bool], timeout: float
    ) -> dict[str, Any]:
        """The delivery of the merchant's event of this type whose payload `match`es, once
        it is recorded (GET /admin/webhook-deliveries)."""
        seen: set[str] = set()
        deadline = time.monotonic() + timeout
        while True:
            page = self.ok(
                self.operator.get(
                    "/admin/webhook-deliveries",
                    params={"merchant_id": self.merchant_id, "event_type": event_type, "limit": 50},
                ),
                200,
            )
            for item in page["items"]:
                if item["id"] in seen:
                    continue
                seen.add(item["id"])
                detail = self.ok(self.operator.get(f"/admin/webhook-deliveries/{item['id']}"), 200)
                if match(json.loads(detail["payload"])):
                    return dict(detail)
            if time.monotonic() >= deadline:
                raise TriggerError(f"no {event_type} event was recorded within {timeout}s")
            time.sleep(0.1)
