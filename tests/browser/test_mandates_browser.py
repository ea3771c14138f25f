"""Mandates in Chromium: the hosted page takes the payer to the mock bank's consent page,
which shows the beneficiary, the limits and their periods, and applies the payer's decision."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit

from playwright.sync_api import Page, expect

if TYPE_CHECKING:
    from conftest import Payments

CheckPage = Callable[[Page, str], None]


def _mandate(payments: Payments, **selection: str) -> dict[str, Any]:
    merchant = payments.merchant
    body = {
        "mandate": {
            "type": "commercial",
            "provider_selection": selection or {"type": "user_selected"},
            "beneficiary": {
                "type": "merchant_account",
                "merchant_account_id": merchant.accounts["GBP"]["id"],
            },
            "reference": "gym-membership",
        },
        "currency": "GBP",
        "user": {"id": "browser-payer", "name": "Pat Payer"},
        "constraints": {
            "maximum_individual_amount": 5_000,
            "periodic_limits": {
                "month": {"maximum_amount": 20_000, "period_alignment": "calendar"},
                "week": {"maximum_amount": 7_500, "period_alignment": "consent"},
            },
        },
    }
    answer = merchant.signed_post("/v3/mandates", body)
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def _read(payments: Payments, mandate_id: str) -> dict[str, Any]:
    answer = payments.merchant.get(f"/v3/mandates/{mandate_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_the_payer_consents_through_the_hosted_page_and_the_mock_bank(
    page: Page, payments: Payments, check_page: CheckPage
) -> None:
    mandate = _mandate(payments)
    query = {
        "mandate_id": mandate["id"],
        "resource_token": mandate["resource_token"],
        "return_uri": payments.return_uri("mandate"),
    }
    page.goto(f"{payments.server.base_url}/hpp/mandates?{urlencode(query)}")
    expect(page.get_by_role("heading", level=1)).to_have_text("Set up payments to Acme Books")
    expect(page.get_by_test_id("maximum-individual")).to_have_text("50.00 GBP")
    check_page(page, "hpp-mandate")
    page.get_by_role("button", name=re.compile("Mock UK Payments")).click()

    page.wait_for_url(re.compile(rf"/mock-bank/login/{mandate['id']}"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Set up a payment mandate")
    expect(page.get_by_test_id("beneficiary")).to_have_text("Acme Books")
    expect(page.get_by_test_id("reference")).to_have_text("gym-membership")
    limits = page.get_by_test_id("limits")
    expect(limits).to_contain_text("Each month (calendar)")
    expect(limits).to_contain_text("at most 200.00 GBP")
    expect(limits).to_contain_text("Each week (from your consent)")
    expect(limits).to_contain_text("at most 75.00 GBP")
    check_page(page, "mock-bank-vrp-consent")
    assert _read(payments, mandate["id"])["status"] == "authorizing"

    page.get_by_role("button", name="Authorise").click()
    page.wait_for_url(re.compile(re.escape(payments.site) + r"/shop/return\?"))
    assert parse_qs(urlsplit(page.url).query)["mandate_id"] == [mandate["id"]]
    authorised = _read(payments, mandate["id"])
    assert authorised["status"] == "authorized"
    assert authorised["provider_selection"]["provider_id"] == "mock-payments-gb-redirect"

    # The decision is taken: the hosted page no longer offers the banks.
    page.goto(f"{payments.server.base_url}/hpp/mandates?{urlencode(query)}")
    expect(page.get_by_role("heading", level=1)).to_have_text(
        "This mandate has already been decided"
    )
    check_page(page, "hpp-mandate-decided")

    # The merchant's console lists it with its limits and what they have left.
    page.goto(f"{payments.server.base_url}/console/mandates")
    page.get_by_label("Client ID").fill(payments.merchant.client_id)
    page.get_by_label("Client secret").fill(payments.merchant.client_secret)
    page.get_by_label("Client secret").press("Enter")
    page.wait_for_url(re.compile(r"/console/mandates$"))
    row = page.locator(f'tr[data-mandate-id="{mandate["id"]}"]')
    expect(row).to_contain_text("authorized")
    expect(row).to_contain_text("week (consent): 75.00 GBP left of 75.00 GBP")
    check_page(page, "console-mandates")


def test_the_payer_rejects_at_the_bank(
    page: Page, payments: Payments, check_page: CheckPage
) -> None:
    mandate = _mandate(payments, type="preselected", provider_id="mock-payments-gb-redirect")
    flow = payments.merchant.signed_post(
        f"/v3/mandates/{mandate['id']}/authorization-flow",
        {"redirect": {"return_uri": payments.return_uri("rejected")}},
    )
    assert flow.status_code == 200, flow.text
    uri = flow.json()["authorization_flow"]["actions"]["next"]["uri"]
    page.goto(uri)
    page.get_by_role("button", name="Reject").click()
    page.wait_for_url(re.compile(re.escape(payments.site) + r"/shop/return\?"))
    failed = _read(payments, mandate["id"])
    assert (failed["status"], failed["failure_stage"], failed["failure_reason"]) == (
        "failed",
        "authorizing",
        "authorization_failed",
    )
    # A forged or foreign token shows the error page and changes nothing.
    page.goto(uri.replace("token=", "token=x"))
    expect(page.get_by_role("heading", level=1)).to_have_text(
        "This link has expired or is not valid"
    )
    check_page(page, "mock-bank-vrp-consent-bad-token")
