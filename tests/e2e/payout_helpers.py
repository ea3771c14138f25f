"""Payouts over HTTP: accounts, bodies and polling shared by the end-to-end tests."""

from __future__ import annotations

from typing import Any

from e2e_helpers import get_record, is_uuid, wait_record_status

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver

PATH = "/v3/payouts"

SORT_CODE = {
    "type": "sort_code_account_number",
    "sort_code": "040004",
    "account_number": "12345678",
}
GB_IBAN = {"type": "iban", "iban": "GB29NWBK60161331926819"}
DE_IBAN = {"type": "iban", "iban": "DE89370400440532013000"}
BAD_CHECKSUM_IBAN = {"type": "iban", "iban": "GB29NWBK60161331926818"}


def funded_merchant(
    operator: Operator,
    receiver: WebhookReceiver | None = None,
    *,
    gbp: int = 0,
    eur: int = 0,
    scopes: list[str] | None = None,
) -> MerchantClient:
    """A new merchant (webhooks to `receiver` when given), its accounts topped up."""
    merchant = operator.new_merchant(scopes=scopes)
    if receiver is not None:
        answer = operator.put(
            f"/admin/merchants/{merchant.merchant_id}/webhooks",
            {"payments_uri": f"{receiver.url}/payments", "payouts_uri": f"{receiver.url}/payouts"},
        )
        assert answer.status_code == 200, answer.text
    for currency, amount in (("GBP", gbp), ("EUR", eur)):
        if amount:
            answer = operator.top_up(merchant.accounts[currency], amount)
            assert answer.status_code == 201, answer.text
    return merchant


def external_beneficiary(
    account_identifier: dict[str, Any],
    *,
    name: str = "Jane Doe",
    reference: str = "payout 1",
    **extra: Any,
) -> dict[str, Any]:
    """An open-loop beneficiary paid at `account_identifier`."""
    return {
        "type": "external_account",
        "reference": reference,
        "account_holder_name": name,
        "account_identifier": account_identifier,
        **extra,
    }


def payout_body(
    merchant: MerchantClient,
    currency: str,
    amount: int,
    beneficiary: dict[str, Any],
    *,
    account_currency: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A `POST /v3/payouts` body from the merchant's account in `account_currency`
    (default: the payout's currency)."""
    return {
        "merchant_account_id": merchant.accounts[account_currency or currency]["id"],
        "amount_in_minor": amount,
        "currency": currency,
        "beneficiary": beneficiary,
        **extra,
    }


def create_payout(merchant: MerchantClient, body: dict[str, Any]) -> str:
    """Sign and send `body`; the new payout's id (asserting the 202 and its shape)."""
    answer = merchant.signed_post(PATH, body)
    assert answer.status_code == 202, answer.text
    created = answer.json()
    assert set(created) == {"id"}
    assert is_uuid(created["id"])
    return str(created["id"])


def get_payout(merchant: MerchantClient, payout_id: str) -> dict[str, Any]:
    """The payout record (asserting the 200)."""
    return get_record(merchant, f"{PATH}/{payout_id}")


def wait_payout_status(
    merchant: MerchantClient, payout_id: str, statuses: set[str], timeout: float = 20
) -> dict[str, Any]:
    """The payout's record once its status is one of `statuses`."""
    return wait_record_status(merchant, f"{PATH}/{payout_id}", statuses, timeout)
