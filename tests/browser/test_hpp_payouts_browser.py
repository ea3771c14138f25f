"""The hosted payout page in Chromium: the payee opens the SDKs' link (parameters in the
fragment), chooses the mock provider, picks the account in their name, authorises, and is
returned to the merchant; the verified payout then executes as any payout."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from playwright.sync_api import Page, expect

from support.api import Operator
from support.server import RunningServer
from support.waiting import wait_for

CheckPage = Callable[[Page, str], None]
BODY = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "sdk-bodies"
    / "dotnet-payout-user-determined-name-verification.json"
)


def test_payee_proves_their_account_and_the_payout_executes(
    page: Page,
    server: RunningServer,
    operator: Operator,
    merchant_site: str,
    check_page: CheckPage,
) -> None:
    merchant = operator.new_merchant("Acme Payouts")
    assert operator.top_up(merchant.accounts["GBP"], 5_000).status_code == 201
    body: dict[str, Any] = json.loads(BODY.read_text())["body"]
    body["merchant_account_id"] = merchant.accounts["GBP"]["id"]
    answer = merchant.signed_post("/v3/payouts", body)
    assert answer.status_code == 202, answer.text
    created = answer.json()
    return_uri = f"{merchant_site}/shop/return?order=7"
    fragment = urlencode(
        {
            "payout_id": created["id"],
            "resource_token": created["resource_token"],
            "return_uri": return_uri,
        }
    )

    page.goto(f"{server.base_url}/hpp/payouts#{fragment}")
    expect(page.get_by_role("heading", level=1)).to_have_text("Receive your payout")
    expect(page.get_by_test_id("amount")).to_have_text("1.00 GBP")
    expect(page.get_by_test_id("merchant")).to_have_text("Acme Payouts")
    expect(page.get_by_test_id("payee")).to_have_text("John Doe")
    check_page(page, "hpp-payout-providers")

    page.get_by_role("button", name=re.compile("Mock Bank")).click()
    page.wait_for_url(re.compile(rf"/hpp/payouts/{created['id']}/bank\?"))
    check_page(page, "hpp-payout-bank")
    page.get_by_label(re.compile("^John Doe")).check()
    page.get_by_role("button", name="Authorise").click()
    page.wait_for_url(re.compile(rf"/hpp/payouts/{created['id']}/result\?"))
    expect(page.get_by_role("heading", name=re.compile("Payout on its way"))).to_be_visible()
    check_page(page, "hpp-payout-result")

    page.get_by_test_id("return").click()
    page.wait_for_url(re.compile(re.escape(merchant_site) + r"/shop/return\?"))
    returned = parse_qs(urlsplit(page.url).query)
    assert returned["payout_id"] == [created["id"]]
    assert returned["order"] == ["7"]

    def executed() -> dict[str, Any] | None:
        payout: dict[str, Any] = merchant.get(f"/v3/payouts/{created['id']}").json()
        return payout if payout["status"] in ("executed", "failed") else None

    assert wait_for(executed, timeout=20)["status"] == "executed"
