"""Repeated headers on signed requests, over HTTP against `bankrail serve`.

A header sent twice has no one value: the signature was once verified over the last
`Idempotency-Key` while the idempotency store kept the first, so a captured `POST /v3/payouts`
sent again with a fresh key ahead of the signed one made a new payout each time, without the
private key. Promises proved:

- on every signed POST (v1 and v3: payments, their authorization-flow actions, refunds,
  mandates and theirs), a request that repeats `Idempotency-Key`, its signature header, or a
  header named in its signature's `tl_headers` is 400 Invalid Parameters naming the header,
  and has no effect;
- the replay of the report (same bytes, `Idempotency-Key: <new>` then the signed key) is 400
  however often it is sent and creates no payout; the same replay of a `POST /v3/payments` is
  400 too, and the signed request still gets its stored answer;
- a repeated `Idempotency-Key` on `POST /sandbox/bank-transfers` (not signed, but answered
  once per key) is 400 and credits nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from e2e_helpers import assert_invalid, bearer
from mandate_helpers import (
    GB_REDIRECT,
    MANDATES,
    RETURN_URI,
    authorised_mandate,
    create_mandate,
    mandate_body,
)
from pay_in_helpers import (
    PAYMENTS,
    authorised_pay_in,
    balances,
    embedded_forms,
    next_action,
    payment_body,
    settled_payment,
)
from payout_helpers import SORT_CODE, external_beneficiary, funded_merchant, payout_body

from support.api import MerchantClient, Operator

PURPOSE = "X-Request-Purpose"  # a header of the merchant's choosing that it also signs
IDEMPOTENCY = "Idempotency-Key"


def _send(
    merchant: MerchantClient, path: str, content: bytes, headers: list[tuple[str, str]]
) -> httpx.Response:
    """POST `content` with the token, JSON content type and exactly `headers`, in order."""
    sent = [*bearer(merchant.token()).items(), ("Content-Type", "application/json"), *headers]
    return merchant.http.post(path, content=content, headers=sent)


def _assert_repeated(answer: httpx.Response, name: str) -> None:
    problem = assert_invalid(answer, name)
    assert name in problem["detail"], problem
    assert "repeated" in problem["detail"], problem


def _payout_ids(merchant: MerchantClient) -> list[str]:
    """Every payout of the merchant's GBP account, as its v3 transaction list shows it."""
    path = f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}/transactions"
    answer = merchant.get(path, type="payout")
    assert answer.status_code == 200, answer.text
    return [item["id"] for item in answer.json()["items"]]


def _v1_transaction_ids(merchant: MerchantClient) -> list[str]:
    answer = merchant.get("/v1/transactions", type="Payout")
    assert answer.status_code == 200, answer.text
    return [record["transaction_id"] for record in answer.json()["results"]]


def _v3_payout(merchant: MerchantClient) -> bytes:
    body = payout_body(merchant, "GBP", 1_000, external_beneficiary(SORT_CODE))
    return json.dumps(body).encode()


# --- the replay of the report -----------------------------------------------------------------


@pytest.mark.parametrize("fresh_first", [True, False], ids=["fresh key first", "signed key first"])
def test_v3_payout_resent_with_a_second_idempotency_key_is_400(
    operator: Operator, fresh_first: bool
) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    content = _v3_payout(merchant)
    key = str(uuid.uuid4())
    signature = merchant.sign("POST", "/v3/payouts", content, {IDEMPOTENCY: key})
    first = _send(
        merchant, "/v3/payouts", content, [("Svc-Signature", signature), (IDEMPOTENCY, key)]
    )
    assert first.status_code == 202, first.text

    for _ in range(3):  # "as often as you like"
        fresh = str(uuid.uuid4())
        keys = [fresh, key] if fresh_first else [key, fresh]
        headers = [("Svc-Signature", signature), *((IDEMPOTENCY, k) for k in keys)]
        _assert_repeated(_send(merchant, "/v3/payouts", content, headers), IDEMPOTENCY)

    assert _payout_ids(merchant) == [first.json()["id"]]
    assert balances(merchant)[1] == 9_000


def test_v3_payment_resent_with_a_second_idempotency_key_is_400(operator: Operator) -> None:
    merchant = operator.new_merchant()
    content = json.dumps(payment_body(merchant)).encode()
    key = str(uuid.uuid4())
    signature = merchant.sign("POST", "/v3/payments", content, {IDEMPOTENCY: key})
    signed = [("Svc-Signature", signature), (IDEMPOTENCY, key)]
    first = _send(merchant, "/v3/payments", content, signed)
    assert first.status_code == 201, first.text

    replay = [("Svc-Signature", signature), (IDEMPOTENCY, str(uuid.uuid4())), (IDEMPOTENCY, key)]
    _assert_repeated(_send(merchant, "/v3/payments", content, replay), IDEMPOTENCY)
    # The signed request itself is still answered from the store: the same payment.
    again = _send(merchant, "/v3/payments", content, signed)
    assert again.status_code == 201, again.text
    assert again.json()["id"] == first.json()["id"]


# --- a repeated header named in tl_headers, or a repeated signature header ---------------------


@pytest.mark.parametrize(
    "copies",
    [("signed", "other"), ("other", "signed"), ("signed", "signed")],
    ids=["signed value first", "signed value last", "same value twice"],
)
def test_v3_payout_repeating_a_signed_header_is_400(
    operator: Operator, copies: tuple[str, str]
) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    content = _v3_payout(merchant)
    key = str(uuid.uuid4())
    signature = merchant.sign("POST", "/v3/payouts", content, {IDEMPOTENCY: key, PURPOSE: "signed"})
    base = [("Svc-Signature", signature), (IDEMPOTENCY, key)]

    repeated = [*base, *((PURPOSE, value) for value in copies)]
    _assert_repeated(_send(merchant, "/v3/payouts", content, repeated), PURPOSE)
    assert _payout_ids(merchant) == []
    assert balances(merchant) == (10_000, 10_000)
    # Sent once, the signed header verifies: it was the repetition that was refused.
    once = _send(merchant, "/v3/payouts", content, [*base, (PURPOSE, "signed")])
    assert once.status_code == 202, once.text


@pytest.mark.parametrize("header", ["Svc-Signature", "X-SVC-Signature"])
def test_v3_payout_with_its_signature_header_twice_is_400(operator: Operator, header: str) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    content = _v3_payout(merchant)
    key = str(uuid.uuid4())
    signature = merchant.sign("POST", "/v3/payouts", content, {IDEMPOTENCY: key})

    twice = [(header, signature), (header, signature), (IDEMPOTENCY, key)]
    _assert_repeated(_send(merchant, "/v3/payouts", content, twice), header)
    assert _payout_ids(merchant) == []


# --- v1 payouts -------------------------------------------------------------------------------


def _v1_body() -> tuple[str, bytes]:
    transaction_id = str(uuid.uuid4())
    body = {
        "transaction_id": transaction_id,
        "beneficiary_name": "Jane Doe",
        "beneficiary_iban": "GB29NWBK60161331926819",
        "beneficiary_reference": "repeat",
        "currency": "GBP",
        "amount_in_minor": 1_000,
        "context_code": "withdrawal",
    }
    return transaction_id, json.dumps(body).encode()


@pytest.mark.parametrize(
    ("repeated", "signed_headers"),
    [
        (PURPOSE, {PURPOSE: "signed"}),
        (IDEMPOTENCY, {IDEMPOTENCY: "v1-key"}),
        (IDEMPOTENCY, {}),  # not signed, not needed by v1: still one value or none
        ("X-SVC-Signature", {}),
    ],
    ids=["tl_headers header", "signed Idempotency-Key", "unsigned Idempotency-Key", "signature"],
)
def test_v1_payout_repeating_a_header_is_400(
    operator: Operator, repeated: str, signed_headers: dict[str, str]
) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    transaction_id, content = _v1_body()
    signature = merchant.sign("POST", "/v1/payouts", content, signed_headers)
    once = [("X-SVC-Signature", signature), *signed_headers.items()]
    copies = [value for name, value in once if name == repeated] or ["k", "k"]
    twice = [*once, *((repeated, value) for value in copies)]

    _assert_repeated(_send(merchant, "/v1/payouts", content, twice), repeated)
    assert _v1_transaction_ids(merchant) == []
    assert balances(merchant) == (10_000, 10_000)
    answer = _send(merchant, "/v1/payouts", content, once)
    assert answer.status_code == 202, answer.text
    assert _v1_transaction_ids(merchant) == [transaction_id]


# --- the other signed POSTs -------------------------------------------------------------------


@dataclass(frozen=True)
class SignedPost:
    """A signed POST of one route: its path, body, whether it needs an Idempotency-Key, and
    the GET whose answer it would change (the refused request must leave it as it was)."""

    path: str
    body: Any
    keyed: bool = True
    state: str = PAYMENTS


def _new_payment_id(merchant: MerchantClient, **body: Any) -> str:
    answer = merchant.signed_post(PAYMENTS, payment_body(merchant, **body))
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def _payment_at(merchant: MerchantClient, action: str, **body: Any) -> str:
    """A new payment whose authorization flow was started and now waits for `action`."""
    payment_id = _new_payment_id(merchant, **body)
    flow = merchant.signed_post(f"{PAYMENTS}/{payment_id}/authorization-flow", FLOW)
    assert flow.status_code == 200, flow.text
    assert next_action(flow.json())["type"] == action, flow.text
    return payment_id


def _payment_at_last_form(merchant: MerchantClient) -> str:
    """A new payment at the embedded provider whose first two forms are answered."""
    payment_id = _payment_at(merchant, "form", currency="EUR", provider_id=DE_EMBEDDED)
    for body in embedded_forms("test_executed")[:-1]:
        answer = merchant.signed_post(
            f"{PAYMENTS}/{payment_id}/authorization-flow/actions/form", body
        )
        assert answer.status_code == 200, answer.text
    return payment_id


def _mandate_at_provider_selection(merchant: MerchantClient) -> str:
    """A new user-selected mandate whose consent journey waits for the payer's bank."""
    mandate_id = str(create_mandate(merchant, mandate_body(merchant, provider_id=None))["id"])
    flow = merchant.signed_post(f"{MANDATES}/{mandate_id}/authorization-flow", MANDATE_FLOW)
    assert flow.status_code == 200, flow.text
    assert next_action(flow.json())["type"] == "provider_selection", flow.text
    return mandate_id


def _payment_post(path: str, body: Any, payment_id: str) -> SignedPost:
    """A POST under the payment; its state is the payment (its refunds, for a refund)."""
    state = f"{PAYMENTS}/{payment_id}" + ("/refunds" if path == "refunds" else "")
    return SignedPost(f"{PAYMENTS}/{payment_id}/{path}", body, state=state)


def _mandate_post(path: str, body: Any, mandate_id: str) -> SignedPost:
    return SignedPost(f"{MANDATES}/{mandate_id}/{path}", body, state=f"{MANDATES}/{mandate_id}")


def _read(merchant: MerchantClient, path: str) -> Any:
    answer = merchant.get(path)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _settled_payment_id(merchant: MerchantClient) -> str:
    payment_id = authorised_pay_in(merchant, 1_000, {"id": "payer"})
    return str(settled_payment(merchant, payment_id)["id"])


FLOW = {"provider_selection": {}, "redirect": {"return_uri": "https://shop.example/back"}}
MANDATE_FLOW = {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}}
DE_EMBEDDED = "mock-payments-de-embedded"
# The embedded provider's last form: its code decides, so the payment visibly changes.
FORM = embedded_forms("test_executed")[-1]
DEPOSIT = {
    "user_id": "u1",
    "deposit": {"deposit_id": "d-repeat", "amount_in_minor": 1_000, "currency": "GBP"},
    "auth_flow": {"type": "redirect", "return_uri": "https://shop.example/back"},
}
ROUTES: dict[str, Callable[[MerchantClient], SignedPost]] = {
    "POST /v3/payments": lambda m: SignedPost("/v3/payments", payment_body(m)),
    "POST /payments": lambda m: SignedPost("/payments", payment_body(m)),
    "POST authorization-flow": lambda m: _payment_post(
        "authorization-flow", FLOW, _new_payment_id(m)
    ),
    "POST actions/provider-selection": lambda m: _payment_post(
        "authorization-flow/actions/provider-selection",
        {"provider_id": GB_REDIRECT},
        _payment_at(m, "provider_selection"),
    ),
    "POST actions/form": lambda m: _payment_post(
        "authorization-flow/actions/form",
        FORM,
        _payment_at_last_form(m),
    ),
    "POST actions/cancel": lambda m: _payment_post("actions/cancel", None, _new_payment_id(m)),
    "POST /v1/users/deposits": lambda m: SignedPost("/v1/users/deposits", DEPOSIT, keyed=False),
    "POST refunds": lambda m: _payment_post(
        "refunds", {"amount_in_minor": 100, "reference": "r"}, _settled_payment_id(m)
    ),
    "POST /v3/mandates": lambda m: SignedPost(MANDATES, mandate_body(m), state=MANDATES),
    "POST mandate authorization-flow": lambda m: _mandate_post(
        "authorization-flow", MANDATE_FLOW, str(create_mandate(m)["id"])
    ),
    "POST mandate actions/provider-selection": lambda m: _mandate_post(
        "authorization-flow/actions/provider-selection",
        {"provider_id": GB_REDIRECT},
        _mandate_at_provider_selection(m),
    ),
    "POST mandate revoke": lambda m: _mandate_post("revoke", None, authorised_mandate(m)[0]),
}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("repeated", [IDEMPOTENCY, PURPOSE])
def test_every_signed_post_refuses_a_repeated_header(
    operator: Operator, route: str, repeated: str
) -> None:
    merchant = operator.new_merchant()
    post = ROUTES[route](merchant)
    content = b"" if post.body is None else json.dumps(post.body).encode()
    signed = {PURPOSE: "signed"}
    if post.keyed:
        signed[IDEMPOTENCY] = str(uuid.uuid4())
    signature = merchant.sign("POST", post.path, content, signed)
    once = [("Svc-Signature", signature), *signed.items()]
    extra = 1 if repeated in signed else 2  # legacy deposits take no Idempotency-Key
    twice = [*once, *((repeated, str(uuid.uuid4())) for _ in range(extra))]

    before = _read(merchant, post.state)
    _assert_repeated(_send(merchant, post.path, content, twice), repeated)
    assert _read(merchant, post.state) == before
    answer = _send(merchant, post.path, content, once)
    assert answer.status_code < 300, answer.text
    assert _read(merchant, post.state) != before


def test_sandbox_bank_transfer_refuses_a_repeated_idempotency_key(operator: Operator) -> None:
    """Not signed, but answered once per Idempotency-Key: the key must have one value too."""
    merchant = operator.new_merchant(currencies=("GBP",))
    account = merchant.accounts["GBP"]
    iban = next(i["iban"] for i in account["account_identifiers"] if i["type"] == "iban")
    body = {
        "iban": iban,
        "amount_in_minor": 500,
        "currency": "GBP",
        "remitter_name": "R",
        "reference": "r",
    }
    keys = [(IDEMPOTENCY, str(uuid.uuid4())), (IDEMPOTENCY, str(uuid.uuid4()))]

    _assert_repeated(
        operator.http.post("/sandbox/bank-transfers", json=body, headers=keys), IDEMPOTENCY
    )
    assert balances(merchant) == (0, 0)
    assert (
        operator.http.post("/sandbox/bank-transfers", json=body, headers=keys[:1]).status_code
        == 201
    )
    assert balances(merchant) == (500, 500)
