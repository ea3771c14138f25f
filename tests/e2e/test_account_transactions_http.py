"""The merchant account's transactions in the real API's shapes (fidelity MA2, docs/api.md
"Merchant account transactions"), and account ids that are not UUIDs (MA3)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from e2e_helpers import assert_problem, get_record, is_uuid
from pay_in_helpers import authorised_pay_in, settled_payment
from payout_helpers import (
    SORT_CODE,
    create_payout,
    external_beneficiary,
    funded_merchant,
    payout_body,
    wait_payout_status,
)

from support.api import MerchantClient, Operator
from support.waiting import wait_for

REMITTER_IBAN = "GB29NWBK60161331926819"


def _items(merchant: MerchantClient, currency: str = "GBP", **params: Any) -> list[dict[str, Any]]:
    answer = merchant.get(
        f"/v3/merchant-accounts/{merchant.accounts[currency]['id']}/transactions", **params
    )
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    for item in items:
        assert is_uuid(item["id"])
        assert item["amount_in_minor"] > 0
        assert item["currency"] == currency
    return items


def test_top_ups_are_external_payments_with_a_remitter(operator: Operator) -> None:
    merchant = operator.new_merchant()
    for name, extra in (
        ("Ann Remitter", {}),
        ("Ann Remitter", {}),
        ("Bob Remitter", {}),
        ("Iban Remitter", {"remitter_iban": REMITTER_IBAN}),
    ):
        answer = operator.top_up(
            merchant.accounts["GBP"], 100, remitter_name=name, reference=f"from {name}", **extra
        )
        assert answer.status_code == 201, answer.text
    ann, ann_again, bob, with_iban = _items(merchant)
    for item in (ann, ann_again, bob, with_iban):
        assert item["type"] == "external_payment"
        assert item["status"] == "settled"
        assert item["settled_at"].endswith("Z")
    assert ann["remitter"]["account_holder_name"] == "Ann Remitter"
    assert ann["remitter"]["reference"] == "from Ann Remitter"
    generated = ann["remitter"]["account_identifier"]
    assert generated["type"] == "sort_code_account_number"
    assert len(generated["sort_code"]) == 6
    assert generated["sort_code"].isdigit()
    assert len(generated["account_number"]) == 8
    assert generated["account_number"].isdigit()
    assert ann_again["remitter"]["account_identifier"] == generated, "stable per remitter"
    assert bob["remitter"]["account_identifier"] != generated
    assert with_iban["remitter"]["account_identifier"] == {"type": "iban", "iban": REMITTER_IBAN}

    operator.top_up(merchant.accounts["EUR"], 100, remitter_name="Ann Remitter")
    (euro,) = _items(merchant, "EUR", type="external_payment")
    assert euro["remitter"]["account_identifier"]["type"] == "iban"


def test_a_settled_pay_in_is_a_merchant_account_payment_with_its_source(
    operator: Operator,
) -> None:
    merchant = operator.new_merchant()
    user = {"id": f"user-{uuid.uuid4()}", "name": "Jane Payer"}
    payment = settled_payment(merchant, authorised_pay_in(merchant, 1_234, user))
    (item,) = _items(merchant, type="merchant_account_payment")
    assert item["type"] == "merchant_account_payment"
    assert item["status"] == "settled"
    assert item["payment_id"] == payment["id"]
    assert item["amount_in_minor"] == 1_234
    source = item["payment_source"]
    assert source["id"] == payment["payment_source"]["id"]
    assert source["user_id"] == user["id"]
    assert source["account_holder_name"] == payment["payment_source"]["account_holder_name"]
    assert source["account_identifiers"] == payment["payment_source"]["account_identifiers"]
    assert _items(merchant, type="payment") == [item], "the earlier filter name still works"


def test_payouts_are_pending_then_executed_and_failed_ones_are_not_listed(
    operator: Operator,
) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    slow = payout_body(
        merchant, "GBP", 1_000, external_beneficiary(SORT_CODE, reference="slow delay:600")
    )
    slow_id = create_payout(merchant, slow)
    failing = payout_body(
        merchant, "GBP", 2_000, external_beneficiary(SORT_CODE, reference="fail:scheme_error")
    )
    failed_id = create_payout(merchant, failing)
    wait_payout_status(merchant, failed_id, {"failed"})

    def pending() -> dict[str, Any] | None:
        found = [i for i in _items(merchant, type="payout") if i["id"] == slow_id]
        return found[0] if found else None

    item = wait_for(pending, timeout=20, what="the slow payout listed")
    assert item["status"] == "pending"
    assert "executed_at" not in item
    assert item["payout_id"] == slow_id
    assert item["context_code"] == "withdrawal"
    assert item["beneficiary"]["type"] == "external_account"
    assert item["beneficiary"]["reference"] == "slow delay:600"
    assert item["beneficiary"]["account_identifier"] == SORT_CODE
    assert item["created_at"].endswith("Z")
    assert failed_id not in {i["id"] for i in _items(merchant)}

    answer = operator.post("/sandbox/clock/advance", {"seconds": 601})
    assert answer.status_code == 200, answer.text
    merchant.forget_token()
    payout = wait_payout_status(merchant, slow_id, {"executed"})
    (item,) = [i for i in _items(merchant, type="payout") if i["id"] == slow_id]
    assert (item["status"], item["executed_at"]) == ("executed", payout["executed_at"])


def test_refunds_name_their_refund_and_payment(operator: Operator) -> None:
    merchant = operator.new_merchant()
    user = {"id": f"user-{uuid.uuid4()}", "name": "Jane Payer"}
    payment = settled_payment(merchant, authorised_pay_in(merchant, 5_000, user))
    answer = merchant.signed_post(
        f"/v3/payments/{payment['id']}/refunds", {"amount_in_minor": 1_500, "reference": "refund"}
    )
    assert answer.status_code == 201, answer.text
    refund_id = answer.json()["id"]

    def executed() -> dict[str, Any] | None:
        found = [i for i in _items(merchant, type="refund") if i["status"] == "executed"]
        return found[0] if found else None

    item = wait_for(executed, timeout=20, what="the refund executed")
    assert (item["type"], item["refund_id"], item["payment_id"]) == (
        "refund",
        refund_id,
        payment["id"],
    )
    assert item["amount_in_minor"] == 1_500


def test_v1_transactions_keep_the_seed_shape(operator: Operator) -> None:
    merchant = operator.new_merchant()
    operator.top_up(merchant.accounts["GBP"], 100, remitter_name="Ann Remitter")
    (record,) = get_record(merchant, "/v1/transactions")["results"]
    assert record["type"] == "topup"
    assert record["remitter_name"] == "Ann Remitter"
    assert "remitter" not in record


@pytest.mark.parametrize("suffix", ["", "/transactions", "/payment-sources?user_id=u", "/sweeping"])
def test_an_account_id_that_is_not_a_uuid_is_404(operator: Operator, suffix: str) -> None:
    merchant = operator.new_merchant(currencies=("GBP",))
    answer = merchant.get(f"/v3/merchant-accounts/non-existent-merchant-account{suffix}")
    assert_problem(answer, 404, "Not Found")


@pytest.mark.parametrize(
    ("suffix", "body"),
    [("/balance-threshold", {"threshold_in_minor": 1}), ("/sweeping-destination", {"iban": None})],
)
def test_an_operator_route_with_an_account_id_that_is_not_a_uuid_is_404(
    operator: Operator, suffix: str, body: dict[str, Any]
) -> None:
    answer = operator.put(f"/admin/merchant-accounts/non-existent-merchant-account{suffix}", body)
    assert_problem(answer, 404, "Not Found")
