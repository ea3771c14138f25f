"""A captured signed request, replayed over HTTP (docs/api.md, "Idempotency"): the exact
headers and body of a request that was accepted, sent again with another client's token of
the same merchant or after the Idempotency-Key's six hours of service time, never take effect
a second time. Within the key's window the first answer is replayed; after it the replay is a
409 problem saying the request was already used. A v1 payout's transaction_id is its key for
good, so its replay is answered 202 again, however late."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from e2e_helpers import assert_problem
from mandate_helpers import mandate_body
from pay_in_helpers import advance_clock, balances, payment_body
from payout_helpers import (
    PATH,
    SORT_CODE,
    external_beneficiary,
    funded_merchant,
    payout_body,
    wait_payout_status,
)

from support.api import MerchantClient, Operator

KEY_WINDOW_SECONDS = 6 * 3600
Captured = tuple[str, bytes, dict[str, str]]


def _capture(
    merchant: MerchantClient,
    path: str,
    body: dict[str, Any],
    *,
    key: str | None = None,
    signature_header: str = "Svc-Signature",
) -> Captured:
    """What an attacker who saw the request on the wire replays: path, body and every
    header but the access token (which the signature does not cover)."""
    content = json.dumps(body).encode()
    signed = {} if key is None else {"Idempotency-Key": key}
    headers = {
        "Content-Type": "application/json",
        signature_header: merchant.sign("POST", path, content, signed),
        **signed,
    }
    return path, content, headers


def _send(merchant: MerchantClient, captured: Captured, token: str) -> httpx.Response:
    path, content, headers = captured
    return merchant.http.post(
        path, content=content, headers={**headers, "Authorization": f"Bearer {token}"}
    )


def _other_clients_token(operator: Operator, merchant: MerchantClient) -> str:
    """An access token of a second client of the same merchant."""
    client = operator.post(f"/admin/merchants/{merchant.merchant_id}/clients", {}).json()
    form = {
        "grant_type": "client_credentials",
        "client_id": client["client_id"],
        "client_secret": client["client_secret"],
    }
    answer = merchant.http.post("/connect/token", data=form)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def _payouts(merchant: MerchantClient) -> list[dict[str, Any]]:
    answer = merchant.get("/v3/payouts")
    assert answer.status_code == 200, answer.text
    return list(answer.json()["items"])


def _paid_once(merchant: MerchantClient, payout_id: str) -> None:
    """The merchant has this one payout, executed, and its balance moved once."""
    assert [payout["id"] for payout in _payouts(merchant)] == [payout_id]
    assert wait_payout_status(merchant, payout_id, {"executed", "failed"})["status"] == "executed"
    assert balances(merchant) == (4_000, 4_000)


def test_a_captured_payout_sent_with_another_clients_token_replays_the_first_answer(
    operator: Operator,
) -> None:
    merchant = funded_merchant(operator, gbp=5_000)
    body = payout_body(merchant, "GBP", 1_000, external_beneficiary(SORT_CODE))
    captured = _capture(merchant, PATH, body, key=str(uuid.uuid4()))
    first = _send(merchant, captured, merchant.token())
    assert first.status_code == 202, first.text

    replayed = _send(merchant, captured, _other_clients_token(operator, merchant))
    assert (replayed.status_code, replayed.content) == (202, first.content)
    _paid_once(merchant, first.json()["id"])


def test_a_captured_payout_replayed_after_its_keys_window_is_a_409(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=5_000)
    body = payout_body(merchant, "GBP", 1_000, external_beneficiary(SORT_CODE))
    captured = _capture(merchant, PATH, body, key=str(uuid.uuid4()))
    first = _send(merchant, captured, merchant.token())
    assert first.status_code == 202, first.text

    advance_clock(operator, KEY_WINDOW_SECONDS + 1)
    merchant.forget_token()  # the token expired with the hours; the attacker gets a new one
    for token in (merchant.token(), _other_clients_token(operator, merchant)):
        refused = assert_problem(_send(merchant, captured, token), 409, "Conflict")
        assert "already used" in refused["detail"]
        assert "signature" in refused["detail"]
    _paid_once(merchant, first.json()["id"])

    # The merchant's own new request under that key, signed anew, is a new payout.
    again = merchant.signed_post(PATH, body, idempotency_key=captured[2]["Idempotency-Key"])
    assert again.status_code == 202, again.text
    assert again.json()["id"] != first.json()["id"]


def _replayed_within_its_window_and_refused_after(
    operator: Operator, path: str, body: Callable[[MerchantClient], dict[str, Any]]
) -> None:
    """A create captured at `path` is answered again (the stored 201) with another client's
    token while its key is valid; after the key window it is a 409, and `path` lists the one
    resource it made."""
    merchant = funded_merchant(operator)
    captured = _capture(merchant, path, body(merchant), key=str(uuid.uuid4()))
    first = _send(merchant, captured, merchant.token())
    assert first.status_code == 201, first.text
    replayed = _send(merchant, captured, _other_clients_token(operator, merchant))
    assert (replayed.status_code, replayed.content) == (201, first.content)

    advance_clock(operator, KEY_WINDOW_SECONDS + 1)
    merchant.forget_token()
    refused = assert_problem(_send(merchant, captured, merchant.token()), 409, "Conflict")
    assert "already used" in refused["detail"]
    listed = merchant.get(path).json()["items"]
    assert [item["id"] for item in listed] == [first.json()["id"]]


def test_a_captured_payment_is_replayed_within_its_window_and_refused_after(
    operator: Operator,
) -> None:
    _replayed_within_its_window_and_refused_after(operator, "/v3/payments", payment_body)


def test_a_captured_mandate_is_replayed_within_its_window_and_refused_after(
    operator: Operator,
) -> None:
    # The mandate, payment-flow and legacy POSTs are answered by respond_once: the same rule.
    _replayed_within_its_window_and_refused_after(operator, "/v3/mandates", mandate_body)


def test_a_captured_v1_payout_is_answered_202_again_however_late(operator: Operator) -> None:
    merchant = funded_merchant(operator, eur=5_000)
    transaction_id = str(uuid.uuid4())
    body = {
        "transaction_id": transaction_id,
        "beneficiary_name": "Jane Doe",
        "beneficiary_iban": "DE89370400440532013000",
        "beneficiary_reference": "payout 1",
        "currency": "EUR",
        "amount_in_minor": 1_000,
        "context_code": "withdrawal",
    }
    captured = _capture(merchant, "/v1/payouts", body, signature_header="X-SVC-Signature")
    first = _send(merchant, captured, merchant.token())
    assert first.status_code == 202, first.text

    advance_clock(operator, KEY_WINDOW_SECONDS + 1)
    merchant.forget_token()
    for token in (merchant.token(), _other_clients_token(operator, merchant)):
        replayed = _send(merchant, captured, token)
        assert (replayed.status_code, replayed.content) == (202, first.content)
    transactions = merchant.get("/v1/transactions", type="Payout").json()["results"]
    assert [item["transaction_id"] for item in transactions] == [transaction_id]
    assert balances(merchant, "EUR")[1] == 4_000


def _resigned_retry_is_refused_after_the_window(
    operator: Operator, merchant: MerchantClient, path: str, body: dict[str, Any], status: int
) -> str:
    """Send a request, then its retry signed anew (ECDSA signs differently each time) under
    the same key: the retry gets the first answer. Once the key's window is over, a capture
    of the retry is refused as used too. Returns the id the first answer created."""
    key = str(uuid.uuid4())
    first = _send(merchant, _capture(merchant, path, body, key=key), merchant.token())
    assert first.status_code == status, first.text
    retry = _capture(merchant, path, body, key=key)
    replayed = _send(merchant, retry, merchant.token())
    assert (replayed.status_code, replayed.content) == (status, first.content)

    advance_clock(operator, KEY_WINDOW_SECONDS + 1)
    merchant.forget_token()
    refused = assert_problem(_send(merchant, retry, merchant.token()), 409, "Conflict")
    assert "already used" in refused["detail"]
    return str(first.json()["id"])


def test_a_payout_retry_signed_anew_is_refused_after_the_window_too(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=5_000)
    body = payout_body(merchant, "GBP", 1_000, external_beneficiary(SORT_CODE))
    payout_id = _resigned_retry_is_refused_after_the_window(operator, merchant, PATH, body, 202)
    _paid_once(merchant, payout_id)


def test_a_payment_and_a_mandate_retry_signed_anew_are_refused_after_the_window_too(
    operator: Operator,
) -> None:
    # Payments take the payments' batch path, mandates respond_once's: the same claim step.
    merchant = funded_merchant(operator)
    payment_id = _resigned_retry_is_refused_after_the_window(
        operator, merchant, "/v3/payments", payment_body(merchant), 201
    )
    listed = merchant.get("/v3/payments").json()["items"]
    assert [payment["id"] for payment in listed] == [payment_id]
    mandate_id = _resigned_retry_is_refused_after_the_window(
        operator, merchant, "/v3/mandates", mandate_body(merchant), 201
    )
    listed = merchant.get("/v3/mandates").json()["items"]
    assert [mandate["id"] for mandate in listed] == [mandate_id]
