"""v3 payouts as the SDKs send them (fidelity PO1, docs/api.md "Payouts"): `scheme_selection`
decides the scheme and is read back, `sub_merchants` is read back, and a payout to the paying
account's own identifier is accepted and runs as an internal transfer to itself."""

from __future__ import annotations

from typing import Any

from e2e_helpers import assert_invalid, get_record
from payout_helpers import (
    DE_IBAN,
    PATH,
    SORT_CODE,
    create_payout,
    external_beneficiary,
    funded_merchant,
    payout_body,
    wait_payout_status,
)
from sdk_requests import sdk_request

from support.api import Operator
from support.receiver import WebhookReceiver
from support.waiting import wait_for


def _ledger_is_clean(operator: Operator) -> None:
    answer = operator.get("/admin/ledger/check")
    assert answer.status_code == 200, answer.text
    assert answer.json()["ok"] is True, answer.json()


def _balances(merchant: Any, currency: str = "GBP") -> tuple[int, int]:
    account = get_record(merchant, f"/v3/merchant-accounts/{merchant.accounts[currency]['id']}")
    return account["current_balance_in_minor"], account["available_balance_in_minor"]


def _payout_webhook(receiver: WebhookReceiver, payout_id: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        for received in receiver.snapshot():
            event = received.json()
            if event.get("payout_id") == payout_id and event["type"].startswith("payout_"):
                return dict(event)
        return None

    return wait_for(found, timeout=20, what=f"webhook of payout {payout_id}")


def test_java_payout_with_sub_merchants_and_instant_preferred_is_read_back(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, gbp=10_000)
    path, body = sdk_request("java-payout-external-account", merchant)
    answer = merchant.signed_post(path, body)
    assert answer.status_code == 202, answer.text
    payout_id = answer.json()["id"]

    payout = wait_payout_status(merchant, payout_id, {"executed", "failed"})
    assert payout["status"] == "executed", payout
    assert payout["scheme_selection"] == {"type": "instant_preferred"}
    assert payout["sub_merchants"] == body["sub_merchants"]
    assert payout["metadata"] == body["metadata"]
    assert payout["scheme_id"] == "faster_payments_service"
    event = _payout_webhook(receiver, payout_id)
    assert event["type"] == "payout_executed"
    assert event["scheme_id"] == "faster_payments_service"


def test_dotnet_payout_with_instant_only_is_read_back(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    path, body = sdk_request("dotnet-payout-external-account", merchant)
    payout_id = create_payout(merchant, body)
    payout = wait_payout_status(merchant, payout_id, {"executed", "failed"})
    assert payout["status"] == "executed", payout
    assert payout["scheme_selection"] == {"type": "instant_only"}
    assert payout["scheme_id"] == "faster_payments_service"
    for field in ("account_holder_name", "reference", "date_of_birth", "address"):
        assert payout["beneficiary"][field] == body["beneficiary"][field]
    assert path == PATH


def test_a_preselected_scheme_carries_the_payout(operator: Operator) -> None:
    merchant = funded_merchant(operator, eur=10_000)
    standard = {"type": "preselected", "scheme_id": "sepa_credit_transfer"}
    body = payout_body(
        merchant, "EUR", 1_000, external_beneficiary(DE_IBAN), scheme_selection=standard
    )
    payout = wait_payout_status(merchant, create_payout(merchant, body), {"executed", "failed"})
    assert payout["scheme_id"] == "sepa_credit_transfer"
    assert payout["scheme_selection"] == standard
    instant = payout_body(
        merchant,
        "EUR",
        1_000,
        external_beneficiary(DE_IBAN),
        scheme_selection={"type": "instant_only"},
    )
    payout = get_record(merchant, f"{PATH}/{create_payout(merchant, instant)}")
    assert payout["scheme_id"] == "sepa_credit_transfer_instant"


def test_a_scheme_the_currency_lacks_is_400_naming_the_scheme(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    for selection in (
        {"type": "preselected", "scheme_id": "sepa_credit_transfer"},
        {"type": "preselected"},
    ):
        body = payout_body(
            merchant, "GBP", 100, external_beneficiary(SORT_CODE), scheme_selection=selection
        )
        assert_invalid(merchant.signed_post(PATH, body), "scheme_selection.scheme_id")
    body = payout_body(
        merchant, "GBP", 100, external_beneficiary(SORT_CODE), scheme_selection={"type": "fast"}
    )
    assert_invalid(merchant.signed_post(PATH, body), "scheme_selection")
    assert _balances(merchant) == (10_000, 10_000)


def test_null_options_are_absent(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    body = payout_body(
        merchant,
        "GBP",
        100,
        external_beneficiary(SORT_CODE),
        scheme_selection=None,
        sub_merchants=None,
    )
    payout = get_record(merchant, f"{PATH}/{create_payout(merchant, body)}")
    assert "scheme_selection" not in payout
    assert "sub_merchants" not in payout


def test_rust_payout_to_the_accounts_own_iban_is_an_internal_transfer_to_itself(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, gbp=5_000)
    account = get_record(merchant, f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}")
    own_iban = next(i["iban"] for i in account["account_identifiers"] if i["type"] == "iban")
    path, body = sdk_request(
        "rust-payout-external-account",
        merchant,
        GB33BUKB20201555555555=own_iban,
        **{"Merchant Account Holder": account["account_holder_name"]},
    )
    answer = merchant.signed_post(path, body)
    assert answer.status_code == 202, answer.text
    payout_id = answer.json()["id"]
    sent = body["beneficiary"]
    payout = get_record(merchant, f"{PATH}/{payout_id}")
    assert {k: payout["beneficiary"][k] for k in sent} == sent

    payout = wait_payout_status(merchant, payout_id, {"executed", "failed"})
    assert payout["status"] == "executed", payout
    assert payout["scheme_id"] == "internal_transfer"
    assert _payout_webhook(receiver, payout_id)["type"] == "payout_executed"
    # No net movement: the hold returned to the account's own available balance.
    assert _balances(merchant) == (5_000, 5_000)
    _ledger_is_clean(operator)
    listed = get_record(
        merchant, f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}/transactions"
    )["items"]
    mine = [item for item in listed if item["id"] == payout_id]
    assert [(i["type"], i["status"]) for i in mine] == [("payout", "executed")]
