"""The console's request log in Chromium: from a payout's page to the requests naming it, the
list filtered by status class, and one request beside its answer, redacted. Every page is
saved under test-artifacts/screenshots/request-log-*.png and checked for the access basics."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, expect

from support.api import Operator
from support.server import RunningServer

CheckPage = Callable[[Page, str], None]
Shot = Callable[[Page, str], Path]
GB_IBAN = "GB29NWBK60161331926819"


def _reload_until(page: Page, text: str, timeout: float = 20) -> None:
    """Reload the (server-rendered) page until its main part shows `text` (entries are
    written a moment after their request)."""
    deadline = time.monotonic() + timeout
    while text not in page.locator("main").inner_text():
        assert time.monotonic() < deadline, page.locator("main").inner_text()
        time.sleep(0.2)
        page.reload()


def test_from_a_payout_to_its_requests_and_one_request_beside_its_answer(
    page: Page, server: RunningServer, operator: Operator, check_page: CheckPage
) -> None:
    merchant = operator.new_merchant("Request Log Ltd")
    assert operator.top_up(merchant.accounts["GBP"], 50_000).status_code == 201
    body = {
        "merchant_account_id": merchant.accounts["GBP"]["id"],
        "amount_in_minor": 1_234,
        "currency": "GBP",
        "beneficiary": {
            "type": "external_account",
            "reference": "request log",
            "account_holder_name": "Hidden Person",
            "account_identifier": {"type": "iban", "iban": GB_IBAN},
        },
    }
    answer = merchant.signed_post("/v3/payouts", body)
    assert answer.status_code == 202, answer.text
    payout_id = answer.json()["id"]
    missing = str(uuid.uuid4())
    assert merchant.get(f"/v3/payouts/{missing}").status_code == 404

    page.goto(f"{server.base_url}/console/login")
    page.get_by_label("Client ID").fill(merchant.client_id)
    page.get_by_label("Client secret").fill(merchant.client_secret)
    page.get_by_label("Client secret").press("Enter")
    expect(page.get_by_role("status")).to_have_text("Signed in to Request Log Ltd.")

    page.goto(f"{server.base_url}/console/payouts/{payout_id}")
    page.get_by_role("link", name="Requests naming this payout").click()
    page.wait_for_url(re.compile(rf"/console/request-log\?object_id={payout_id}$"))
    _reload_until(page, "POST /v3/payouts")
    expect(page.get_by_role("heading", level=1)).to_have_text("Request log")
    expect(page.locator("tbody tr")).to_have_count(1)
    expect(page.get_by_label("Object ID")).to_have_value(payout_id)
    check_page(page, "request-log-list")

    # Every request of the merchant, then only the refused ones.
    page.get_by_label("Object ID").fill("")
    page.get_by_label("Status").select_option("4xx")
    page.get_by_role("button", name="Apply filters").click()
    _reload_until(page, f"GET /v3/payouts/{missing}")
    expect(page.locator("tbody tr")).to_have_count(1)
    expect(page.locator("tbody tr")).to_contain_text("404")
    check_page(page, "request-log-4xx")

    page.goto(f"{server.base_url}/console/request-log?object_id={payout_id}")
    page.get_by_role("link", name="POST /v3/payouts").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("POST /v3/payouts")
    request, response = page.get_by_test_id("request"), page.get_by_test_id("response")
    expect(request.get_by_role("heading", name="Request")).to_be_visible()
    expect(response.get_by_role("heading", name="Answer")).to_be_visible()
    expect(request).to_contain_text('"authorization": "[redacted]"')
    expect(request).to_contain_text('"svc-signature": "[redacted]"')
    expect(request).to_contain_text('"amount_in_minor": 1234')
    expect(response).to_contain_text(payout_id)
    shown = page.locator("main").inner_text()
    for secret in (GB_IBAN, "Hidden Person", merchant.token(), merchant.client_secret):
        assert secret not in shown
    # Side by side on a desktop screen: the answer starts level with the request.
    left, right = request.bounding_box(), response.bounding_box()
    assert left is not None
    assert right is not None
    assert right["x"] > left["x"]
    assert abs(right["y"] - left["y"]) < 2
    check_page(page, "request-log-entry")
