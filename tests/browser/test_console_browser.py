"""The developer console in Chromium: a merchant signs in (with the keyboard), sets its webhook
URIs, watches a top-up's webhook arrive in the delivery log and replays it, and refunds part of
a settled payment; the operator signs in, picks a merchant, tops an account up from the sandbox
panel and sees the balance chart move. Every page visited is saved under
test-artifacts/screenshots/console-*.png and checked for the access basics (lang, viewport,
one h1, labels, real buttons, unique ids, AA contrast, no sideways scrolling)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from console_helpers import settled_pay_in
from playwright.sync_api import Browser, Page, expect

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver
from support.server import RunningServer

CheckPage = Callable[[Page, str], None]
Shot = Callable[[Page, str], Path]
GB_IBAN = "GB29NWBK60161331926819"


def _payout(merchant: MerchantClient, amount: int) -> str:
    body = {
        "merchant_account_id": merchant.accounts["GBP"]["id"],
        "amount_in_minor": amount,
        "currency": "GBP",
        "beneficiary": {
            "type": "external_account",
            "reference": "console browser",
            "account_holder_name": "Browser Beneficiary",
            "account_identifier": {"type": "iban", "iban": GB_IBAN},
        },
    }
    answer = merchant.signed_post("/v3/payouts", body)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


def _reload_until(page: Page, predicate: Callable[[], bool], timeout: float = 20) -> None:
    """Reload the (server-rendered) page until `predicate` holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"page never got there: {page.locator('main').inner_text()}")
        time.sleep(0.2)
        page.reload()


def _wait_until(check: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _focus_is_visible(page: Page) -> bool:
    outline: Any = page.evaluate(
        "() => { const s = getComputedStyle(document.activeElement);"
        " return [s.outlineStyle, s.outlineWidth]; }"
    )
    return bool(outline[0] != "none" and outline[1] != "0px")


def _account_card(page: Page, account_id: str) -> Any:
    return page.locator(f'section[data-account-id="{account_id}"]')


def _chart_points(page: Page, account_id: str) -> int:
    svg = _account_card(page, account_id).locator("svg.balance-chart")
    polyline = svg.locator("polyline")
    count = int(svg.get_attribute("data-points") or "0")
    assert len((polyline.get_attribute("points") or "").split()) == count
    return count


def test_merchant_sets_webhooks_sees_a_delivery_and_replays_it(
    page: Page,
    browser: Browser,
    server: RunningServer,
    operator: Operator,
    receiver: WebhookReceiver,
    check_page: CheckPage,
) -> None:
    merchant = operator.new_merchant("Console Browser Ltd")
    account = merchant.accounts["GBP"]
    assert operator.top_up(account, 100_000).status_code == 201
    payment_id = settled_pay_in(server, merchant, 4_200, "console-browser-payer")
    payout_id = _payout(merchant, 1_500)
    _wait_until(lambda: merchant.get(f"/v3/payouts/{payout_id}").json()["status"] == "executed")

    # signing in, with the keyboard only
    page.goto(f"{server.base_url}/console/payouts")
    page.wait_for_url(re.compile(r"/console/login\?next="))
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in to the Bankrail console")
    check_page(page, "console-login")
    page.get_by_label("Client ID").focus()
    assert _focus_is_visible(page)
    page.keyboard.type(merchant.client_id)
    page.keyboard.press("Tab")
    page.keyboard.type("wrong-secret")
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("Sign-in failed")
    expect(page.get_by_label("Client ID")).to_have_value(merchant.client_id)
    check_page(page, "console-login-failed")
    page.get_by_label("Client secret").fill(merchant.client_secret)
    page.get_by_label("Client secret").press("Enter")
    page.wait_for_url(re.compile(r"/console/payouts$"))  # back where it was asked for
    expect(page.get_by_role("status")).to_have_text("Signed in to Console Browser Ltd.")
    expect(page.get_by_role("link", name=payout_id)).to_be_visible()
    check_page(page, "console-merchant-payouts")
    page.get_by_role("link", name=payout_id).click()
    expect(page.get_by_role("heading", name="Timeline")).to_be_visible()
    expect(page.locator("main")).to_contain_text("Browser Beneficiary")
    check_page(page, "console-merchant-payout-detail")

    # the overview: balances and a chart per account
    page.get_by_role("link", name="Overview").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Console Browser Ltd")
    card = _account_card(page, account["id"])
    expect(card.get_by_test_id("available-balance")).to_have_text("1,027.00 GBP")
    expect(card.get_by_role("img", name=re.compile("Current balance of the GBP account")))
    check_page(page, "console-merchant-overview")

    # payments: the settled one with its history
    page.get_by_role("link", name="Payments").click()
    page.get_by_label("Status").select_option("payment_settled")
    page.get_by_role("button", name="Apply filters").click()
    page.get_by_role("link", name=payment_id).click()
    expect(page.get_by_role("heading", name="Status history")).to_be_visible()
    history = page.locator("ol.timeline li")
    expect(history).to_have_count(5)
    expect(history.last).to_contain_text("payment settled")
    expect(page.locator("main")).to_contain_text("mock-payments-gb-redirect")
    check_page(page, "console-merchant-payment-detail")
    page.get_by_role("link", name="Payments", exact=True).first.click()
    check_page(page, "console-merchant-payments")

    # settings: webhook URIs pointing at a local receiver
    page.get_by_role("link", name="Settings").click()
    page.get_by_label(re.compile("^Payments webhook URI")).fill("not a uri")
    page.get_by_role("button", name="Save webhook URIs").click()
    expect(page.get_by_role("alert")).to_contain_text("must be an absolute http(s) URI")
    expect(page.get_by_label(re.compile("^Payments webhook URI"))).to_have_attribute(
        "aria-invalid", "true"
    )
    check_page(page, "console-merchant-settings-error")
    page.get_by_label(re.compile("^Payments webhook URI")).fill(f"{receiver.url}/payments")
    page.get_by_label(re.compile("^Payouts webhook URI")).fill(f"{receiver.url}/payouts")
    page.get_by_role("button", name="Save webhook URIs").click()
    expect(page.get_by_role("status")).to_have_text("Webhook URIs saved.")
    check_page(page, "console-merchant-settings")

    # a top-up raises topup_received: delivered, and listed with its attempt
    assert operator.top_up(account, 2_500).status_code == 201
    first = receiver.wait_for(lambda got: any(r.path == "/payouts" for r in got))
    event = next(r.json() for r in first if r.path == "/payouts")
    assert event["event_type"] == "topup_received"
    page.get_by_role("link", name="Webhooks").click()
    page.get_by_label("Event type").select_option("topup_received")
    page.get_by_role("button", name="Apply filters").click()
    row = page.locator("tbody tr", has=page.get_by_text("delivered", exact=True))
    _reload_until(page, lambda: row.count() > 0)
    expect(row.first).to_contain_text("topup_received")
    check_page(page, "console-merchant-webhooks")
    row.first.get_by_role("link", name="topup_received").click()
    expect(page.get_by_test_id("event-id")).to_have_text(event["event_id"])
    expect(page.locator("tr.attempt")).to_have_count(1)
    expect(page.locator("tr.attempt").first).to_contain_text("HTTP 200")
    check_page(page, "console-merchant-webhook-detail")

    # replay: the receiver gets the same event_id again, and the attempt is logged
    page.get_by_role("button", name="Replay this event").click()
    expect(page.get_by_role("status")).to_contain_text(f"event {event['event_id']}")
    again = receiver.wait_for(lambda got: sum(r.path == "/payouts" for r in got) >= 2)
    replayed = [r.json() for r in again if r.path == "/payouts"]
    assert replayed[0]["event_id"] == replayed[1]["event_id"] == event["event_id"]
    _reload_until(page, lambda: page.locator("tr.attempt").count() == 2)
    check_page(page, "console-merchant-webhook-replayed")

    # a phone-sized screen: the overview still reads without sideways scrolling
    phone = browser.new_context(viewport={"width": 375, "height": 740}, is_mobile=True)
    phone.add_cookies(page.context.cookies())
    small = phone.new_page()
    small.goto(f"{server.base_url}/console")
    expect(small.get_by_role("heading", level=1)).to_have_text("Console Browser Ltd")
    check_page(small, "console-merchant-overview-phone")
    phone.close()

    # signing out ends the session
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r"/console/login$"))
    expect(page.get_by_role("status")).to_have_text("You are signed out.")
    page.goto(f"{server.base_url}/console/webhooks")
    page.wait_for_url(re.compile(r"/console/login\?next="))


def test_merchant_refunds_part_of_a_settled_payment(
    page: Page, server: RunningServer, operator: Operator, check_page: CheckPage
) -> None:
    merchant = operator.new_merchant("Console Refund Ltd", currencies=("GBP",))
    payment_id = settled_pay_in(server, merchant, 3_000, "console-browser-payer")
    page.goto(f"{server.base_url}/console/payments/{payment_id}")
    page.wait_for_url(re.compile(r"/console/login\?next="))
    page.get_by_label("Client ID").fill(merchant.client_id)
    page.get_by_label("Client secret").fill(merchant.client_secret)
    page.get_by_role("button", name="Sign in as merchant").click()
    page.wait_for_url(re.compile(rf"/console/payments/{payment_id}$"))
    expect(page.get_by_role("heading", name="Refunds", exact=True)).to_be_visible()
    expect(page.get_by_test_id("refunded-amount")).to_have_text("0.00 GBP")
    check_page(page, "console-merchant-refund-form")

    # more than the payment: the error is shown next to the field, nothing is refunded
    page.get_by_label(re.compile("^Amount")).fill("30.01")
    page.get_by_label(re.compile("^Reference")).fill("browser refund")
    page.get_by_role("button", name="Refund", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("must be at most 30.00 GBP")
    expect(page.get_by_label(re.compile("^Amount"))).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label(re.compile("^Amount"))).to_have_value("30.01")
    check_page(page, "console-merchant-refund-error")

    page.get_by_label(re.compile("^Amount")).fill("12.50")
    page.get_by_role("button", name="Refund", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("Refund of 12.50 GBP accepted")
    expect(page.get_by_test_id("refunded-amount")).to_have_text("12.50 GBP")
    row = page.locator("table", has_text="Refunds of this payment").locator("tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("browser refund")
    _reload_until(page, lambda: "executed" in row.inner_text())
    expect(page.locator("main")).to_contain_text("Up to 17.50 GBP is left to refund")
    check_page(page, "console-merchant-refund-executed")
    [refund] = merchant.get(f"/v3/payments/{payment_id}/refunds").json()["items"]
    assert (refund["amount_in_minor"], refund["status"]) == (1_250, "executed")


def test_operator_tops_up_from_the_sandbox_panel_and_the_chart_moves(
    page: Page, server: RunningServer, operator: Operator, check_page: CheckPage
) -> None:
    merchant = operator.new_merchant("Console Chart Ltd")
    account = merchant.accounts["GBP"]
    assert operator.top_up(account, 10_000).status_code == 201

    page.goto(f"{server.base_url}/console/login")
    page.get_by_label("Operator token").fill(server.admin_token)
    page.get_by_role("button", name="Sign in as operator").click()
    page.wait_for_url(re.compile(r"/console$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("All merchants")
    expect(page.get_by_role("link", name="Console Chart Ltd").first).to_be_visible()
    check_page(page, "console-operator-all-merchants")

    # the merchant picker
    page.get_by_label("Merchant", exact=True).select_option(merchant.merchant_id)
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Console Chart Ltd")
    card = _account_card(page, account["id"])
    expect(card.get_by_test_id("current-balance")).to_have_text("100.00 GBP")
    points_before = _chart_points(page, account["id"])
    check_page(page, "console-operator-overview")

    # the operator panel keeps the chosen merchant
    page.get_by_role("link", name="Operator").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Operator")
    assert f"merchant_id={merchant.merchant_id}" in page.url
    check_page(page, "console-operator-panel")

    page.get_by_label("Amount", exact=True).fill("abc")
    page.get_by_role("button", name="Send transfer").click()
    expect(page.get_by_role("alert")).to_contain_text("must be a positive amount in GBP")
    check_page(page, "console-operator-panel-error")
    page.get_by_label("To account").select_option(account["id"])
    page.get_by_label("Amount", exact=True).fill("42.50")
    page.get_by_role("button", name="Send transfer").click()
    expect(page.get_by_role("status")).to_contain_text("Received 42.50 GBP")

    page.get_by_label("Advance by").fill("1")
    page.get_by_label("Unit").select_option("seconds")
    page.get_by_role("button", name="Advance the clock").click()
    expect(page.get_by_role("status")).to_contain_text("Service clock advanced by 1 second;")

    page.get_by_label("Threshold in GBP").fill("50.00")
    page.get_by_role("button", name="Save threshold").first.click()
    expect(page.get_by_role("status")).to_contain_text("set to 50.00 GBP")
    check_page(page, "console-operator-panel-after")

    # the chart has one more step, and the balance shows the transfer
    page.get_by_role("link", name="Overview").click()
    card = _account_card(page, account["id"])
    expect(card.get_by_test_id("current-balance")).to_have_text("142.50 GBP")
    assert _chart_points(page, account["id"]) == points_before + 2
    card.get_by_text("Balance changes as a table").click()
    expect(card.locator("details tbody tr").first).to_contain_text("+42.50 GBP")
    check_page(page, "console-operator-overview-after-topup")

    # every other section, as the operator sees it for this merchant
    for name, heading in (
        ("Payments", "Payments"),
        ("Payouts", "Payouts"),
        ("Webhooks", "Webhook deliveries"),
        ("Settings", "Settings"),
    ):
        page.get_by_role("link", name=name, exact=True).click()
        expect(page.get_by_role("heading", level=1)).to_have_text(heading)
        assert f"merchant_id={merchant.merchant_id}" in page.url
        check_page(page, f"console-operator-{name.lower()}")


def test_operator_sets_a_merchants_allowed_return_uris(
    page: Page, server: RunningServer, operator: Operator, check_page: CheckPage
) -> None:
    merchant = operator.new_merchant("Console Return Ltd", currencies=("GBP",))
    page.goto(f"{server.base_url}/console/login")
    page.get_by_label("Operator token").fill(server.admin_token)
    page.get_by_role("button", name="Sign in as operator").click()
    page.wait_for_url(re.compile(r"/console$"))
    page.goto(f"{server.base_url}/console/settings?merchant_id={merchant.merchant_id}")
    expect(page.get_by_role("heading", name="Allowed return URIs")).to_be_visible()

    field = page.get_by_label("Allowed return URIs, one per line")
    field.fill("https://shop.example/return\nhttp://shop.example/plain")
    page.get_by_role("button", name="Save return URIs").click()
    expect(page.get_by_role("alert")).to_contain_text("line 2 must be an absolute https URI")
    expect(field).to_have_value("https://shop.example/return\nhttp://shop.example/plain")
    check_page(page, "console-operator-return-uris-error")

    field.fill("https://shop.example/return\nhttps://shop.example:8443/other")
    page.get_by_role("button", name="Save return URIs").click()
    expect(page.get_by_role("status")).to_contain_text("Allowed return URIs saved: 2 URIs.")
    expect(field).to_have_value("https://shop.example/return\nhttps://shop.example:8443/other")
    check_page(page, "console-operator-return-uris-saved")
    # What the console stored is what the operator API replaces.
    replaced = operator.put(f"/admin/merchants/{merchant.merchant_id}/return-uris", {"uris": []})
    assert replaced.json() == {"uris": []}
    page.reload()
    expect(field).to_have_value("")


def test_console_user_sets_a_password_signs_in_and_revokes_a_signing_key(
    page: Page, server: RunningServer, operator: Operator, check_page: CheckPage
) -> None:
    merchant = operator.new_merchant("Console User Browser Ltd", currencies=("GBP",))
    email = f"ops-{int(time.time() * 1000)}@shop.example"
    made = operator.post(f"/admin/merchants/{merchant.merchant_id}/console-users", {"email": email})
    assert made.status_code == 201, made.text

    page.goto(made.json()["set_password_url"])
    expect(page.get_by_role("heading", level=1)).to_have_text("Set your console password")
    check_page(page, "console-set-password")
    page.get_by_label("Password", exact=True).fill("a browser passphrase")
    page.get_by_label("Password again").fill("a browser passphrase")
    page.get_by_role("button", name="Set password").click()
    page.wait_for_url(re.compile(r"/console/login$"))
    expect(page.get_by_role("status")).to_contain_text(f"Password set for {email}")

    page.get_by_label("Email").fill(email)
    page.get_by_label("Password", exact=True).fill("a browser passphrase")
    page.get_by_role("button", name="Sign in as console user").click()
    page.wait_for_url(re.compile(r"/console$"))
    expect(page.get_by_role("status")).to_have_text(
        f"Signed in to Console User Browser Ltd as {email}."
    )

    page.get_by_role("link", name="Settings").click()
    revoke = page.get_by_role("button", name=f"Revoke key {merchant.kid}")
    expect(revoke).to_be_visible()
    check_page(page, "console-user-settings")
    assert merchant.signed_post("/v3/payments", {}).status_code != 401
    revoke.click()
    expect(page.get_by_role("status")).to_have_text(f"Key {merchant.kid} revoked.")
    expect(page.get_by_role("button", name=f"Revoke key {merchant.kid}")).to_have_count(0)
    assert merchant.signed_post("/v3/payments", {}).status_code == 401


def test_merchant_starts_clean_from_the_settings_page(
    page: Page, server: RunningServer, operator: Operator, check_page: CheckPage
) -> None:
    merchant = operator.new_merchant("Start Clean Ltd")
    assert operator.top_up(merchant.accounts["GBP"], 9_000).status_code == 201
    payout_id = _payout(merchant, 1_000)

    page.goto(f"{server.base_url}/console/login")
    page.get_by_label("Client ID").fill(merchant.client_id)
    page.get_by_label("Client secret").fill(merchant.client_secret)
    page.get_by_label("Client secret").press("Enter")
    expect(page.get_by_role("status")).to_have_text("Signed in to Start Clean Ltd.")
    page.goto(f"{server.base_url}/console/settings")
    expect(page.get_by_role("heading", name="Start clean (sandbox)")).to_be_visible()
    check_page(page, "console-settings-start-clean")

    page.get_by_role("button", name="Start clean").click()  # not confirmed: nothing happens
    expect(page.locator("#confirm-error")).to_contain_text("Tick the box")
    assert merchant.get(f"/v3/payouts/{payout_id}").status_code == 200

    page.get_by_label("I understand that everything listed above is removed").check()
    page.get_by_role("button", name="Start clean").click()
    expect(page.get_by_role("status")).to_contain_text("Started clean: removed")
    assert merchant.get(f"/v3/payouts/{payout_id}").status_code == 404
    account = merchant.get(f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}").json()
    assert (account["available_balance_in_minor"], account["current_balance_in_minor"]) == (0, 0)


def test_the_overview_shows_each_accounts_sweeping_destination_and_settings(
    page: Page, server: RunningServer, operator: Operator, check_page: CheckPage
) -> None:
    merchant = operator.new_merchant("Console Sweeping Ltd")
    gbp, eur = merchant.accounts["GBP"], merchant.accounts["EUR"]
    answer = operator.put(
        f"/admin/merchant-accounts/{gbp['id']}/sweeping-destination", {"iban": GB_IBAN}
    )
    assert answer.status_code == 200, answer.text
    settings = {"max_amount_in_minor": 25_000, "frequency": "weekly"}
    answer = merchant.signed_post(f"/v3/merchant-accounts/{gbp['id']}/sweeping", settings)
    assert answer.status_code == 200, answer.text
    generated = operator.put(
        f"/admin/merchant-accounts/{eur['id']}/sweeping-destination", {"iban": None}
    ).json()["iban"]

    page.goto(f"{server.base_url}/console/login")
    page.get_by_label("Operator token").fill(server.admin_token)
    page.get_by_role("button", name="Sign in as operator").click()
    page.wait_for_url(re.compile(r"/console$"))
    page.get_by_label("Merchant", exact=True).select_option(merchant.merchant_id)
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Console Sweeping Ltd")

    card = _account_card(page, gbp["id"])
    expect(card.get_by_test_id("sweeping-destination")).to_have_text(
        f"{GB_IBAN} (approved by the operator)"
    )
    expect(card.get_by_test_id("sweeping-settings")).to_contain_text(
        "weekly, balance above 250.00 GBP; next sweep"
    )
    card = _account_card(page, eur["id"])
    expect(card.get_by_test_id("sweeping-destination")).to_have_text(
        f"{generated} (generated sandbox IBAN)"
    )
    expect(card.get_by_test_id("sweeping-settings")).to_have_text("off")
    check_page(page, "console-operator-sweeping")
