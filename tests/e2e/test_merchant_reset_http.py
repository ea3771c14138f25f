"""Starting a sandbox merchant clean (`POST /sandbox/merchants/{id}/reset`) and removing one
(`DELETE /admin/merchants/{id}`): everything it made goes, its balances return to zero, the
ledger check stays clean, and another merchant is untouched."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from e2e_helpers import account_by_currency
from pay_in_helpers import authorised_pay_in, balances, settled_payment
from payout_helpers import (
    GB_IBAN,
    create_payout,
    external_beneficiary,
    funded_merchant,
    payout_body,
)

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver

USER = {"id": "reset-user-1", "name": "Ada Payer", "email": "ada@example.com"}


def _busy_merchant(operator: Operator, receiver: WebhookReceiver) -> dict[str, Any]:
    """A merchant with a top-up, a settled pay-in, a refund of it, a pending payment and a
    payout that holds funds; the ids of what it made."""
    merchant = funded_merchant(operator, receiver, gbp=50_000)
    paid = authorised_pay_in(merchant, 3_000, USER)
    settled_payment(merchant, paid)
    refund = merchant.signed_post(
        f"/v3/payments/{paid}/refunds", {"amount_in_minor": 1_000, "reference": "refund 1"}
    )
    assert refund.status_code == 201, refund.text
    pending = merchant.signed_post(
        "/v3/payments",
        {
            "amount_in_minor": 500,
            "currency": "GBP",
            "payment_method": {
                "type": "bank_transfer",
                "provider_selection": {"type": "user_selected"},
                "beneficiary": {
                    "type": "merchant_account",
                    "merchant_account_id": merchant.accounts["GBP"]["id"],
                },
            },
            "user": USER,
        },
    )
    assert pending.status_code == 201, pending.text
    payout = create_payout(
        merchant, payout_body(merchant, "GBP", 2_000, external_beneficiary(GB_IBAN))
    )
    return {
        "merchant": merchant,
        "paths": [
            f"/v3/payments/{paid}",
            f"/v3/payments/{pending.json()['id']}",
            f"/v3/payouts/{payout}",
            f"/v3/payments/{paid}/refunds/{refund.json()['id']}",
        ],
    }


def _ledger_is_clean(operator: Operator) -> None:
    check = operator.get("/admin/ledger/check")
    assert check.status_code == 200, check.text
    assert check.json()["violations"] == []


def test_a_reset_removes_what_the_merchant_made_and_zeroes_its_balances(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    busy = _busy_merchant(operator, receiver)
    merchant: MerchantClient = busy["merchant"]
    bystander = funded_merchant(operator, gbp=7_000)
    accounts_before = merchant.get("/v3/merchant-accounts").json()["items"]
    assert balances(merchant) != (0, 0)

    answer = operator.post(f"/sandbox/merchants/{merchant.merchant_id}/reset", {})

    assert answer.status_code == 200, answer.text
    removed = answer.json()["removed"]
    assert (removed["payments"], removed["payouts"], removed["refunds"]) == (2, 1, 1)
    for path in busy["paths"]:
        assert merchant.get(path).status_code == 404, path
    for listing in ("/v3/payments", "/v3/payouts", "/v3/mandates"):
        assert merchant.get(listing).json()["items"] == [], listing
    account = account_by_currency(merchant, "GBP")
    transactions = merchant.get(f"/v3/merchant-accounts/{account['id']}/transactions")
    assert transactions.status_code == 200, transactions.text
    assert transactions.json()["items"] == []
    assert balances(merchant) == (0, 0)
    assert balances(merchant, "EUR") == (0, 0)
    after = merchant.get("/v3/merchant-accounts").json()["items"]
    assert [(a["id"], a["account_identifiers"]) for a in after] == [
        (a["id"], a["account_identifiers"]) for a in accounts_before
    ]
    assert balances(bystander) == (7_000, 7_000)
    _ledger_is_clean(operator)


def test_after_a_reset_the_same_credentials_work_and_old_keys_make_new_objects(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, gbp=5_000)
    body = payout_body(merchant, "GBP", 1_000, external_beneficiary(GB_IBAN))
    first = merchant.signed_post("/v3/payouts", body, idempotency_key="reset-key-1")
    assert first.status_code == 202, first.text

    assert operator.post(f"/sandbox/merchants/{merchant.merchant_id}/reset", {}).status_code == 200
    assert operator.top_up(merchant.accounts["GBP"], 5_000).status_code == 201
    again = merchant.signed_post("/v3/payouts", body, idempotency_key="reset-key-1")

    assert again.status_code == 202, again.text
    assert again.json()["id"] != first.json()["id"]  # not a replay of what the reset removed
    assert balances(merchant)[1] == 4_000  # available: only the new payout took money
    _ledger_is_clean(operator)


def test_reset_and_delete_of_an_unknown_merchant_are_404(operator: Operator) -> None:
    unknown = "01a2b3c4-0000-7000-8000-000000000000"
    assert operator.post(f"/sandbox/merchants/{unknown}/reset", {}).status_code == 404
    assert operator.http.delete(f"/admin/merchants/{unknown}").status_code == 404


def test_deleting_a_sandbox_merchant_removes_it_entirely(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    busy = _busy_merchant(operator, receiver)
    merchant: MerchantClient = busy["merchant"]
    token = merchant.token()

    answer = operator.http.delete(f"/admin/merchants/{merchant.merchant_id}")

    assert answer.status_code == 204, answer.text
    listed = {m["id"] for m in operator.get("/admin/merchants").json()}
    assert merchant.merchant_id not in listed
    refused = merchant.http.get(
        "/v3/merchant-accounts", headers={"Authorization": f"Bearer {token}"}
    )
    assert refused.status_code == 401
    merchant.forget_token()
    with pytest.raises(httpx.HTTPStatusError, match=r"40[01]"):  # the client is gone too
        merchant.token()
    _ledger_is_clean(operator)
