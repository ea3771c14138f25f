"""The closed loop over HTTP against `bankrail serve`: a payer pays in through the headless mock
bank, the payment settles with a payment source, and the merchant pays that user back to that
source (spec 1.3, 2.4, 2.8, 4.2, 6.2; docs/api.md).

Every merchant request is signed with the public `truelayer-signing` library, and every webhook
the loopback receiver gets is verified with it against the service's JWKS."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from e2e_helpers import (
    assert_invalid,
    assert_problem,
    bearer,
    is_uuid,
    parse_time,
    wait_record_status,
)
from pay_in_helpers import authorised_pay_in as _pay_in
from pay_in_helpers import balances as _balances
from pay_in_helpers import (
    merchant_with_webhooks as _merchant,
)
from pay_in_helpers import settled_payment as _settled
from pay_in_helpers import verify_webhook as _verify_webhook
from pay_in_helpers import wait_webhook as _wait_webhook
from pay_in_helpers import webhooks_with

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver

PAYMENTS = "/v3/payments"
PAYOUTS = "/v3/payouts"
GB_REDIRECT = "mock-payments-gb-redirect"
DE_REDIRECT = "mock-payments-de-redirect"
RETURN_URI = "https://shop.example/back"


# --- helpers ----------------------------------------------------------------------------------


def _payout_body(
    merchant: MerchantClient,
    amount: int,
    user_id: str,
    source_id: str,
    currency: str = "GBP",
    reference: str = "refund 1",
) -> dict[str, Any]:
    return {
        "merchant_account_id": merchant.accounts[currency]["id"],
        "amount_in_minor": amount,
        "currency": currency,
        "beneficiary": {
            "type": "payment_source",
            "user_id": user_id,
            "payment_source_id": source_id,
            "reference": reference,
        },
    }


def _payout_outcome(merchant: MerchantClient, body: dict[str, Any]) -> dict[str, Any]:
    """POST the payout (asserting the 202) and wait for it to be executed or failed."""
    answer = merchant.signed_post(PAYOUTS, body)
    assert answer.status_code == 202, answer.text
    return wait_record_status(merchant, f"{PAYOUTS}/{answer.json()['id']}", {"executed", "failed"})


# --- the headline -----------------------------------------------------------------------------


def test_pay_in_then_pay_back_to_the_payment_source(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = _merchant(operator, receiver)
    user = {"id": f"user-{uuid.uuid4()}", "name": "Jane Payer", "email": "jane@example.com"}
    assert _balances(merchant) == (0, 0)

    # 1. The payer pays 10.00 in through the mock bank.
    payment_id = _pay_in(merchant, 1_000, user)
    payment = _settled(merchant, payment_id)
    source = payment["payment_source"]
    assert is_uuid(source["id"])
    assert source["account_holder_name"] == "Jane Payer"
    identifiers = {i["type"]: i for i in source["account_identifiers"]}
    assert set(identifiers) == {"sort_code_account_number", "iban"}
    assert _balances(merchant) == (1_000, 1_000)

    executed = _wait_webhook(receiver, "payment_id", payment_id, "payment_executed")
    settled = _wait_webhook(receiver, "payment_id", payment_id, "payment_settled")
    assert settled.json()["payment_source"] == source
    assert settled.json()["user_id"] == user["id"]
    assert settled.json()["metadata"] == {"purpose": "deposit"}
    assert executed.json()["executed_at"] == payment["executed_at"]

    # 2. The merchant pays 4.00 back to that user and account.
    body = _payout_body(merchant, 400, user["id"], source["id"])
    body["metadata"] = {"reason": "partial refund"}
    answer = merchant.signed_post(PAYOUTS, body)
    assert answer.status_code == 202, answer.text
    assert set(answer.json()) == {"id"}
    payout_id = answer.json()["id"]
    assert is_uuid(payout_id)

    payout = wait_record_status(merchant, f"{PAYOUTS}/{payout_id}", {"executed", "failed"})
    assert payout["status"] == "executed", payout
    assert payout["merchant_account_id"] == merchant.accounts["GBP"]["id"]
    assert payout["amount_in_minor"] == 400
    assert payout["currency"] == "GBP"
    assert payout["scheme_id"] == "faster_payments_service"
    assert payout["beneficiary"] == {
        "type": "payment_source",
        "user_id": user["id"],
        "payment_source_id": source["id"],
        "reference": "refund 1",
        "account_holder_name": "Jane Payer",
        "account_identifiers": source["account_identifiers"],
    }
    assert payout["metadata"] == {"reason": "partial refund"}
    assert parse_time(payout["executed_at"]) >= parse_time(payment["settled_at"])
    assert _balances(merchant) == (600, 600)

    done = _wait_webhook(receiver, "payout_id", payout_id, "payout_executed").json()
    assert done["event_version"] == 1
    assert is_uuid(done["event_id"])
    assert done["merchant_account_id"] == merchant.accounts["GBP"]["id"]
    assert done["executed_at"] == payout["executed_at"]
    assert done["beneficiary"]["type"] == "payment_source"
    assert done["beneficiary"]["payment_source_id"] == source["id"]
    assert done["beneficiary"]["user_id"] == user["id"]
    assert done["metadata"] == {"reason": "partial refund"}

    # 3. Every webhook verifies with the public library, and the statement shows both legs.
    jwks = merchant.http.get("/.well-known/jwks").json()
    for request in [executed, settled, *webhooks_with(receiver, "payout_id", payout_id)]:
        _verify_webhook(jwks, request)
    answer = merchant.get(f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}/transactions")
    assert answer.status_code == 200, answer.text
    legs = {(i["type"], i["amount_in_minor"]) for i in answer.json()["items"]}
    assert {("merchant_account_payment", 1_000), ("payout", 400)} <= legs

    check = operator.get("/admin/ledger/check")
    assert check.status_code == 200, check.text
    assert check.json() == {"ok": True, "violations": []}


def test_the_source_is_paid_back_again_after_a_second_deposit(operator: Operator) -> None:
    merchant = _merchant(operator)
    user = {"id": "repeat-payer"}
    first = _settled(merchant, _pay_in(merchant, 500, user))["payment_source"]
    second = _settled(merchant, _pay_in(merchant, 700, user))["payment_source"]
    assert first["id"] == second["id"]
    assert _balances(merchant) == (1_200, 1_200)
    # Default holder name when the user gave none.
    assert first["account_holder_name"]

    payout = _payout_outcome(merchant, _payout_body(merchant, 1_200, user["id"], first["id"]))
    assert payout["status"] == "executed", payout
    assert _balances(merchant) == (0, 0)


# --- refused closed-loop payouts --------------------------------------------------------------


def test_a_source_of_another_user_is_refused(operator: Operator) -> None:
    merchant = _merchant(operator)
    payer = {"id": "payer-a"}
    source = _settled(merchant, _pay_in(merchant, 1_000, payer))["payment_source"]
    # Another user who also paid in: neither may use the other's source.
    other = {"id": "payer-b"}
    other_source = _settled(merchant, _pay_in(merchant, 1_000, other))["payment_source"]
    assert other_source["id"] != source["id"]

    for user_id, source_id in (
        ("payer-b", source["id"]),
        ("payer-a", other_source["id"]),
        ("never-paid", source["id"]),
    ):
        answer = merchant.signed_post(PAYOUTS, _payout_body(merchant, 100, user_id, source_id))
        assert_invalid(answer, "beneficiary.payment_source_id")
    # Unknown source id.
    answer = merchant.signed_post(
        PAYOUTS, _payout_body(merchant, 100, "payer-a", str(uuid.uuid4()))
    )
    assert_invalid(answer, "beneficiary.payment_source_id")
    assert _balances(merchant) == (2_000, 2_000)


def test_a_source_from_another_merchant_account_is_refused(operator: Operator) -> None:
    merchant = _merchant(operator)
    user = {"id": "two-currency-payer"}
    # The source paid into the GBP account; the EUR account has funds of its own.
    source = _settled(merchant, _pay_in(merchant, 1_000, user))["payment_source"]
    topped = operator.top_up(merchant.accounts["EUR"], 5_000)
    assert topped.status_code == 201, topped.text

    body = _payout_body(merchant, 100, user["id"], source["id"], currency="EUR")
    assert_invalid(merchant.signed_post(PAYOUTS, body), "beneficiary.payment_source_id")
    # Paying in through the EUR account gives that user a separate EUR source.
    eur_source = _settled(
        merchant, _pay_in(merchant, 300, user, currency="EUR", provider_id=DE_REDIRECT)
    )["payment_source"]
    assert eur_source["id"] != source["id"]
    assert [i["type"] for i in eur_source["account_identifiers"]] == ["iban"]
    # And that one cannot be paid from GBP.
    body = _payout_body(merchant, 100, user["id"], eur_source["id"], currency="GBP")
    assert_invalid(merchant.signed_post(PAYOUTS, body), "beneficiary.payment_source_id")
    # But it can from EUR.
    body = _payout_body(merchant, 100, user["id"], eur_source["id"], currency="EUR")
    payout = _payout_outcome(merchant, body)
    assert payout["status"] == "executed", payout
    assert payout["scheme_id"] == "sepa_credit_transfer_instant"
    assert _balances(merchant, "EUR") == (5_200, 5_200)
    assert _balances(merchant, "GBP") == (1_000, 1_000)


def test_a_source_of_another_merchant_is_refused(operator: Operator) -> None:
    owner = _merchant(operator)
    stranger = _merchant(operator)
    user = {"id": "shared-user-id"}
    source = _settled(owner, _pay_in(owner, 1_000, user))["payment_source"]
    assert operator.top_up(stranger.accounts["GBP"], 5_000).status_code == 201
    body = _payout_body(stranger, 100, user["id"], source["id"])
    assert_invalid(stranger.signed_post(PAYOUTS, body), "beneficiary.payment_source_id")
    # Nor can the stranger list the owner's sources.
    answer = stranger.get(
        f"/v3/merchant-accounts/{owner.accounts['GBP']['id']}/payment-sources",
        user_id=user["id"],
    )
    assert_problem(answer, 404)
    answer = stranger.get(
        f"/v3/merchant-accounts/{stranger.accounts['GBP']['id']}/payment-sources",
        user_id=user["id"],
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["items"] == []


def test_closed_loop_payout_needs_a_signature(operator: Operator) -> None:
    merchant = _merchant(operator)
    user = {"id": "signed-only"}
    source = _settled(merchant, _pay_in(merchant, 1_000, user))["payment_source"]
    body = _payout_body(merchant, 100, user["id"], source["id"])
    answer = merchant.http.post(
        PAYOUTS,
        json=body,
        headers={**bearer(merchant.token()), "Idempotency-Key": str(uuid.uuid4())},
    )
    assert_problem(answer, 401, "Unauthenticated")
    answer = merchant.signed_post(PAYOUTS, body, idempotency_key=None)
    assert_problem(answer, 401, "Unauthenticated")
    assert _balances(merchant) == (1_000, 1_000)
    check = operator.get("/admin/ledger/check").json()
    assert check["ok"] is True, check


def test_a_failed_payment_gives_no_source(operator: Operator) -> None:
    merchant = _merchant(operator)
    user = {"id": "rejected-payer"}
    body = {
        "amount_in_minor": 1_000,
        "currency": "GBP",
        "merchant_account_id": merchant.accounts["GBP"]["id"],
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": {"type": "preselected", "provider_id": GB_REDIRECT},
        },
        "user": user,
    }
    answer = merchant.signed_post(PAYMENTS, body)
    assert answer.status_code == 201, answer.text
    payment_id = answer.json()["id"]
    answer = merchant.signed_post(
        f"{PAYMENTS}/{payment_id}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}},
    )
    uri = answer.json()["authorization_flow"]["actions"]["next"]["uri"]
    token = parse_qs(urlsplit(uri).fragment)["token"][0]
    with httpx.Client(base_url=str(merchant.http.base_url), timeout=30) as http:
        answer = http.post(
            f"/mock-bank/api/single-immediate-payments/{payment_id}/action",
            json={"action": "RejectExecution"},
            headers=bearer(token),
        )
    assert answer.status_code == 202, answer.text
    payment = wait_record_status(merchant, f"{PAYMENTS}/{payment_id}", {"payment_failed"})
    assert "payment_source" not in payment
    answer = merchant.get(
        f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}/payment-sources",
        user_id=user["id"],
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["items"] == []


# --- screening --------------------------------------------------------------------------------


def test_a_payout_back_to_a_source_whose_name_looks_screened_is_blocked(
    operator: Operator,
) -> None:
    """The closed loop screens the source's name by the same skeleton as an open-loop payee."""
    before = operator.get("/admin/screening-list")
    assert before.status_code == 200, before.text
    try:
        listed = operator.post("/admin/screening-list", {"names": ["Evil Corp"]})
        assert listed.status_code == 200, listed.text
        merchant = _merchant(operator)
        user = {"id": f"user-{uuid.uuid4()}", "name": "\u0415vil\u200b Corp."}
        source = _settled(merchant, _pay_in(merchant, 1_000, user))["payment_source"]
        payout = _payout_outcome(merchant, _payout_body(merchant, 400, user["id"], source["id"]))
        assert payout["status"] == "failed", payout
        assert payout["failure_reason"] == "blocked"
        assert _balances(merchant) == (1_000, 1_000)
    finally:
        operator.post("/admin/screening-list", {"names": before.json()["names"]})
