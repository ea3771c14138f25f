"""Steps of a mandate shared by the mandate, isolation and fuzz tests."""

from __future__ import annotations

from typing import Any

import httpx
from e2e_helpers import bearer
from pay_in_helpers import bank_token, next_action

from support.api import MerchantClient, Operator

MANDATES = "/v3/mandates"
GB_REDIRECT = "mock-payments-gb-redirect"
RETURN_URI = "https://shop.example/mandate-back"


def mandate_body(
    merchant: MerchantClient,
    *,
    mandate_type: str = "commercial",
    provider_id: str | None = GB_REDIRECT,
    maximum_individual_amount: int = 5_000,
    periodic_limits: dict[str, Any] | None = None,
    currency: str = "GBP",
    **constraints: Any,
) -> dict[str, Any]:
    """A POST /v3/mandates body into the merchant's GBP account."""
    selection: dict[str, Any] = (
        {"type": "preselected", "provider_id": provider_id}
        if provider_id
        else {"type": "user_selected"}
    )
    month = {"maximum_amount": 100_000, "period_alignment": "calendar"}
    limits = periodic_limits or {"month": month}
    return {
        "mandate": {
            "type": mandate_type,
            "provider_selection": selection,
            "beneficiary": {
                "type": "merchant_account",
                "merchant_account_id": merchant.accounts["GBP"]["id"],
            },
            "reference": "subscription",
        },
        "currency": currency,
        "user": {"id": "mandate-user", "name": "Mary Payer", "email": "mary@example.com"},
        "constraints": {
            "maximum_individual_amount": maximum_individual_amount,
            "periodic_limits": limits,
            **constraints,
        },
        "metadata": {"plan": "gold"},
    }


def create_mandate(merchant: MerchantClient, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """POST /v3/mandates (asserting the 201)."""
    answer = merchant.signed_post(MANDATES, body or mandate_body(merchant))
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def redirected_mandate(
    merchant: MerchantClient, body: dict[str, Any] | None = None
) -> tuple[str, str]:
    """A preselected mandate at the mock bank's consent step: (id, the bank token)."""
    mandate_id = str(create_mandate(merchant, body)["id"])
    flow = merchant.signed_post(
        f"{MANDATES}/{mandate_id}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}},
    )
    assert flow.status_code == 200, flow.text
    action = next_action(flow.json())
    assert action["type"] == "redirect", action
    return mandate_id, bank_token(action["uri"])


def consent_action(
    http: httpx.Client, mandate_id: str, token: str, action: str, **extra: Any
) -> httpx.Response:
    """The payer's decision through the mock bank's headless consent API."""
    return http.post(
        f"/mock-bank/api/vrp-consents/{mandate_id}/action",
        json={"action": action, **extra},
        headers=bearer(token),
    )


def authorised_mandate(
    merchant: MerchantClient, body: dict[str, Any] | None = None, **extra: Any
) -> tuple[str, str]:
    """A mandate the payer authorised at the mock bank: (id, the bank token)."""
    mandate_id, token = redirected_mandate(merchant, body)
    answer = consent_action(merchant.http, mandate_id, token, "Authorise", **extra)
    assert answer.status_code == 202, answer.text
    return mandate_id, token


def mandate_payment(
    mandate_id: str, amount: int, currency: str = "GBP", **extra: Any
) -> dict[str, Any]:
    """A POST /v3/payments body for a payment on the mandate."""
    return {
        "amount_in_minor": amount,
        "currency": currency,
        "payment_method": {"type": "mandate", "mandate_id": mandate_id, "reference": "invoice"},
        **extra,
    }


def client_token(operator: Operator, merchant: MerchantClient, scopes: list[str]) -> str:
    """An access token of a new client of the merchant holding only `scopes`."""
    client = operator.post(f"/admin/merchants/{merchant.merchant_id}/clients", {"scopes": scopes})
    assert client.status_code == 201, client.text
    answer = merchant.http.post(
        "/connect/token",
        data={
            "grant_type": "client_credentials",
            "client_id": client.json()["client_id"],
            "client_secret": client.json()["client_secret"],
        },
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])
