"""Steps of a pay-in shared by the payments, payment-failure and closed-loop tests."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from e2e_helpers import account_by_currency, bearer

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver

HOOK_PATH = "/v3"


def merchant_with_webhooks(
    operator: Operator, receiver: WebhookReceiver | None = None
) -> MerchantClient:
    """A new merchant whose payments webhooks (if a receiver is given) go to `receiver`."""
    merchant = operator.new_merchant()
    if receiver is not None:
        answer = operator.put(
            f"/admin/merchants/{merchant.merchant_id}/webhooks",
            {"payments_uri": receiver.url + HOOK_PATH},
        )
        assert answer.status_code == 200, answer.text
    return merchant


def payment_body(
    merchant: MerchantClient,
    currency: str = "GBP",
    amount: int = 1_000,
    *,
    provider_id: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A POST /v3/payments body into the merchant's account in `currency`."""
    selection: dict[str, Any] = (
        {"type": "preselected", "provider_id": provider_id}
        if provider_id
        else {"type": "user_selected"}
    )
    return {
        "amount_in_minor": amount,
        "currency": currency,
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": selection,
            "beneficiary": {
                "type": "merchant_account",
                "merchant_account_id": merchant.accounts[currency]["id"],
            },
        },
        **extra,
    }


def next_action(flow: dict[str, Any]) -> dict[str, Any]:
    """The next action of an authorization-flow answer."""
    action: dict[str, Any] = flow["authorization_flow"]["actions"]["next"]
    return action


def bank_token(uri: str) -> str:
    """The mock bank's token carried by a redirect uri."""
    return parse_qs(urlsplit(uri).query)["token"][0]


def bank_action(
    http: httpx.Client, payment_id: str, uri: str, action: str, **delays: int
) -> httpx.Response:
    """The payer's decision through the mock bank's headless API."""
    return http.post(
        f"/mock-bank/api/single-immediate-payments/{payment_id}/action",
        json={"action": action, **delays},
        headers=bearer(bank_token(uri)),
    )


def payment_events(receiver: WebhookReceiver, payment_id: str) -> list[dict[str, Any]]:
    """The payment's webhooks received so far."""
    return [
        e
        for r in receiver.snapshot()
        if r.path == HOOK_PATH and (e := r.json()).get("payment_id") == payment_id
    ]


def wait_payment_event(
    receiver: WebhookReceiver, payment_id: str, event_type: str
) -> dict[str, Any]:
    """Wait for the payment's webhook of this type; every copy carries one event_id."""
    receiver.wait_for(
        lambda _seen: any(e["type"] == event_type for e in payment_events(receiver, payment_id))
    )
    found = [e for e in payment_events(receiver, payment_id) if e["type"] == event_type]
    assert len({e["event_id"] for e in found}) == 1, found
    return found[0]


def recorded_event_types(operator: Operator, merchant: MerchantClient) -> list[str]:
    """Every event recorded for the merchant (recorded with the change, so complete once the
    status that caused it is visible)."""
    answer = operator.get("/admin/webhook-deliveries", merchant_id=merchant.merchant_id)
    assert answer.status_code == 200, answer.text
    return sorted(item["event_type"] for item in answer.json()["items"])


def balances(merchant: MerchantClient, currency: str = "GBP") -> tuple[int, int]:
    """(current, available)."""
    account = account_by_currency(merchant, currency)
    return account["current_balance_in_minor"], account["available_balance_in_minor"]


def advance_clock(operator: Operator, seconds: float) -> None:
    """Move the service clock forward."""
    answer = operator.post("/sandbox/clock/advance", {"seconds": seconds})
    assert answer.status_code == 200, answer.text
