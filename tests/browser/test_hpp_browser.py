"""The hosted payment page in Chromium: a payer picks a bank, authorises at the mock bank and
comes back to the merchant; on a phone; with the keyboard only; and its error page."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlencode, urlsplit

from playwright.sync_api import Page, expect

if TYPE_CHECKING:
    from conftest import Payments

CheckPage = Callable[[Page, str], None]
Shot = Callable[[Page, str], Path]


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def test_payer_pays_through_the_hosted_page_and_returns_to_the_merchant(
    page: Page, payments: Payments, check_page: CheckPage, shot: Shot
) -> None:
    payment = payments.create(amount=123456)
    page.goto(payments.hpp_url(payment))

    expect(page.get_by_role("heading", level=1)).to_have_text("Pay Acme Books")
    expect(page.get_by_test_id("amount")).to_have_text("1,234.56 GBP")
    expect(page.get_by_test_id("merchant")).to_have_text("Acme Books")
    check_page(page, "hpp-provider-list")

    page.get_by_role("button", name=re.compile("Mock UK Payments")).click()
    page.wait_for_url(re.compile(r"/mock-bank/login/"))
    expect(page.get_by_test_id("amount")).to_have_text("1,234.56 GBP")
    expect(page.get_by_test_id("merchant")).to_have_text("Acme Books")
    check_page(page, "mock-bank-consent")

    page.get_by_label("Username").fill("test_executed")
    page.get_by_role("button", name="Authorise").click()
    page.wait_for_url(re.compile(rf"/hpp/payments/{payment['id']}/result\?"))
    expect(page.get_by_role("heading", name=re.compile("Payment successful"))).to_be_visible()
    check_page(page, "hpp-result-success")

    # Settled: the result page returns the payer to the merchant by itself.
    page.wait_for_url(re.compile(re.escape(payments.site) + r"/shop/return\?"))
    shot(page, "merchant-return-page")
    returned = _query(page.url)
    assert returned["payment_id"] == [payment["id"]]
    assert returned["order"] == ["42"]
    assert payments.read(payment["id"])["status"] == "payment_settled"
    settled = payments.read(payment["id"])
    assert settled["provider_id"] == "mock-payments-gb-redirect"
    assert settled["payment_source"]["account_holder_name"] == "Pat Payer"


def test_payer_cancels_at_the_bank(page: Page, payments: Payments, check_page: CheckPage) -> None:
    payment = payments.create()
    page.goto(payments.hpp_url(payment))
    page.get_by_role("button", name=re.compile("Mock UK Payments")).click()
    page.wait_for_url(re.compile(r"/mock-bank/login/"))

    page.get_by_role("button", name="Cancel").click()
    page.wait_for_url(re.compile(rf"/hpp/payments/{payment['id']}/result\?"))
    expect(page.get_by_role("heading", name="Payment failed")).to_be_visible()
    expect(page.get_by_test_id("failure-message")).to_have_text(
        "You cancelled the payment at your bank."
    )
    expect(page.get_by_test_id("failure-reason")).to_have_text("not_authorized")
    check_page(page, "hpp-result-cancelled")

    failed = payments.read(payment["id"])
    assert failed["status"] == "payment_failed"
    assert failed["failure_reason"] == "not_authorized"
    assert failed["failure_stage"] == "authorizing"

    # No automatic redirect after a failure; the button takes the payer back.
    page.get_by_role("link", name="Return to Acme Books").click()
    page.wait_for_url(re.compile(re.escape(payments.site) + r"/shop/return\?"))
    assert _query(page.url)["payment_id"] == [payment["id"]]

    # The hosted page link no longer works for this payment.
    answer = page.goto(payments.hpp_url(payment))
    assert answer is not None
    assert answer.status == 409
    expect(page.get_by_role("heading", level=1)).to_have_text("This payment has already failed")
    check_page(page, "hpp-error-409")


def test_hosted_page_on_a_phone(
    phone_page: Page, payments: Payments, check_page: CheckPage
) -> None:
    payment = payments.create(amount=5000, currency="EUR")
    phone_page.goto(payments.hpp_url(payment))
    expect(phone_page.get_by_test_id("amount")).to_have_text("50.00 EUR")
    banks = phone_page.locator("#providers button")
    expect(banks).to_have_count(4)
    check_page(phone_page, "hpp-provider-list-phone")

    # Typing filters the list at once (progressive enhancement of the search form).
    phone_page.get_by_label("Search for your bank").fill("french")
    expect(phone_page.locator("#providers li:visible")).to_have_count(1)
    expect(phone_page.locator("#providers li:visible")).to_contain_text("Mock French Bank")
    expect(phone_page.locator("#match-count")).to_have_text("1 of 4 banks shown")
    check_page(phone_page, "hpp-provider-search-phone")

    phone_page.get_by_label("Search for your bank").fill("no such bank")
    expect(phone_page.locator("#no-match")).to_be_visible()

    # Without the script the search form filters on the server.
    phone_page.goto(payments.hpp_url(payment, q="german"))
    visible = phone_page.locator("#providers li:visible")
    expect(visible).to_have_count(3)
    expect(visible.first).to_contain_text("Mock German Bank")

    expect(phone_page.get_by_label("Search for your bank")).to_have_value("german")
    phone_page.get_by_label("Search for your bank").fill("")
    expect(phone_page.locator("#providers li:visible")).to_have_count(4)
    phone_page.get_by_role("button", name=re.compile("Mock French Bank")).click()
    phone_page.wait_for_url(re.compile(r"/mock-bank/login/"))
    check_page(phone_page, "mock-bank-consent-phone")


def test_keyboard_only_payer_picks_a_bank_and_authorises(
    page: Page, payments: Payments, check_page: CheckPage
) -> None:
    payment = payments.create()
    page.goto(payments.hpp_url(payment))

    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.providerId || ''"):
            break
    focused = page.evaluate(
        "(() => { const el = document.activeElement; const s = getComputedStyle(el);"
        " return {tag: el.tagName, id: el.dataset.providerId || '',"
        " outline: s.outlineStyle, width: parseFloat(s.outlineWidth)}; })()"
    )
    assert focused["tag"] == "BUTTON"
    assert focused["id"] == "mock-payments-gb-redirect"
    assert focused["outline"] != "none"
    assert focused["width"] >= 2, "the focused button must show a visible focus ring"
    check_page(page, "hpp-keyboard-focus")

    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/mock-bank/login/"))
    check_page(page, "mock-bank-consent-keyboard")

    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "username":
            break
    page.keyboard.type("test_executed")
    page.keyboard.press("Enter")  # submits with the form's first button, Authorise
    page.wait_for_url(re.compile(rf"/hpp/payments/{payment['id']}/result\?"))
    expect(page.get_by_role("heading", name=re.compile("Payment successful"))).to_be_visible()
    payments.wait_for(payment["id"], "payment_settled")


def test_link_with_parameters_in_the_fragment(
    page: Page, payments: Payments, check_page: CheckPage
) -> None:
    payment = payments.create()
    fragment = urlencode(
        {
            "payment_id": payment["id"],
            "resource_token": payment["resource_token"],
            "return_uri": payments.return_uri(),
        }
    )
    page.goto(f"{payments.server.base_url}/hpp/payments#{fragment}")
    page.wait_for_url(re.compile(r"/hpp/payments\?payment_id="))
    expect(page.get_by_test_id("amount")).to_have_text("12.34 GBP")
    check_page(page, "hpp-provider-list-from-fragment")


def test_invalid_link_shows_an_error_page(
    page: Page, payments: Payments, check_page: CheckPage
) -> None:
    payment = payments.create()
    forged = {**payment, "resource_token": payment["resource_token"][:-4] + "AAAA"}
    answer = page.goto(payments.hpp_url(forged))
    assert answer is not None
    assert answer.status == 401
    expect(page.get_by_role("heading", level=1)).to_have_text(
        "This link has expired or is not valid"
    )
    check_page(page, "hpp-error-401")

    answer = page.goto(payments.hpp_url(payment, return_uri="javascript:alert(1)"))
    assert answer is not None
    assert answer.status == 400
    check_page(page, "hpp-error-400")
    assert payments.read(payment["id"])["status"] == "authorization_required"
