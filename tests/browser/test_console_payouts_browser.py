"""The console in Chromium shows what merchants integrate with payouts and merchant accounts
(issue 41): verified payouts in each of their own statuses and failures, with the payee, the
verification asked for and the moment a waiting payout expires; and an account's transactions
in the real API's shapes (a pay-in with its payment source, a top-up with its remitter, payouts
with their beneficiary, context code and payout id, a refund with its refund id). Each object is
made over the API; every page visited is checked for the access basics."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from console_helpers import settled_pay_in
from playwright.sync_api import Page, expect

from support.api import MerchantClient, Operator
from support.server import RunningServer
from support.waiting import wait_for

CheckPage = Callable[[Page, str], None]
BODIES = Path(__file__).resolve().parents[1] / "fixtures" / "sdk-bodies"
GB_IBAN = "GB29NWBK60161331926819"
RETURN_URI = "https://shop.example/payouts/done"


def _verified(merchant: MerchantClient, name: str) -> dict[str, Any]:
    """A verified payout of the SDK body `name` (its 202 answer)."""
    body: dict[str, Any] = json.loads((BODIES / f"{name}.json").read_text())["body"]
    body["merchant_account_id"] = merchant.accounts["GBP"]["id"]
    answer = merchant.signed_post("/v3/payouts", body)
    assert answer.status_code == 202, answer.text
    created: dict[str, Any] = answer.json()
    assert created["status"] == "authorization_required"
    return created


def _to_bank(page: Page, server: RunningServer, created: dict[str, Any]) -> None:
    """The payee opens the payout link and chooses the mock provider (`authorizing`)."""
    fragment = urlencode(
        {
            "payout_id": created["id"],
            "resource_token": created["resource_token"],
            "return_uri": RETURN_URI,
        }
    )
    page.goto(f"{server.base_url}/hpp/payouts#{fragment}")
    page.get_by_role("button", name=re.compile("Mock Bank")).click()
    page.wait_for_url(re.compile(rf"/hpp/payouts/{created['id']}/bank\?"))


def _at_bank(
    page: Page, server: RunningServer, created: dict[str, Any], holder: str | None
) -> None:
    """The payee authorises with the account of `holder`, or declines (None)."""
    _to_bank(page, server, created)
    if holder is None:
        page.get_by_test_id("decline").click()
    else:
        page.get_by_label(re.compile(f"^{holder}")).first.check()
        page.get_by_test_id("authorise").click()
    page.wait_for_url(re.compile(rf"/hpp/payouts/{created['id']}/result\?"))


def _console_for(page: Page, server: RunningServer, merchant: MerchantClient) -> None:
    """The operator signs in and picks the merchant."""
    page.goto(f"{server.base_url}/console/login")
    page.get_by_label("Operator token").fill(server.admin_token)
    page.get_by_role("button", name="Sign in as operator").click()
    page.wait_for_url(re.compile(r"/console$"))
    page.get_by_label("Merchant", exact=True).select_option(merchant.merchant_id)
    page.get_by_role("button", name="Show").click()
    page.wait_for_url(re.compile(r"/console\?merchant_id="))


def _wait_status(merchant: MerchantClient, payout_id: str, statuses: set[str]) -> None:
    def reached() -> bool:
        return bool(merchant.get(f"/v3/payouts/{payout_id}").json()["status"] in statuses)

    wait_for(reached, timeout=20)


def test_the_console_shows_verified_payouts_in_each_status(
    page: Page, server: RunningServer, operator: Operator, check_page: CheckPage
) -> None:
    merchant = operator.new_merchant("Console Verified Ltd")
    assert operator.top_up(merchant.accounts["GBP"], 10_000).status_code == 201
    waiting = _verified(merchant, "dotnet-payout-user-determined-name-verification")
    choosing = _verified(merchant, "java-payout-user-determined")
    _to_bank(page, server, choosing)
    declined = _verified(merchant, "java-payout-user-determined")
    _at_bank(page, server, declined, None)
    misnamed = _verified(merchant, "dotnet-payout-user-determined-preselected")
    _at_bank(page, server, misnamed, "Alex Other")
    unproven = _verified(merchant, "dotnet-payout-user-determined-transaction-verification")
    _at_bank(page, server, unproven, "John Doe")  # never paid this merchant
    for failed in (declined, misnamed, unproven):
        _wait_status(merchant, failed["id"], {"failed"})

    _console_for(page, server, merchant)
    page.goto(f"{server.base_url}/console/payouts?merchant_id={merchant.merchant_id}")
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(5)
    waiting_row = rows.filter(has_text=waiting["id"])
    expect(waiting_row).to_contain_text("authorization required")
    expect(waiting_row).to_contain_text("John Doe (chooses at the payout page)")
    expect(rows.filter(has_text=choosing["id"])).to_contain_text("authorizing")
    for failed, reason in (
        (declined, "authorization failed"),
        (misnamed, "name verification failed"),
        (unproven, "transaction verification failed"),
    ):
        expect(rows.filter(has_text=failed["id"])).to_contain_text(f"failed ({reason})")
    check_page(page, "console-payouts-verified")

    page.get_by_label("Status").select_option("authorizing")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.locator("tbody tr")).to_have_count(1)
    expect(page.locator("tbody tr")).to_contain_text(choosing["id"])

    page.goto(
        f"{server.base_url}/console/payouts/{waiting['id']}?merchant_id={merchant.merchant_id}"
    )
    expect(page.get_by_test_id("beneficiary-type")).to_have_text("user_determined")
    expect(page.get_by_test_id("payee")).to_contain_text("John Doe <john.doe@example.com>")
    expect(page.get_by_test_id("payee-account")).to_have_text("not chosen yet")
    verification = page.get_by_test_id("verification")
    expect(verification).to_contain_text("the account holder must be John Doe")
    expect(page.get_by_test_id("authorization-expires")).to_contain_text("fails expired")
    check_page(page, "console-payout-verified-waiting")

    page.goto(
        f"{server.base_url}/console/payouts/{unproven['id']}?merchant_id={merchant.merchant_id}"
    )
    expect(page.get_by_test_id("failure-reason")).to_have_text(
        "transaction verification failed transaction_verification_failed"
    )
    expect(page.get_by_test_id("verification")).to_contain_text(
        "an earlier pay-in of 10.00 GBP on 2024-01-05 mentioning 18db38, Betropolis LTD"
    )
    expect(page.get_by_test_id("verification")).to_contain_text("mock")  # the provider chosen
    expect(page.get_by_test_id("authorization-expires")).to_have_count(0)
    for failed, reason in (
        (declined, "authorization_failed"),
        (misnamed, "name_verification_failed"),
    ):
        page.goto(
            f"{server.base_url}/console/payouts/{failed['id']}?merchant_id={merchant.merchant_id}"
        )
        expect(page.get_by_test_id("failure-reason")).to_contain_text(reason)
    check_page(page, "console-payout-verified-failed")


def _payout(merchant: MerchantClient, amount: int, reference: str) -> str:
    body = {
        "merchant_account_id": merchant.accounts["GBP"]["id"],
        "amount_in_minor": amount,
        "currency": "GBP",
        "beneficiary": {
            "type": "external_account",
            "reference": reference,
            "account_holder_name": "Shapes Beneficiary",
            "account_identifier": {"type": "iban", "iban": GB_IBAN},
        },
    }
    answer = merchant.signed_post("/v3/payouts", body)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


def test_an_accounts_transactions_show_the_real_shapes(
    page: Page, server: RunningServer, operator: Operator, check_page: CheckPage
) -> None:
    merchant = operator.new_merchant("Console Shapes Ltd")
    account = merchant.accounts["GBP"]
    assert operator.top_up(account, 5_000, reference="console shapes").status_code == 201
    payment_id = settled_pay_in(server, merchant, 2_000, "console-shapes-payer")
    executed = _payout(merchant, 700, "shapes paid")
    _wait_status(merchant, executed, {"executed"})
    pending = _payout(merchant, 300, "slow delay:600")  # stays with the scheme
    _wait_status(merchant, pending, {"authorized"})
    refund = merchant.signed_post(f"/v3/payments/{payment_id}/refunds", {"reference": "shapes"})
    assert refund.status_code == 201, refund.text
    refund_id = refund.json()["id"]

    _console_for(page, server, merchant)
    card = page.locator(f'section[data-account-id="{account["id"]}"]')
    card.get_by_role("link", name="Transactions of the GBP account").click()
    page.wait_for_url(re.compile(rf"/console/accounts/{account['id']}/transactions\?"))
    expect(page.get_by_role("heading", level=1)).to_have_text("GBP account transactions")

    def row(kind: str, text: str) -> Any:
        return page.locator(f'tbody tr[data-type="{kind}"]').filter(has_text=text)

    top_up = row("external_payment", "Top Up Ltd")
    expect(top_up).to_contain_text("settled")
    expect(top_up).to_contain_text("+50.00 GBP")
    expect(top_up).to_contain_text("reference console shapes")
    pay_in = row("merchant_account_payment", payment_id)
    expect(pay_in).to_contain_text("+20.00 GBP")
    expect(pay_in).to_contain_text("settled")
    expect(pay_in).to_contain_text("user console-shapes-payer")
    expect(pay_in.get_by_role("link", name=payment_id)).to_be_visible()
    paid = row("payout", executed)
    expect(paid).to_contain_text("executed")
    expect(paid).to_contain_text(f"to Shapes Beneficiary {GB_IBAN} (external_account)")
    expect(paid).to_contain_text("context withdrawal")
    expect(row("payout", pending)).to_contain_text("pending")
    expect(row("payout", pending)).to_contain_text("-3.00 GBP")
    expect(row("refund", refund_id)).to_contain_text(payment_id)
    check_page(page, "console-account-transactions")

    paid.get_by_role("link", name=executed).click()
    page.wait_for_url(re.compile(rf"/console/payouts/{executed}"))
    expect(page.get_by_role("heading", level=1)).to_contain_text(executed)
