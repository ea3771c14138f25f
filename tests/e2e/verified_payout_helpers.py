"""Verified payouts over HTTP: the SDKs' request bodies, and the payee's steps at the payout
page as plain forms (no browser), shared by the HTTP and browser tests."""

from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from payout_helpers import PATH

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver

BODIES = Path(__file__).resolve().parents[1] / "fixtures" / "sdk-bodies"
SDK_BODIES = (
    "dotnet-payout-user-determined-name-verification",
    "dotnet-payout-user-determined-preselected",
    "dotnet-payout-user-determined-transaction-verification",
    "java-payout-user-determined",
)
GBP_ACCOUNT = "00000000-0000-4000-8000-000000000001"
RETURN_URI = "https://shop.example/payouts/done?order=9"
PAGE = "/hpp/payouts"


def sdk_body(name: str, merchant: MerchantClient) -> dict[str, Any]:
    """The body the SDK sends (`tests/fixtures/sdk-bodies`, copied from the contract's
    `spec/sdk-bodies`), its GBP merchant account placeholder replaced by the merchant's."""
    body = copy.deepcopy(json.loads((BODIES / f"{name}.json").read_text())["body"])
    assert body["merchant_account_id"] == GBP_ACCOUNT
    body["merchant_account_id"] = merchant.accounts["GBP"]["id"]
    return body


def verified_merchant(
    operator: Operator, name: str, receiver: WebhookReceiver | None = None, gbp: int = 10_000
) -> MerchantClient:
    """A merchant called `name` with `gbp` in its GBP account (webhooks to `receiver`)."""
    merchant = operator.new_merchant(name)
    if receiver is not None:
        answer = operator.put(
            f"/admin/merchants/{merchant.merchant_id}/webhooks",
            {"payments_uri": f"{receiver.url}/payments", "payouts_uri": f"{receiver.url}/payouts"},
        )
        assert answer.status_code == 200, answer.text
    if gbp:
        answer = operator.top_up(merchant.accounts["GBP"], gbp)
        assert answer.status_code == 201, answer.text
    return merchant


def create_verified(merchant: MerchantClient, body: dict[str, Any]) -> dict[str, Any]:
    """Sign and send a verified payout; its 202 answer (asserting its shape)."""
    answer = merchant.signed_post(PATH, body)
    assert answer.status_code == 202, answer.text
    created: dict[str, Any] = answer.json()
    assert set(created) == {"id", "status", "resource_token", "user"}, created
    assert created["status"] == "authorization_required"
    assert set(created["user"]) == {"id"}
    return created


def page_link(base_url: str, created: dict[str, Any], return_uri: str = RETURN_URI) -> str:
    """The SDKs' link to the payout page: its parameters in the fragment."""
    fragment = urlencode(
        {
            "payout_id": created["id"],
            "resource_token": created["resource_token"],
            "return_uri": return_uri,
        }
    )
    return f"{base_url}{PAGE}#{fragment}"


def field(page: httpx.Response, name: str) -> str:
    """The value of a form field of `page`."""
    found = re.search(rf'name="{name}" value="([^"]*)"', page.text)
    assert found, f"no field {name} in the page"
    return html.unescape(found.group(1))


def accounts_offered(bank_page: httpx.Response) -> list[tuple[str, str]]:
    """The accounts the mock provider offers, in order: (holder name, the form value
    choosing it)."""
    found = re.findall(r'name="account" value="([^"]*)"[^>]*data-holder="([^"]*)"', bank_page.text)
    return [(html.unescape(holder), html.unescape(key)) for key, holder in found]


def at_bank(http: httpx.Client, created: dict[str, Any]) -> httpx.Response:
    """Open the payout page, choose the `mock` provider; the provider's page."""
    params = {
        "payout_id": created["id"],
        "resource_token": created["resource_token"],
        "return_uri": RETURN_URI,
    }
    page = http.get(PAGE, params=params)
    assert page.status_code == 200, page.text
    assert 'name="provider_id" value="mock"' in page.text
    chosen = http.post(
        f"{PAGE}/{created['id']}/provider",
        data={
            "resource_token": created["resource_token"],
            "return_uri": RETURN_URI,
            "csrf": field(page, "csrf"),
            "provider_id": "mock",
        },
    )
    assert chosen.status_code == 303, chosen.text
    bank = http.get(chosen.headers["location"])
    assert bank.status_code == 200, bank.text
    return bank


def decide_at_bank(
    http: httpx.Client, created: dict[str, Any], action: str, holder: str | None = None
) -> httpx.Response:
    """At the provider's page, authorise with the first account held by `holder` (the first
    one offered when None), or decline; the result page the payee is sent to."""
    bank = at_bank(http, created)
    key = next(k for h, k in accounts_offered(bank) if holder is None or h == holder)
    decided = http.post(
        f"{PAGE}/{created['id']}/bank",
        data={
            "resource_token": created["resource_token"],
            "return_uri": RETURN_URI,
            "csrf": field(bank, "csrf"),
            "account": key,
            "action": action,
        },
    )
    assert decided.status_code == 303, decided.text
    result = http.get(decided.headers["location"])
    assert result.status_code == 200, result.text
    return result
