"""The mock bank's pages in Chromium: the consent page (outcome by username, delays on the
service clock, validation), the embedded provider's two steps, and its error pages."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import Page, expect

from support.api import Operator

if TYPE_CHECKING:
    from conftest import Payments

CheckPage = Callable[[Page, str], None]


def _to_the_bank(page: Page, payments: Payments, bank: str, **create: object) -> dict[str, str]:
    payment = payments.create(**create)  # type: ignore[arg-type]
    page.goto(payments.hpp_url(payment))
    page.get_by_role("button", name=re.compile(re.escape(bank))).click()
    # The login uri's page posts the fragment's token to itself: the bank's page answers.
    page.wait_for_url(re.compile(rf"/mock-bank/login/{payment['id']}$"))
    expect(page.get_by_test_id("amount")).to_be_visible()
    return payment


def test_consent_page_validates_input_then_applies_the_username_outcome(
    page: Page, payments: Payments, check_page: CheckPage
) -> None:
    payment = _to_the_bank(page, payments, "Mock UK Payments")

    page.get_by_label("Execution delay").fill("-5")
    page.get_by_role("button", name="Authorise").click()
    expect(page.get_by_role("alert")).to_contain_text("There is a problem")
    expect(page.get_by_role("alert")).to_contain_text("Enter a username")
    expect(page.get_by_role("alert")).to_contain_text("The execution delay must be")
    expect(page.get_by_label("Username")).to_have_attribute("aria-invalid", "true")
    check_page(page, "mock-bank-consent-error")
    assert payments.read(payment["id"])["status"] == "authorizing"

    page.get_by_label("Username").fill("test_authorisation_failed")
    page.get_by_label("Execution delay").fill("")
    page.get_by_role("button", name="Authorise").click()
    page.wait_for_url(re.compile(rf"/hpp/payments/{payment['id']}/result\?"))
    expect(page.get_by_role("heading", name="Payment failed")).to_be_visible()
    expect(page.get_by_test_id("failure-reason")).to_have_text("authorization_failed")

    failed = payments.read(payment["id"])
    assert failed["status"] == "payment_failed"
    assert (failed["failure_stage"], failed["failure_reason"]) == (
        "authorizing",
        "authorization_failed",
    )


def test_delays_run_on_the_service_clock(
    page: Page, payments: Payments, operator: Operator, check_page: CheckPage
) -> None:
    payment = _to_the_bank(page, payments, "Mock UK Payments")
    page.get_by_label("Username").fill("test_executed")
    page.get_by_label("Execution delay").fill("600")
    page.get_by_label("Settlement delay").fill("0")
    page.get_by_role("button", name="Authorise").click()

    page.wait_for_url(re.compile(rf"/hpp/payments/{payment['id']}/result\?"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Waiting for your bank")
    check_page(page, "hpp-result-pending")
    assert payments.read(payment["id"])["status"] == "authorized"

    assert operator.post("/sandbox/clock/advance", {"seconds": 600}).status_code == 200
    # The result page polls the payment and updates by itself, then returns the payer.
    expect(page.get_by_role("heading", name=re.compile("Payment successful"))).to_be_visible()
    page.wait_for_url(re.compile(re.escape(payments.site) + r"/shop/return\?"))
    assert parse_qs(urlsplit(page.url).query)["payment_id"] == [payment["id"]]
    payments.wait_for(payment["id"], "payment_settled")


def test_embedded_provider_asks_for_username_then_password(
    page: Page, payments: Payments, check_page: CheckPage
) -> None:
    payment = _to_the_bank(page, payments, "Mock German Bank (embedded)", currency="EUR", amount=99)
    assert f"/mock-bank/login/{payment['id']}" in page.url
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in to approve")
    expect(page.get_by_test_id("amount")).to_have_text("0.99 EUR")
    check_page(page, "mock-bank-embedded-username")

    page.get_by_label("Username").fill("test_executed")
    page.get_by_role("button", name="Continue").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Enter your password")
    check_page(page, "mock-bank-embedded-password")

    page.get_by_role("button", name="Approve payment").click()  # no password yet
    expect(page.get_by_role("alert")).to_contain_text("Enter your password")
    page.get_by_label("Password").fill("anything")
    page.get_by_role("button", name="Approve payment").click()

    page.wait_for_url(re.compile(re.escape(payments.site) + r"/shop/return\?"))
    assert parse_qs(urlsplit(page.url).query)["payment_id"] == [payment["id"]]
    settled = payments.wait_for(payment["id"], "payment_settled")
    assert settled["provider_id"] == "mock-payments-de-embedded"


def test_mock_bank_error_pages(page: Page, payments: Payments, check_page: CheckPage) -> None:
    opened: list[str] = []
    page.on("framenavigated", lambda frame: opened.append(frame.url))
    payment = _to_the_bank(page, payments, "Mock UK Payments")
    login_uri = next(url for url in opened if "#token=" in url)
    page.get_by_role("button", name="Cancel").click()
    page.wait_for_url(re.compile(r"/result\?"))

    # The login page posts the token: the bank's answer is the 409 page.
    page.goto(login_uri)
    expect(page.get_by_role("heading", level=1)).to_have_text("This payment has already failed")
    expect(page.locator(".status-code")).to_have_text("Error 409")
    check_page(page, "mock-bank-error-409")

    forged = f"/mock-bank/login/{payment['id']}#token={payment['resource_token']}"
    page.goto("about:blank")  # from the same path, a new fragment would not load the page
    page.goto(f"{payments.server.base_url}{forged}")
    # The payment's resource token is not the bank's token.
    expect(page.locator(".status-code")).to_have_text("Error 401")
    check_page(page, "mock-bank-error-401")


def test_login_uri_of_the_flow_opens_the_bank_from_its_fragment(
    page: Page, payments: Payments, check_page: CheckPage
) -> None:
    """The redirect action's uri, as a merchant's integration opens it in the browser."""
    payment = payments.create()
    flow = f"/v3/payments/{payment['id']}/authorization-flow"
    started = payments.merchant.signed_post(
        flow, {"provider_selection": {}, "redirect": {"return_uri": payments.return_uri()}}
    )
    assert started.status_code == 200, started.text
    chosen = payments.merchant.signed_post(
        f"{flow}/actions/provider-selection", {"provider_id": "mock-payments-gb-redirect"}
    )
    uri = chosen.json()["authorization_flow"]["actions"]["next"]["uri"]
    assert urlsplit(uri).path == f"/mock-bank/login/{payment['id']}"
    answer = page.goto(uri)
    assert answer is not None
    assert answer.status == 200  # HTML at once, no redirect
    expect(page.get_by_role("heading", level=1)).to_have_text("Authorise payment")
    check_page(page, "mock-bank-login-from-fragment")
    page.get_by_label("Username").fill("test_executed")
    page.get_by_role("button", name="Authorise").click()
    page.wait_for_url(re.compile(re.escape(payments.site) + r"/shop/return\?"))
    assert parse_qs(urlsplit(page.url).query)["payment_id"] == [payment["id"]]
    payments.wait_for(payment["id"], "payment_settled")


def test_login_page_without_a_token_says_there_is_nothing_to_do(
    page: Page, payments: Payments, check_page: CheckPage
) -> None:
    payment = payments.create()
    answer = page.goto(f"{payments.server.base_url}/mock-bank/login/{payment['id']}")
    assert answer is not None
    assert answer.status == 200
    expect(page.get_by_test_id("no-token")).to_be_visible()
    check_page(page, "mock-bank-login-without-token")
