"""Error messages that say what to do (docs/api.md, "Errors that say what to do"): each
common mistake of a first integration gets a problem whose detail names the cause and
the fix."""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

import httpx
from e2e_helpers import assert_invalid, assert_problem, bearer

from bankrail.security import signing
from support.api import MerchantClient, Operator
from support.server import RunningServer


def _payout(merchant: MerchantClient, **beneficiary: Any) -> dict[str, Any]:
    return {
        "merchant_account_id": merchant.accounts["GBP"]["id"],
        "amount_in_minor": 100,
        "currency": "GBP",
        "beneficiary": {
            "type": "external_account",
            "account_holder_name": "Ada Lovelace",
            "account_identifier": {"type": "iban", "iban": "GB33BUKB20201555555555"},
            "reference": "guidance",
            **beneficiary,
        },
    }


def _signed_headers(merchant: MerchantClient, content: bytes) -> dict[str, str]:
    key = str(uuid.uuid4())
    return {
        "Authorization": f"Bearer {merchant.token()}",
        "Idempotency-Key": key,
        "Svc-Signature": merchant.sign("POST", "/v3/payouts", content, {"Idempotency-Key": key}),
    }


def test_json_sent_without_its_content_type_is_told_which_to_send(operator: Operator) -> None:
    merchant = operator.new_merchant()
    content = json.dumps(_payout(merchant)).encode()
    for sent in (None, "application/x-www-form-urlencoded"):
        headers = _signed_headers(merchant, content)
        if sent is not None:
            headers["Content-Type"] = sent
        answer = merchant.http.post("/v3/payouts", content=content, headers=headers)
        problem = assert_invalid(answer, "body")
        assert "Content-Type: application/json" in problem["detail"], problem
        assert (sent or "no Content-Type") in problem["detail"], problem
        assert "valid dictionary" not in answer.text


def test_a_beneficiary_without_type_names_the_allowed_types(operator: Operator) -> None:
    merchant = operator.new_merchant()
    body = _payout(merchant)
    del body["beneficiary"]["type"]
    problem = assert_invalid(merchant.signed_post("/v3/payouts", body), "beneficiary")
    expected = "`type` is required: one of 'external_account', 'payment_source', 'user_determined'."
    assert problem["errors"]["beneficiary"] == [expected]
    assert expected in problem["detail"]
    # Nested too: the account identifier's own `type`.
    body = _payout(merchant, account_identifier={"iban": "GB33BUKB20201555555555"})
    problem = assert_invalid(merchant.signed_post("/v3/payouts", body))
    assert problem["errors"]["beneficiary.account_identifier"] == [
        "`type` is required: one of 'sort_code_account_number', 'iban'."
    ]


def test_the_operator_token_on_the_merchant_api_says_which_token_to_use(
    server: RunningServer, operator: Operator
) -> None:
    merchant = operator.new_merchant()
    answer = httpx.post(
        f"{server.base_url}/v3/payouts",
        json=_payout(merchant),
        headers=bearer(server.admin_token),
    )
    problem = assert_problem(answer, 401, "Unauthenticated")
    assert problem["detail"] == (
        "Invalid access token: this is an operator token; use a merchant access token from "
        "/connect/token."
    )


def test_a_signature_by_another_key_names_the_kid(operator: Operator) -> None:
    merchant = operator.new_merchant()
    stranger = signing.private_key_pem(signing.generate_private_key())
    impostor = dataclasses.replace(merchant, private_key_pem=stranger)
    try:
        problem = assert_problem(impostor.signed_post("/v3/payouts", _payout(merchant)), 401)
    finally:
        impostor.http.close()
    assert problem["detail"] == (
        "Invalid request signature: signature does not match the request: it does not verify "
        f"with key {merchant.kid}: is this the key registered for this merchant?"
    )


def test_a_garbage_signature_without_idempotency_key_reports_the_signature(
    operator: Operator,
) -> None:
    merchant = operator.new_merchant()
    answer = merchant.http.post(
        "/v3/payouts",
        json=_payout(merchant),
        headers={**bearer(merchant.token()), "Svc-Signature": "garbage"},
    )
    problem = assert_problem(answer, 401)
    assert problem["detail"] == (
        "Invalid request signature: signature is not a detached JWS (header..signature)."
    )


def test_json_sent_to_connect_token_as_a_form_is_told_how_to_send_it(
    operator: Operator,
) -> None:
    merchant = operator.new_merchant()
    fields = {
        "grant_type": "client_credentials",
        "client_id": merchant.client_id,
        "client_secret": merchant.client_secret,
    }
    for headers in ({"Content-Type": "application/x-www-form-urlencoded"}, {}):
        answer = merchant.http.post(
            "/connect/token", content=json.dumps(fields).encode(), headers=headers
        )
        assert answer.status_code == 400, answer.text
        error = answer.json()
        assert error["error"] == "invalid_request"
        assert "send it form-encoded" in error["error_description"]
        assert "Content-Type: application/json" in error["error_description"]
