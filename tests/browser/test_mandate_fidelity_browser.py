"""Mandates as the SDKs create them, in Chromium (spec/fidelity.md MD1): the hosted mandate
page names the external account the payer's money goes to and offers the banks the
`user_selected` filter allows; the console's mandate list shows the beneficiary and the
commercial use case."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from playwright.sync_api import Page, expect

if TYPE_CHECKING:
    from conftest import Payments

CheckPage = Callable[[Page, str], None]


def _external_mandate(payments: Payments) -> dict[str, Any]:
    body = {
        "mandate": {
            "type": "commercial",
            "provider_selection": {
                "type": "user_selected",
                "filter": {"countries": ["GB"], "release_channel": "private_beta"},
            },
            "beneficiary": {
                "type": "external_account",
                "account_holder_name": "Andrea Java SDK",
                "account_identifier": {
                    "type": "sort_code_account_number",
                    "sort_code": "140662",
                    "account_number": "10003957",
                },
            },
            "use_case": "financial_services",
        },
        "currency": "GBP",
        "user": {"id": "browser-sdk-payer", "name": "John Smith", "phone": None},
        "constraints": {
            "maximum_individual_amount": 1_000,
            "periodic_limits": {"month": {"maximum_amount": 2_000, "period_alignment": "calendar"}},
        },
        "related_products": {"signup_plus": {}},
    }
    answer = payments.merchant.signed_post("/v3/mandates", body)
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def test_an_external_account_mandate_on_the_hosted_page_and_the_console(
    page: Page, payments: Payments, check_page: CheckPage
) -> None:
    mandate = _external_mandate(payments)
    query = {
        "mandate_id": mandate["id"],
        "resource_token": mandate["resource_token"],
        "return_uri": payments.return_uri("mandate"),
    }
    page.goto(f"{payments.server.base_url}/hpp/mandates?{urlencode(query)}")
    expect(page.get_by_test_id("beneficiary")).to_have_text(
        "Andrea Java SDK (sort code 14-06-62, account 10003957)"
    )
    expect(page.get_by_test_id("maximum-individual")).to_have_text("10.00 GBP")
    # The filter (GB, private beta and steadier) leaves the mock UK banks on offer: the
    # redirect one and the open-banking one (private beta, fidelity C1).
    expect(page.get_by_role("button", name="Mock UK Payments - Redirect")).to_be_visible()
    expect(page.get_by_role("button", name="Mock UK Bank (open banking)")).to_be_visible()
    check_page(page, "hpp-mandate-external-account")

    page.goto(f"{payments.server.base_url}/console/mandates")
    page.get_by_label("Client ID").fill(payments.merchant.client_id)
    page.get_by_label("Client secret").fill(payments.merchant.client_secret)
    page.get_by_label("Client secret").press("Enter")
    page.wait_for_url(re.compile(r"/console/mandates$"))
    row = page.locator(f'tr[data-mandate-id="{mandate["id"]}"]')
    expect(row).to_contain_text("commercial (financial services)")
    expect(row.get_by_test_id("beneficiary")).to_have_text("to Andrea Java SDK (140662 10003957)")
    expect(row).to_contain_text("month (calendar): 20.00 GBP left of 20.00 GBP")
    check_page(page, "console-mandates-external-account")
