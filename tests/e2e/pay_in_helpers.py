"""Steps of a pay-in shared by the payments, payment-failure and closed-loop tests."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import truelayer_signing
from e2e_helpers import account_by_currency, bearer, wait_record_status
from truelayer_signing import HttpMethod, extract_jws_header

from support.api import MerchantClient, Operator
from support.receiver import Received, WebhookReceiver

HOOK_PATH = "/v3"
PAYMENTS = "/v3/payments"
RETURN_URI = "https://shop.example/back"


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


# The answers to the embedded provider's first form (mock-payments-de-embedded), as the Java
# SDK's acceptance test sends them.
EMBEDDED_FIRST_FORM = {
    "inputs": {
        "remitter-name": "Andrea Di Lisio",
        "remitter-iban": "DE09500105171333647892",
        "psu-id": "test_username",
        "psu-password": "test_password",
    }
}


def embedded_forms(code: str) -> list[dict[str, Any]]:
    """The answers to the embedded provider's three forms; the SMS `code` picks the outcome
    as the mock bank's usernames do."""
    return [
        EMBEDDED_FIRST_FORM,
        {"inputs": {"embedded-auth-flow-sca-select": "Sms"}},
        {"inputs": {"embedded-auth-flow-sms-input": code}},
    ]


def fill_in_embedded_forms(merchant: MerchantClient, payment_id: str, code: str) -> httpx.Response:
    """Submit the embedded provider's three forms (signed); the last form's answer."""
    path = f"{PAYMENTS}/{payment_id}/authorization-flow/actions/form"
    *first, last = embedded_forms(code)
    for body in first:
        answer = merchant.signed_post(path, body)
        assert answer.status_code == 200, answer.text
    return merchant.signed_post(path, last)


def next_action(flow: dict[str, Any]) -> dict[str, Any]:
    """The next action of an authorization-flow answer."""
    action: dict[str, Any] = flow["authorization_flow"]["actions"]["next"]
    return action


def bank_token(uri: str) -> str:
    """The mock bank's token carried by a redirect uri."""
    return parse_qs(urlsplit(uri).fragment)["token"][0]


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


def authorised_pay_in(
    merchant: MerchantClient,
    amount: int,
    user: dict[str, Any],
    currency: str = "GBP",
    provider_id: str = "mock-payments-gb-redirect",
) -> str:
    """Create a payment, send the payer through the mock bank to execute it, and return its id
    (not yet settled)."""
    body = {
        "amount_in_minor": amount,
        "currency": currency,
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": {"type": "user_selected"},
            "beneficiary": {
                "type": "merchant_account",
                "merchant_account_id": merchant.accounts[currency]["id"],
            },
        },
        "user": user,
        "metadata": {"purpose": "deposit"},
    }
    answer = merchant.signed_post(PAYMENTS, body)
    assert answer.status_code == 201, answer.text
    created = answer.json()
    assert created["status"] == "authorization_required"
    assert created["user"]["id"] == user["id"]
    payment_id = str(created["id"])

    answer = merchant.signed_post(
        f"{PAYMENTS}/{payment_id}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["authorization_flow"]["actions"]["next"]["type"] == "provider_selection"
    answer = merchant.signed_post(
        f"{PAYMENTS}/{payment_id}/authorization-flow/actions/provider-selection",
        {"provider_id": provider_id},
    )
    assert answer.status_code == 200, answer.text
    uri = answer.json()["authorization_flow"]["actions"]["next"]["uri"]
    token = parse_qs(urlsplit(uri).fragment)["token"][0]
    answer = merchant.http.post(
        f"/mock-bank/api/single-immediate-payments/{payment_id}/action",
        json={"action": "Execute"},
        headers=bearer(token),
    )
    assert answer.status_code == 202, answer.text
    return payment_id


def settled_payment(merchant: MerchantClient, payment_id: str) -> dict[str, Any]:
    """The payment once settled (asserting it did not fail)."""
    payment = wait_record_status(
        merchant, f"{PAYMENTS}/{payment_id}", {"payment_settled", "payment_failed"}
    )
    assert payment["status"] == "payment_settled", payment
    return payment


def _header(request: Received, name: str) -> str:
    return next(v for k, v in request.headers.items() if k.lower() == name.lower())


def verify_webhook(jwks: dict[str, Any], request: Received) -> None:
    """The webhook verifies with the public library against the service's JWKS."""
    signature = _header(request, "Svc-Signature")
    header = extract_jws_header(signature)
    assert header.jku is not None
    assert header.jku.endswith("/.well-known/jwks")
    (
        truelayer_signing.verify_with_jwks(jwks, header)
        .set_method(HttpMethod.POST)
        .set_path(request.path)
        .add_header("X-SVC-Webhook-Timestamp", _header(request, "X-SVC-Webhook-Timestamp"))
        .add_header("Content-Type", _header(request, "Content-Type"))
        .set_body(request.body.decode())
        .verify(signature)
    )


def webhooks_with(receiver: WebhookReceiver, key: str, value: str) -> list[Received]:
    """The webhooks received so far whose body has `key` = `value`."""
    return [r for r in receiver.snapshot() if r.path == HOOK_PATH and r.json().get(key) == value]


def wait_webhook(receiver: WebhookReceiver, key: str, value: str, event_type: str) -> Received:
    """The one webhook of `event_type` whose body has `key` = `value` (every copy carries one
    event_id), once it arrives."""

    def typed() -> list[Received]:
        return [r for r in webhooks_with(receiver, key, value) if r.json()["type"] == event_type]

    receiver.wait_for(lambda _seen: bool(typed()))
    found = typed()
    assert len({r.json()["event_id"] for r in found}) == 1
    return found[0]
