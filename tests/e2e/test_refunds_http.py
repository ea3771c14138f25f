"""Refunds of settled pay-ins over HTTP against `bankrail serve` (docs/api.md "Refunds"):
the money, the statuses, the webhooks, the limits, and concurrency."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from e2e_helpers import (
    assert_invalid,
    assert_problem,
    get_record,
    is_uuid,
    parse_time,
    wait_record_status,
)
from pay_in_helpers import (
    authorised_pay_in,
    balances,
    merchant_with_webhooks,
    payment_body,
    settled_payment,
    verify_webhook,
    wait_webhook,
)
from payout_helpers import SORT_CODE, external_beneficiary, payout_body

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver


def _refunds(payment_id: str) -> str:
    return f"/v3/payments/{payment_id}/refunds"


def _settled_pay_in(merchant: MerchantClient, amount: int) -> dict[str, Any]:
    user = {"id": f"user-{uuid.uuid4()}", "name": "Jane Payer"}
    return settled_payment(merchant, authorised_pay_in(merchant, amount, user))


def _refund(merchant: MerchantClient, payment_id: str, amount: int, **extra: Any) -> httpx.Response:
    body = {"amount_in_minor": amount, "reference": "refund", **extra}
    return merchant.signed_post(_refunds(payment_id), body)


def _accepted(answer: httpx.Response) -> str:
    assert answer.status_code == 201, answer.text
    assert set(answer.json()) == {"id"}
    refund_id = str(answer.json()["id"])
    assert is_uuid(refund_id)
    return refund_id


def _wait_refund(merchant: MerchantClient, payment_id: str, refund_id: str) -> dict[str, Any]:
    path = f"{_refunds(payment_id)}/{refund_id}"
    return wait_record_status(merchant, path, {"executed", "failed"})


def _ledger_is_clean(operator: Operator) -> None:
    check = operator.get("/admin/ledger/check")
    assert check.status_code == 200, check.text
    assert check.json() == {"ok": True, "violations": []}


def test_two_partial_refunds_move_the_money_and_are_announced(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = merchant_with_webhooks(operator, receiver)
    payment = _settled_pay_in(merchant, 10_000)
    assert payment["refunded_amount_in_minor"] == 0
    assert balances(merchant) == (10_000, 10_000)

    first = _accepted(_refund(merchant, payment["id"], 3_000, metadata={"order": "A-1"}))
    # The funds are held at the 201: available falls at once; current falls at the
    # execution, which the worker may already have taken.
    current, available = balances(merchant)
    assert available == 7_000
    assert current in (10_000, 7_000)
    second = _accepted(_refund(merchant, payment["id"], 2_500))

    done = [_wait_refund(merchant, payment["id"], r) for r in (first, second)]
    assert [r["status"] for r in done] == ["executed", "executed"]
    assert balances(merchant) == (4_500, 4_500)
    refund = done[0]
    assert refund["id"] == first
    assert refund["payment_id"] == payment["id"]
    assert refund["amount_in_minor"] == 3_000
    assert refund["currency"] == "GBP"
    assert refund["reference"] == "refund"
    assert refund["metadata"] == {"order": "A-1"}
    assert parse_time(refund["created_at"]) <= parse_time(refund["authorized_at"])
    assert parse_time(refund["authorized_at"]) <= parse_time(refund["executed_at"])
    assert "failure_reason" not in refund

    listed = get_record(merchant, _refunds(payment["id"]))
    assert listed == {"items": done}
    assert (
        get_record(merchant, f"/v3/payments/{payment['id']}")["refunded_amount_in_minor"] == 5_500
    )

    jwks = merchant.http.get("/.well-known/jwks").json()
    for refund_id in (first, second):
        received = wait_webhook(receiver, "refund_id", refund_id, "refund_executed")
        verify_webhook(jwks, received)
        event = received.json()
        assert set(event) == {
            "type",
            "event_version",
            "event_id",
            "refund_id",
            "payment_id",
            "executed_at",
            "scheme_id",
            "metadata",
        }
        assert event["payment_id"] == payment["id"]
        assert event["scheme_id"] == "faster_payments_service"
        assert event["executed_at"] == next(r for r in done if r["id"] == refund_id)["executed_at"]

    account = merchant.accounts["GBP"]["id"]
    moves = merchant.get(f"/v3/merchant-accounts/{account}/transactions", type="refund").json()
    assert sorted((m["id"], m["amount_in_minor"], m["status"]) for m in moves["items"]) == sorted(
        [(first, 3_000, "executed"), (second, 2_500, "executed")]
    )
    _ledger_is_clean(operator)


def test_more_than_is_left_is_400_and_changes_nothing(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    payment = _settled_pay_in(merchant, 10_000)
    _accepted(_refund(merchant, payment["id"], 7_000))
    assert_invalid(_refund(merchant, payment["id"], 3_001), "amount_in_minor")
    assert balances(merchant)[1] == 3_000
    payment = get_record(merchant, f"/v3/payments/{payment['id']}")
    assert payment["refunded_amount_in_minor"] == 7_000
    assert len(get_record(merchant, _refunds(payment["id"]))["items"]) == 1
    _accepted(_refund(merchant, payment["id"], 3_000))
    assert_invalid(_refund(merchant, payment["id"], 1), "amount_in_minor")


def test_a_failed_refund_gives_the_funds_and_the_allowance_back(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = merchant_with_webhooks(operator, receiver)
    payment = _settled_pay_in(merchant, 5_000)
    refund_id = _accepted(_refund(merchant, payment["id"], 5_000, reference="fail:scheme_error"))
    refund = _wait_refund(merchant, payment["id"], refund_id)
    assert refund["status"] == "failed"
    assert refund["failure_reason"] == "scheme_error"
    assert "failed_at" in refund
    assert balances(merchant) == (5_000, 5_000)
    assert get_record(merchant, f"/v3/payments/{payment['id']}")["refunded_amount_in_minor"] == 0
    event = wait_webhook(receiver, "refund_id", refund_id, "refund_failed").json()
    assert event["failure_reason"] == "scheme_error"
    assert event["failed_at"] == refund["failed_at"]
    # What failed may be refunded again.
    again = _accepted(_refund(merchant, payment["id"], 5_000))
    assert _wait_refund(merchant, payment["id"], again)["status"] == "executed"
    assert balances(merchant) == (0, 0)
    _ledger_is_clean(operator)


def test_a_refund_without_available_funds_fails_with_insufficient_funds(
    operator: Operator,
) -> None:
    merchant = merchant_with_webhooks(operator)
    payment = _settled_pay_in(merchant, 5_000)
    # A payout held back for a day takes the funds first.
    body = payout_body(
        merchant, "GBP", 4_000, external_beneficiary(SORT_CODE, reference="delay:86400")
    )
    assert merchant.signed_post("/v3/payouts", body).status_code == 202
    refund_id = _accepted(_refund(merchant, payment["id"], 2_000))
    refund = _wait_refund(merchant, payment["id"], refund_id)
    assert refund["status"] == "failed"
    assert refund["failure_reason"] == "insufficient_funds"
    assert balances(merchant) == (5_000, 1_000)
    assert get_record(merchant, f"/v3/payments/{payment['id']}")["refunded_amount_in_minor"] == 0
    _ledger_is_clean(operator)


def test_only_a_settled_payment_of_ones_own_can_be_refunded(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    other = merchant_with_webhooks(operator)
    created = merchant.signed_post("/v3/payments", payment_body(merchant)).json()
    assert_problem(_refund(merchant, created["id"], 100), 409, "Conflict")
    settled = _settled_pay_in(merchant, 1_000)
    assert_problem(_refund(other, settled["id"], 100), 404, "Not Found")
    assert_problem(other.get(_refunds(settled["id"])), 404, "Not Found")
    assert_problem(_refund(merchant, str(uuid.uuid4()), 100), 404, "Not Found")
    refund_id = _accepted(_refund(merchant, settled["id"], 100))
    assert_problem(other.get(f"{_refunds(settled['id'])}/{refund_id}"), 404, "Not Found")
    assert_problem(merchant.get(f"{_refunds(created['id'])}/{refund_id}"), 404, "Not Found")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"amount_in_minor": 0, "reference": "r"}, "amount_in_minor"),
        ({"amount_in_minor": "100", "reference": "r"}, "amount_in_minor"),
        ({"amount_in_minor": 100, "reference": ""}, "reference"),
        ({"amount_in_minor": 100, "reference": "x" * 141}, "reference"),
        ({"amount_in_minor": 100}, "reference"),
        ({"amount_in_minor": 100, "reference": "r", "metadata": {"a": 1}}, "metadata"),
    ],
)
def test_bad_input_is_400_naming_the_field(
    operator: Operator, body: dict[str, Any], field: str
) -> None:
    merchant = merchant_with_webhooks(operator)
    payment = _settled_pay_in(merchant, 1_000)
    assert_invalid(merchant.signed_post(_refunds(payment["id"]), body), field)
    assert get_record(merchant, _refunds(payment["id"])) == {"items": []}


def test_a_retry_with_the_same_key_refunds_once(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    payment = _settled_pay_in(merchant, 1_000)
    body = {"amount_in_minor": 400, "reference": "once"}
    first = merchant.signed_post(_refunds(payment["id"]), body, idempotency_key="refund-key-1")
    again = merchant.signed_post(_refunds(payment["id"]), body, idempotency_key="refund-key-1")
    assert first.status_code == again.status_code == 201
    assert first.content == again.content
    assert len(get_record(merchant, _refunds(payment["id"]))["items"]) == 1


def test_concurrent_refunds_of_one_payment_never_exceed_it(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    payment = _settled_pay_in(merchant, 10_000)
    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(lambda _: _refund(merchant, payment["id"], 1_500), range(12)))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201] * 6 + [400] * 6, [a.text for a in answers]
    record = get_record(merchant, f"/v3/payments/{payment['id']}")
    assert record["refunded_amount_in_minor"] == 9_000
    _ledger_is_clean(operator)


def test_concurrent_refunds_and_payouts_never_overdraw(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    payments = [_settled_pay_in(merchant, 5_000) for _ in range(2)]
    assert balances(merchant) == (10_000, 10_000)

    def refund_or_payout(n: int) -> httpx.Response:
        if n % 2:
            body = payout_body(
                merchant, "GBP", 1_000, external_beneficiary(SORT_CODE, reference="delay:3600")
            )
            return merchant.signed_post("/v3/payouts", body)
        return _refund(merchant, payments[n // 2 % 2]["id"], 1_000, reference="delay:3600")

    # 16 requests of 1,000 at once, refunds and payouts interleaved, against 10,000: each is
    # accepted, exactly 10 are held, and the others fail with insufficient_funds.
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(refund_or_payout, range(16)))
    assert [a.status_code for a in answers] == [201, 202] * 8
    assert balances(merchant) == (10_000, 0)
    _ledger_is_clean(operator)
