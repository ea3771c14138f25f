"""What the console's browser tests set up through the API before they open a page."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx

from support.api import MerchantClient
from support.server import RunningServer
from support.waiting import wait_for

__all__ = ["settled_pay_in"]


def settled_pay_in(
    server: RunningServer, merchant: MerchantClient, amount: int, payer_id: str
) -> str:
    """The id of a pay-in of `amount` GBP from the user `payer_id`, authorised at the mock
    bank (headless) and settled into the merchant's GBP account."""
    body = {
        "amount_in_minor": amount,
        "currency": "GBP",
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": {
                "type": "preselected",
                "provider_id": "mock-payments-gb-redirect",
            },
            "beneficiary": {
                "type": "merchant_account",
                "merchant_account_id": merchant.accounts["GBP"]["id"],
            },
        },
        "user": {"id": payer_id, "name": "Pat Payer"},
    }
    created = merchant.signed_post("/v3/payments", body)
    assert created.status_code == 201, created.text
    payment_id = str(created.json()["id"])
    flow = merchant.signed_post(
        f"/v3/payments/{payment_id}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": "http://127.0.0.1:9/return"}},
    )
    assert flow.status_code == 200, flow.text
    uri = flow.json()["authorization_flow"]["actions"]["next"]["uri"]
    token = parse_qs(urlsplit(uri).fragment)["token"][0]
    action = httpx.post(
        f"{server.base_url}/mock-bank/api/single-immediate-payments/{payment_id}/action",
        headers={"Authorization": f"Bearer {token}"},
        json={"action": "Execute"},
        timeout=30,
    )
    assert action.status_code == 202, action.text

    def settled() -> bool:
        answer = merchant.get(f"/v3/payments/{payment_id}").json()
        return bool(answer["status"] == "payment_settled")

    wait_for(settled, timeout=20)
    return payment_id
