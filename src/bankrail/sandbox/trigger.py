"""`bankrail trigger <event>`: make a running Bankrail send a webhook by creating the real
objects that lead to it, over HTTP only (the operator API, the sandbox, the merchant API with
a client and signing key registered for the purpose, and the headless mock bank)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bankrail.testing import (
    BankrailAuth,
    OperatorError,
    generate_key_pem,
    mock_bank_pay_in,
    public_key_pem,
)

__all__ = ["EVENTS", "TriggerError", "Triggered", "default_merchant_id", "trigger"]

DEMO_CREDENTIALS = "demo-credentials.json"

# Payees of the payouts made here (valid identifiers outside Bankrail).
_SORT_CODE = {
    "type": "sort_code_account_number",
    "sort_code": "040004",
    "account_number": "12345678",
}
_IBANS = {"GBP": "GB29NWBK60161331926819", "EUR": "DE89370400440532013000"}
_AMOUNT = 1_000


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


class _Session:
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
        self.operator.close()
        if self.merchant is not None:
            self.merchant.close()

    def ok(self, answer: httpx.Response, *codes: int) -> Any:
        if answer.status_code not in codes:
            raise TriggerError(
                f"{answer.request.method} {answer.request.url.path} answered "
                f"{answer.status_code}: {answer.text}"
            )
        return answer.json() if answer.content else None

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
        assert self.merchant is not None
        return self.merchant

    def account(self, *preferred: str) -> dict[str, Any]:
        for currency in preferred:
            if currency in self.accounts:
                return self.accounts[currency]
        raise TriggerError(f"merchant {self.merchant_id} has no {' or '.join(preferred)} account")

    def top_up(self, account: dict[str, Any], amount: int, reference: str) -> dict[str, Any]:
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


def _v3(field_name: str, value: str) -> Callable[[dict[str, Any]], bool]:
    return lambda payload: "type" in payload and payload.get(field_name) == value


def _v1(field_name: str, value: str) -> Callable[[dict[str, Any]], bool]:
    return lambda payload: (
        "event_type" in payload and (payload.get("event_body") or {}).get(field_name) == value
    )


def _pay_in(action: str) -> Callable[[_Session, str, float], Triggered]:
    def run(session: _Session, event: str, timeout: float) -> Triggered:
        account = session.account("GBP", "EUR")
        try:
            payment_id = mock_bank_pay_in(
                session.client, account["id"], _AMOUNT, account["currency"], action=action
            )
        except OperatorError as exc:
            raise TriggerError(str(exc)) from None
        created = {"payment_id": payment_id, "merchant_account_id": account["id"]}
        delivery = session.wait_event(event, _v3("payment_id", payment_id), timeout)
        return Triggered(event, session.merchant_id, created, delivery)

    return run


def _v3_payout(reference: str) -> Callable[[_Session, str, float], Triggered]:
    def run(session: _Session, event: str, timeout: float) -> Triggered:
        account = session.account("GBP", "EUR")
        currency = account["currency"]
        session.top_up(account, _AMOUNT, "trigger funding")
        identifier = _SORT_CODE if currency == "GBP" else {"type": "iban", "iban": _IBANS["EUR"]}
        body = {
            "merchant_account_id": account["id"],
            "amount_in_minor": _AMOUNT,
            "currency": currency,
            "beneficiary": {
                "type": "external_account",
                "reference": reference,
                "account_holder_name": "Trigger Payee",
                "account_identifier": identifier,
            },
        }
        payout_id = session.ok(session.client.post("/v3/payouts", json=body), 202)["id"]
        created = {"payout_id": payout_id, "merchant_account_id": account["id"]}
        delivery = session.wait_event(event, _v3("payout_id", payout_id), timeout)
        return Triggered(event, session.merchant_id, created, delivery)

    return run


def _refund(reference: str) -> Callable[[_Session, str, float], Triggered]:
    def run(session: _Session, event: str, timeout: float) -> Triggered:
        account = session.account("GBP", "EUR")
        try:
            payment_id = mock_bank_pay_in(
                session.client, account["id"], _AMOUNT, account["currency"]
            )
        except OperatorError as exc:
            raise TriggerError(str(exc)) from None
        session.wait_event("payment_settled", _v3("payment_id", payment_id), timeout)
        body = {"amount_in_minor": _AMOUNT, "reference": reference}
        path = f"/v3/payments/{payment_id}/refunds"
        refund_id = session.ok(session.client.post(path, json=body), 201)["id"]
        created = {
            "payment_id": payment_id,
            "refund_id": refund_id,
            "merchant_account_id": account["id"],
        }
        delivery = session.wait_event(event, _v3("refund_id", refund_id), timeout)
        return Triggered(event, session.merchant_id, created, delivery)

    return run


def _balance_notification(session: _Session, event: str, timeout: float) -> Triggered:
    account = session.account("GBP", "EUR")
    path = f"/admin/merchant-accounts/{account['id']}/balance-threshold"
    previous = account.get("balance_threshold_in_minor")
    available = session.available(account)
    # Cleared, then just above the available balance: the account is below it at once.
    session.ok(session.operator.put(path, json={"threshold_in_minor": None}), 200)
    threshold = max(available, 0) + 1
    session.ok(session.operator.put(path, json={"threshold_in_minor": threshold}), 200)
    try:
        delivery = session.wait_event(
            event,
            lambda p: (
                p.get("merchant_account_id") == account["id"]
                and p.get("threshold_in_minor") == threshold
            ),
            timeout,
        )
    finally:
        session.ok(session.operator.put(path, json={"threshold_in_minor": previous}), 200)
    created = {
        "merchant_account_id": account["id"],
        "balance_threshold_in_minor": f"{threshold} (then set back to {previous})",
    }
    return Triggered(event, session.merchant_id, created, delivery)


def _topup(session: _Session, event: str, timeout: float) -> Triggered:
    account = session.account("EUR", "GBP")
    reference = f"trigger {uuid.uuid4().hex[:12]}"
    transfer = session.top_up(account, _AMOUNT, reference)
    created = {"bank_transfer_id": transfer["id"], "merchant_account_id": account["id"]}
    delivery = session.wait_event(event, _v1("reference", reference), timeout)
    return Triggered(event, session.merchant_id, created, delivery)


def _v1_payout(reference: str, *, rejected: bool = False) -> Callable[..., Triggered]:
    def run(session: _Session, event: str, timeout: float) -> Triggered:
        account = session.account("EUR", "GBP")
        currency = account["currency"]
        if rejected:
            amount = session.available(account) + 1  # more than the account has
        else:
            session.top_up(account, _AMOUNT, "trigger funding")
            amount = _AMOUNT
        transaction_id = str(uuid.uuid4())
        body = {
            "transaction_id": transaction_id,
            "beneficiary_name": "Trigger Payee",
            "beneficiary_iban": _IBANS[currency],
            "beneficiary_reference": reference,
            "currency": currency,
            "amount_in_minor": amount,
        }
        session.ok(session.client.post("/v1/payouts", json=body), 202)
        created = {"transaction_id": transaction_id, "merchant_account_id": account["id"]}
        event_type = event.removeprefix("v1.")
        delivery = session.wait_event(event_type, _v1("transaction_id", transaction_id), timeout)
        return Triggered(event, session.merchant_id, created, delivery)

    return run


@dataclass(frozen=True)
class Event:
    """An event `bankrail trigger` can make happen."""

    name: str
    api: str
    how: str
    run: Callable[[_Session, str, float], Triggered]


EVENTS: dict[str, Event] = {
    e.name: e
    for e in (
        Event(
            "payment_executed",
            "v3",
            "a pay-in the payer executes at the mock bank",
            _pay_in("Execute"),
        ),
        Event(
            "payment_settled",
            "v3",
            "a pay-in the payer executes at the mock bank",
            _pay_in("Execute"),
        ),
        Event(
            "payment_failed",
            "v3",
            "a pay-in the payer rejects at the mock bank",
            _pay_in("RejectAuthorisation"),
        ),
        Event(
            "payout_executed",
            "v3",
            "a funded v3 payout to an external account",
            _v3_payout("trigger"),
        ),
        Event(
            "payout_failed",
            "v3",
            "a funded v3 payout with the sandbox token fail:scheme_error",
            _v3_payout("fail:scheme_error"),
        ),
        Event(
            "refund_executed",
            "v3",
            "a settled pay-in through the mock bank, then a refund of it",
            _refund("trigger"),
        ),
        Event(
            "refund_failed",
            "v3",
            "a settled pay-in, then a refund with the sandbox token fail:scheme_error",
            _refund("fail:scheme_error"),
        ),
        Event(
            "balance_notification",
            "v3",
            "a balance threshold just above the available balance (then set back)",
            _balance_notification,
        ),
        Event("topup_received", "v1", "a sandbox bank transfer into a merchant account", _topup),
        Event("payout_authorised", "v1", "a funded v1 payout", _v1_payout("trigger")),
        Event("payout_submitted", "v1", "a funded v1 payout", _v1_payout("trigger")),
        Event("payout_settled", "v1", "a funded v1 payout", _v1_payout("trigger")),
        Event(
            "payout_rejected",
            "v1",
            "a v1 payout of more than the available balance",
            _v1_payout("trigger", rejected=True),
        ),
        Event(
            "v1.payout_failed",
            "v1",
            "a funded v1 payout with the sandbox token fail:scheme_error",
            _v1_payout("fail:scheme_error"),
        ),
    )
}


def default_merchant_id(url: str, admin_token: str, data_dir: Path) -> str:
    """The demo merchant of `data_dir` (its demo-credentials.json, written by `bankrail init`
    or `serve --demo`), else the oldest merchant the operator API lists."""
    saved = data_dir / DEMO_CREDENTIALS
    if saved.is_file():
        try:
            return str(json.loads(saved.read_text())["merchant_id"])
        except (ValueError, KeyError, OSError):
            pass
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=30
    ) as operator:
        try:
            answer = operator.get("/admin/merchants")
        except httpx.HTTPError as exc:
            raise TriggerError(f"cannot reach {url}: {exc}") from None
        if answer.status_code != 200:
            raise TriggerError(f"GET /admin/merchants answered {answer.status_code}: {answer.text}")
        merchants = answer.json()
    if not merchants:
        raise TriggerError("the server has no merchant: run `bankrail init`, or give --merchant-id")
    return str(merchants[0]["id"])


def trigger(
    event: str, *, url: str, admin_token: str, merchant_id: str, timeout: float = 30
) -> Triggered:
    """Make `event` happen for the merchant and return what was made, once the event is
    recorded."""
    found = EVENTS.get(event)
    if found is None:
        raise TriggerError(f"unknown event {event!r}; `bankrail trigger --list` names them")
    session = _Session(url.rstrip("/"), admin_token, merchant_id)
    try:
        session.register()
        return found.run(session, event, timeout)
    except httpx.HTTPError as exc:
        raise TriggerError(f"cannot reach {url}: {exc}") from None
    finally:
        session.close()
