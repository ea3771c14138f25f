"""Every payment request body the official SDKs send (tests/fixtures/sdk-bodies, copied from the
round-3 contract's `spec/sdk-bodies`; fidelity P1 to P5 and section 0), sent over signed HTTP as
the SDK sends it (Java and Rust without the `/v3` prefix): each is accepted (201) and a later GET
reads back what was sent; the payments at the providers that ask a form first (PLN, NOK, the
EUR additional-input one) run their journey to `payment_settled`. Payments on a mandate
(`*-payment-mandate*`) belong to the mandates' tests."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import bearer, get_record, wait_record_status
from pay_in_helpers import next_action

from support.api import MerchantClient, Operator

BODIES = Path(__file__).parent.parent / "fixtures" / "sdk-bodies"
# `<sdk>-payment-<variant>.json`: the payments resource (not `*-payout-payment-source`).
PAYMENT_FILES = sorted(
    p
    for p in BODIES.glob("*-payment-*.json")
    if p.name.split("-")[1] == "payment" and "-payment-mandate" not in p.name
)
# Placeholders of the bodies (sdk-bodies/README.md).
# The payer's answers to the form of each provider that asks one before the bank (fidelity C1).
PAYER_FORMS = {
    "mock-payments-pl-redirect": {
        "remitter-name": "John Doe",
        "remitter-nrb": "12345678901234567890123456",
    },
    "mock-payments-no-redirect": {"remitter-name": "John Doe", "remitter-bban": "12345678901"},
    "mock-payments-de-redirect-additional-input-text": {
        "psu-branch-code": "123",
        "psu-account-number": "1234567",
        "psu-sub-account": "01",
    },
}
GBP_ACCOUNT = "00000000-0000-4000-8000-000000000001"
EUR_ACCOUNT = "00000000-0000-4000-8000-000000000002"
PAYMENT = "00000000-0000-4000-8000-000000000003"
FRESH = "00000000-0000-4000-8000-000000000007"


def without_nulls(value: Any) -> Any:
    """`value` with every null member left out, at every depth (null equals absent)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def filled(merchant: MerchantClient, text: str) -> Any:
    """The file's JSON with the placeholders replaced by this merchant's real values."""
    text = text.replace(GBP_ACCOUNT, merchant.accounts["GBP"]["id"])
    text = text.replace(EUR_ACCOUNT, merchant.accounts["EUR"]["id"])
    return json.loads(text.replace(FRESH, str(uuid.uuid4())))


def sdk_path(name: str, path: str) -> str:
    """The path as the SDK calls it: Java and Rust leave out `/v3` (fidelity A)."""
    return path.removeprefix("/v3") if name.startswith(("java-", "rust-")) else path


def assert_reads_back(
    payment: dict[str, Any], body: dict[str, Any], created: dict[str, Any]
) -> None:
    """The payment reads back what was sent (fidelity P5)."""
    method = without_nulls(body["payment_method"])
    got = payment["payment_method"]
    assert got["type"] == "bank_transfer"
    # The provider selection as sent: a payer who has not chosen yet names no provider.
    assert got["provider_selection"] == method["provider_selection"]
    assert got["beneficiary"] == method["beneficiary"]
    if "retry" in method:
        assert got["retry"] == method["retry"]
    else:
        assert "retry" not in got
    if body.get("sub_merchants") is not None:
        assert payment["sub_merchants"] == without_nulls(body["sub_merchants"])
    else:
        assert "sub_merchants" not in payment
    assert (payment["amount_in_minor"], payment["currency"]) == (
        body["amount_in_minor"],
        body["currency"],
    )
    assert payment["metadata"] == (body.get("metadata") or {})
    assert payment["status"] == created["status"]
    if body["payment_method"]["beneficiary"]["type"] == "external_account":
        assert "merchant_account_id" not in payment
    else:
        assert payment["merchant_account_id"] == method["beneficiary"]["merchant_account_id"]


def assert_created(body: dict[str, Any], created: dict[str, Any]) -> None:
    """The 201 answer: `authorizing` with the next action when the flow started at creation
    (P3), the hosted page's link when asked for (P4)."""
    assert uuid.UUID(created["id"])
    assert created["resource_token"]
    if body.get("authorization_flow") is not None:
        assert created["status"] == "authorizing"
        assert created["authorization_flow"]["actions"]["next"]["type"] == "redirect"
    else:
        assert created["status"] == "authorization_required"
        assert "authorization_flow" not in created
    if body.get("hosted_page") is not None:
        assert created["hosted_page"]["uri"].split("#")[0].endswith("/hpp/payments")
    else:
        assert "hosted_page" not in created


@pytest.mark.parametrize("source", PAYMENT_FILES, ids=lambda p: p.stem)
def test_the_sdks_payment_bodies_are_accepted_and_read_back(
    operator: Operator, source: Path
) -> None:
    merchant = operator.new_merchant("SDK bodies")
    request = filled(merchant, source.read_text())
    if request["path"] != "/v3/payments":
        # rust-payment-cancel: the body of a cancel, sent to a payment just made.
        made = filled(
            merchant, (BODIES / "rust-payment-user-selected-closed-loop.json").read_text()
        )
        answer = merchant.signed_post(sdk_path(source.name, made["path"]), made["body"])
        assert answer.status_code == 201, answer.text
        payment_id = answer.json()["id"]
        path = request["path"].replace(PAYMENT, payment_id)
        answer = merchant.signed_post(sdk_path(source.name, path), request["body"])
        assert answer.status_code == 202, answer.text
        payment = get_record(merchant, f"/v3/payments/{payment_id}")
        assert (payment["status"], payment["failure_reason"]) == ("payment_failed", "canceled")
        return
    body = request["body"]
    answer = merchant.signed_post(sdk_path(source.name, request["path"]), body)
    assert answer.status_code == 201, answer.text
    created = answer.json()
    assert_created(body, created)
    payment = get_record(merchant, sdk_path(source.name, f"/v3/payments/{created['id']}"))
    assert_reads_back(payment, body, created)
    if created["status"] == "authorizing":
        # The current next action reads back while authorizing (P6).
        assert payment["authorization_flow"] == created["authorization_flow"]


def _journey_step(merchant: MerchantClient, path: str, body: Any) -> dict[str, Any]:
    """One signed step of the payer's journey; its next action."""
    answer = merchant.signed_post(path, body)
    assert answer.status_code == 200, answer.text
    return next_action(answer.json())


@pytest.mark.parametrize(
    "name",
    [
        "dotnet-payment-external-account-pln",
        "dotnet-payment-external-account-nok",
        "rust-payment-preselected-open-loop-eur",
    ],
)
def test_payments_at_the_form_providers_complete(operator: Operator, name: str) -> None:
    """The PLN and NOK external-account payments and the EUR one at the additional-input
    provider run the whole journey: the provider's form, the mock bank, then settled."""
    merchant = operator.new_merchant("SDK bodies")
    request = filled(merchant, (BODIES / f"{name}.json").read_text())
    provider_id = request["body"]["payment_method"]["provider_selection"]["provider_id"]
    answer = merchant.signed_post(request["path"], request["body"])
    assert answer.status_code == 201, answer.text
    payment_id = answer.json()["id"]
    flow = f"/v3/payments/{payment_id}/authorization-flow"
    start = {"provider_selection": {}, "redirect": {"return_uri": "https://shop.example/back"}}
    step = _journey_step(merchant, flow, start)
    assert step["type"] == "form", step
    assert {i["id"] for i in step["inputs"]} == set(PAYER_FORMS[provider_id])
    step = _journey_step(merchant, f"{flow}/actions/form", {"inputs": PAYER_FORMS[provider_id]})
    assert step["type"] == "redirect", step
    token = step["uri"].split("#token=", 1)[1]
    acted = merchant.http.post(
        f"/mock-bank/api/single-immediate-payments/{payment_id}/action",
        json={"action": "Execute", "redirect": False},
        headers=bearer(token),
    )
    assert acted.status_code == 202, acted.text
    assert acted.text == f"https://shop.example/back?payment_id={payment_id}"
    done = wait_record_status(merchant, f"/v3/payments/{payment_id}", {"payment_settled"})
    assert (done["status"], done["provider_id"]) == ("payment_settled", provider_id)
