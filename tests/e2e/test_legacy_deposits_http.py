"""The legacy deposit API, `POST /v1/users/deposits` (spec 9.4; docs/api.md "Merchant accounts and
providers"), over HTTP against `bankrail serve`: a deprecated shape mapped onto payment
creation plus the authorisation flow, with `deposit_id` as its idempotency key."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from e2e_helpers import account_by_currency, assert_invalid, assert_problem, bearer, wait_for

from support.api import MerchantClient, Operator

DEPOSITS = "/v1/users/deposits"
GB_REDIRECT = "mock-payments-gb-redirect"
RETURN_URI = "https://shop.example/back"


def _deposit(
    deposit_id: str = "d-1",
    amount: int = 1_000,
    currency: str = "GBP",
    provider_id: str | None = GB_REDIRECT,
    user_id: str = "u1",
    **deposit_extra: Any,
) -> dict[str, Any]:
    deposit: dict[str, Any] = {
        "deposit_id": deposit_id,
        "amount_in_minor": amount,
        "currency": currency,
        **deposit_extra,
    }
    if provider_id is not None:
        deposit["provider_id"] = provider_id
    return {
        "user_id": user_id,
        "deposit": deposit,
        "auth_flow": {"type": "redirect", "return_uri": RETURN_URI},
    }


def _post(merchant: MerchantClient, body: dict[str, Any]) -> Any:
    return merchant.signed_post(DEPOSITS, body, idempotency_key=None)


def _assert_deprecated(answer: Any) -> None:
    assert answer.headers["Deprecation"] == "true"
    link = answer.headers["Link"]
    assert "/v3/payments" in link
    assert 'rel="successor-version"' in link


def _get_payment(merchant: MerchantClient, payment_id: str) -> dict[str, Any]:
    answer = merchant.get(f"/v3/payments/{payment_id}")
    assert answer.status_code == 200, answer.text
    payment: dict[str, Any] = answer.json()
    return payment


def test_a_deposit_becomes_an_authorizing_payment(operator: Operator) -> None:
    merchant = operator.new_merchant()
    answer = _post(merchant, _deposit())
    assert answer.status_code == 201, answer.text
    _assert_deprecated(answer)
    result = answer.json()["result"]
    assert set(result) == {"deposit_id", "payment_id", "user_id", "status", "auth_flow"}
    assert result["deposit_id"] == "d-1"
    assert result["user_id"] == "u1"
    assert result["status"] == "authorizing"
    uuid.UUID(result["payment_id"])
    assert result["auth_flow"]["type"] == "redirect"
    uri = urlsplit(result["auth_flow"]["uri"])
    assert uri.path == f"/mock-bank/login/{result['payment_id']}"
    assert parse_qs(uri.fragment)["token"]

    payment = _get_payment(merchant, result["payment_id"])
    assert payment["status"] == "authorizing"
    assert payment["metadata"]["deposit_id"] == "d-1"
    assert payment["amount_in_minor"] == 1_000
    assert payment["currency"] == "GBP"
    assert payment["user"]["id"] == "u1"
    assert payment["merchant_account_id"] == merchant.accounts["GBP"]["id"]
    assert payment["provider_id"] == GB_REDIRECT


def test_the_deposit_settles_through_the_mock_bank(operator: Operator) -> None:
    merchant = operator.new_merchant()
    answer = _post(merchant, _deposit("d-settle", amount=2_500))
    assert answer.status_code == 201, answer.text
    result = answer.json()["result"]
    token = parse_qs(urlsplit(result["auth_flow"]["uri"]).fragment)["token"][0]
    answer = merchant.http.post(
        f"/mock-bank/api/single-immediate-payments/{result['payment_id']}/action",
        json={"action": "Execute"},
        headers=bearer(token),
    )
    assert answer.status_code == 202, answer.text
    back = urlsplit(answer.text)
    assert f"{back.scheme}://{back.netloc}{back.path}" == RETURN_URI
    assert parse_qs(back.query)["payment_id"] == [result["payment_id"]]

    def settled() -> dict[str, Any] | None:
        payment = _get_payment(merchant, result["payment_id"])
        assert payment["status"] != "payment_failed", payment
        return payment if payment["status"] == "payment_settled" else None

    payment = wait_for(settled, timeout=20, what="deposit settled")
    assert payment["payment_source"]["id"]
    account = account_by_currency(merchant, "GBP")
    assert account["current_balance_in_minor"] == 2_500


def test_a_deposit_without_provider_still_answers_a_redirect(operator: Operator) -> None:
    merchant = operator.new_merchant()
    answer = _post(merchant, _deposit("d-no-provider", provider_id=None))
    if answer.status_code == 400:
        assert_invalid(answer, "deposit.provider_id")
        return
    assert answer.status_code == 201, answer.text
    flow = answer.json()["result"]["auth_flow"]
    assert flow["type"] == "redirect", flow
    assert urlsplit(flow["uri"]).scheme in {"http", "https"}


def test_repeating_a_deposit_answers_the_same(operator: Operator) -> None:
    merchant = operator.new_merchant()
    body = _deposit("d-1")
    first = _post(merchant, body)
    again = _post(merchant, body)
    assert first.status_code == again.status_code == 201, again.text
    assert first.content == again.content
    _assert_deprecated(again)
    # Only one payment was made.
    payment_id = first.json()["result"]["payment_id"]
    assert _get_payment(merchant, payment_id)["status"] == "authorizing"


@pytest.mark.parametrize(
    "change",
    [
        {"amount_in_minor": 1_001},
        {"provider_id": None},
        {"user_id": "u2"},
    ],
    ids=["amount", "provider", "user"],
)
def test_another_body_with_the_same_deposit_id_is_a_conflict(
    operator: Operator, change: dict[str, Any]
) -> None:
    merchant = operator.new_merchant()
    first = _post(merchant, _deposit("d-1"))
    assert first.status_code == 201, first.text
    if "user_id" in change:
        body = _deposit("d-1", user_id=change["user_id"])
    elif "provider_id" in change:
        body = _deposit("d-1", provider_id=None)
    else:
        body = _deposit("d-1", amount=change["amount_in_minor"])
    answer = _post(merchant, body)
    assert_problem(answer, 409, "Conflict")
    # The original stands.
    assert _post(merchant, _deposit("d-1")).content == first.content


def test_deposit_ids_belong_to_one_merchant(operator: Operator) -> None:
    first = operator.new_merchant()
    second = operator.new_merchant()
    one = _post(first, _deposit("d-shared"))
    two = _post(second, _deposit("d-shared"))
    assert one.status_code == two.status_code == 201, two.text
    assert one.json()["result"]["payment_id"] != two.json()["result"]["payment_id"]
    assert_problem(second.get(f"/v3/payments/{one.json()['result']['payment_id']}"), 404)


def test_a_eur_deposit_goes_to_the_eur_account(operator: Operator) -> None:
    merchant = operator.new_merchant()
    answer = _post(
        merchant, _deposit("d-eur", currency="EUR", provider_id="mock-payments-de-redirect")
    )
    assert answer.status_code == 201, answer.text
    payment = _get_payment(merchant, answer.json()["result"]["payment_id"])
    assert payment["merchant_account_id"] == merchant.accounts["EUR"]["id"]
    assert payment["currency"] == "EUR"


def test_bad_deposits_are_refused(operator: Operator) -> None:
    merchant = operator.new_merchant(currencies=("GBP",))
    # No account in that currency.
    answer = _post(merchant, _deposit("d-eur", currency="EUR", provider_id=None))
    assert_invalid(answer, "deposit.currency")
    # A provider that does not serve the currency. A refused deposit takes no deposit_id:
    # a repeat is refused the same way, and the corrected deposit is then accepted.
    body = _deposit("d-x", provider_id="mock-payments-de-redirect")
    refused = _post(merchant, body)
    assert_invalid(refused)
    again = _post(merchant, body)
    assert again.status_code == refused.status_code
    assert again.json()["errors"] == refused.json()["errors"]
    corrected = _post(merchant, _deposit("d-x", provider_id="mock-payments-gb-redirect"))
    assert corrected.status_code == 201, corrected.text
    # Not a redirect flow, a bad return uri, a zero amount.
    body = _deposit("d-y")
    body["auth_flow"]["type"] = "embedded"
    assert_invalid(_post(merchant, body), "auth_flow.type")
    body = _deposit("d-z")
    body["auth_flow"]["return_uri"] = "ftp://x"
    assert_invalid(_post(merchant, body))
    assert_invalid(_post(merchant, _deposit("d-0", amount=0)), "deposit.amount_in_minor")
    # Requests refused before the deposit was read (bad shape) leave their id free.
    answer = _post(merchant, _deposit("d-y"))
    assert answer.status_code == 201, answer.text


def test_a_deposit_must_be_signed(operator: Operator) -> None:
    merchant = operator.new_merchant()
    content = json.dumps(_deposit("d-unsigned")).encode()
    answer = merchant.http.post(
        DEPOSITS,
        content=content,
        headers={**bearer(merchant.token()), "Content-Type": "application/json"},
    )
    assert_problem(answer, 401, "Unauthenticated")
    answer = merchant.http.post(DEPOSITS, json=_deposit("d-unsigned"))
    assert_problem(answer, 401)
    # Nothing was recorded under that deposit id.
    answer = _post(merchant, _deposit("d-unsigned", amount=77))
    assert answer.status_code == 201, answer.text
