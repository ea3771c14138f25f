"""Pay-ins as the official SDKs drive them, over HTTP against `bankrail serve` (fidelity P2 to
P8 and R1; docs/api.md "Payments API v3 — pay-ins" and "Refunds"): payments to an external
account, the journey started at creation, the hosted page's link, the current next action
while authorizing, `creditable_at`, retries through `attempt_failed`, and refunds of what is
left."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from e2e_helpers import assert_invalid, assert_problem, bearer, get_record, wait_record_status
from pay_in_helpers import (
    PAYMENTS,
    RETURN_URI,
    advance_clock,
    authorised_pay_in,
    balances,
    merchant_with_webhooks,
    recorded_event_types,
    settled_payment,
    wait_payment_event,
)

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver

BODIES = Path(__file__).parent.parent / "fixtures" / "sdk-bodies"
GBP_ACCOUNT = "00000000-0000-4000-8000-000000000001"
SORT_CODE = {
    "type": "sort_code_account_number",
    "sort_code": "567890",
    "account_number": "12345678",
}


def sdk_body(merchant: MerchantClient, name: str) -> dict[str, Any]:
    """The body of one SDK request file, for this merchant's GBP account."""
    text = (BODIES / f"{name}.json").read_text()
    body: dict[str, Any] = json.loads(text.replace(GBP_ACCOUNT, merchant.accounts["GBP"]["id"]))[
        "body"
    ]
    return body


def external_payment(currency: str, identifier: dict[str, Any], **selection: Any) -> dict[str, Any]:
    """A payment to an account outside Bankrail."""
    return {
        "amount_in_minor": 2_500,
        "currency": currency,
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": selection or {"type": "user_selected"},
            "beneficiary": {
                "type": "external_account",
                "account_holder_name": "Ben Eficiary",
                "account_identifier": identifier,
                "reference": "some reference",
            },
        },
        "user": {"name": "Jane Payer"},
    }


def created(merchant: MerchantClient, body: dict[str, Any]) -> dict[str, Any]:
    """The 201 answer of creating a payment."""
    answer = merchant.signed_post(PAYMENTS, body)
    assert answer.status_code == 201, answer.text
    result: dict[str, Any] = answer.json()
    return result


def flow_step(merchant: MerchantClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A step of the journey, and its next action."""
    answer = merchant.signed_post(path, body)
    assert answer.status_code == 200, answer.text
    action: dict[str, Any] = answer.json()["authorization_flow"]["actions"]["next"]
    return action


def start_flow(merchant: MerchantClient, payment_id: str, **extra: Any) -> dict[str, Any]:
    """Start (or start again) the payer's journey; the next action."""
    body = {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}, **extra}
    return flow_step(merchant, f"{PAYMENTS}/{payment_id}/authorization-flow", body)


def choose(merchant: MerchantClient, payment_id: str, provider_id: str) -> dict[str, Any]:
    """The payer picks a provider; the next action."""
    path = f"{PAYMENTS}/{payment_id}/authorization-flow/actions/provider-selection"
    return flow_step(merchant, path, {"provider_id": provider_id})


def at_bank(http: httpx.Client, payment_id: str, redirect: dict[str, Any], action: str) -> None:
    """The payer's decision through the mock bank's headless API, with the token the
    redirect uri carries (in its query or its fragment)."""
    parts = urlsplit(redirect["uri"])
    token = (parse_qs(parts.query).get("token") or parse_qs(parts.fragment)["token"])[0]
    answer = http.post(
        f"/mock-bank/api/single-immediate-payments/{payment_id}/action",
        json={"action": action},
        headers=bearer(token),
    )
    assert answer.status_code == 202, answer.text


@pytest.mark.parametrize(
    ("currency", "identifier", "selection"),
    [
        ("GBP", SORT_CODE, {}),
        (
            "EUR",
            {"type": "iban", "iban": "NL39ABNA8234998285"},
            {"type": "preselected", "provider_id": "mock-payments-de-redirect"},
        ),
    ],
    ids=["gbp-sort-code-user-selected", "eur-iban-preselected"],
)
def test_an_external_account_payment_settles_and_moves_no_merchant_money(
    operator: Operator, currency: str, identifier: dict[str, Any], selection: dict[str, Any]
) -> None:
    merchant = operator.new_merchant("External payee")
    before = {c: balances(merchant, c) for c in ("GBP", "EUR")}
    payment_id = created(merchant, external_payment(currency, identifier, **selection))["id"]
    action = start_flow(merchant, payment_id)
    if action["type"] == "provider_selection":
        action = choose(merchant, payment_id, "mock-payments-gb-redirect")
    assert action["type"] == "redirect"
    at_bank(merchant.http, payment_id, action, "Execute")

    payment = settled_payment(merchant, payment_id)
    assert payment["payment_method"]["beneficiary"]["account_identifier"] == identifier
    assert "merchant_account_id" not in payment
    assert "payment_source" not in payment
    assert payment["creditable_at"] == payment["settled_at"]
    # No merchant account received it: no balance moved, and there is nothing to refund.
    assert {c: balances(merchant, c) for c in ("GBP", "EUR")} == before
    answer = merchant.signed_post(f"{PAYMENTS}/{payment_id}/refunds", {"reference": "back"})
    assert_problem(answer, 409)


@pytest.mark.parametrize("currency", ["PLN", "NOK"])
def test_pln_and_nok_payments_go_to_external_accounts_only(
    operator: Operator, currency: str
) -> None:
    merchant = operator.new_merchant("Nordic payee")
    identifier = (
        {"type": "nrb", "nrb": "12345678901234567890123456"}
        if currency == "PLN"
        else {"type": "bban", "bban": "DE09500105171333647892"}
    )
    payment = get_record(
        merchant,
        f"{PAYMENTS}/{created(merchant, external_payment(currency, identifier))['id']}",
    )
    assert (payment["currency"], payment["status"]) == (currency, "authorization_required")
    assert payment["payment_method"]["beneficiary"]["account_identifier"] == identifier
    # A currency no external payment takes is refused on its field.
    answer = merchant.signed_post(PAYMENTS, external_payment("SEK", identifier))
    assert_invalid(answer, "currency")


def test_bad_external_account_identifiers_are_refused_on_their_field(operator: Operator) -> None:
    merchant = operator.new_merchant("Careful payee")
    body = external_payment("GBP", {"type": "sort_code_account_number", "sort_code": "12-34"})
    answer = merchant.signed_post(PAYMENTS, body)
    assert answer.status_code == 400, answer.text
    assert "account_identifier" in answer.text
    body = external_payment("GBP", SORT_CODE)
    body["merchant_account_id"] = merchant.accounts["GBP"]["id"]
    assert_problem(merchant.signed_post(PAYMENTS, body), 400)


@pytest.mark.parametrize(
    ("scheme_selection", "field"),
    [
        (
            {
                "type": "preselected",
                "scheme_id": "faster_payments_service",
                "allow_remitter_fee": True,
            },
            "scheme_selection",
        ),
        ({"type": "user_selected", "instant_override_provider_ids": ["x"]}, "scheme_selection"),
        ({"type": "instant_only", "allow_remitter_fee": "yes"}, "allow_remitter_fee"),
    ],
    ids=["fee-with-preselected", "overrides-with-user-selected", "fee-not-a-boolean"],
)
def test_a_scheme_selection_out_of_its_type_is_refused_on_its_field(
    operator: Operator, scheme_selection: dict[str, Any], field: str
) -> None:
    merchant = operator.new_merchant("Scheme rules")
    body = sdk_body(merchant, "dotnet-payment-merchant-account-gbp")
    body["payment_method"]["provider_selection"]["scheme_selection"] = scheme_selection
    answer = merchant.signed_post(PAYMENTS, body)
    problem = assert_problem(answer, 400)
    assert any(field in key for key in problem["errors"]), problem


def test_a_flow_started_at_creation_answers_its_next_action_and_completes(
    operator: Operator,
) -> None:
    merchant = operator.new_merchant("Flow at creation")
    body = sdk_body(merchant, "dotnet-payment-merchant-account-authorization-flow")
    answer = created(merchant, body)
    assert set(answer) == {"id", "user", "resource_token", "status", "authorization_flow"}
    assert answer["status"] == "authorizing"
    redirect = answer["authorization_flow"]["actions"]["next"]
    assert redirect["type"] == "redirect"
    assert redirect["uri"].startswith(str(merchant.http.base_url).rstrip("/") + "/mock-bank/")
    # While authorizing, the payment carries the same next action (P6).
    payment = get_record(merchant, f"{PAYMENTS}/{answer['id']}")
    assert payment["status"] == "authorizing"
    assert payment["authorization_flow"] == {"actions": {"next": redirect}}

    at_bank(merchant.http, answer["id"], redirect, "Execute")
    settled = settled_payment(merchant, answer["id"])
    assert "authorization_flow" not in settled
    assert settled["creditable_at"] == settled["settled_at"]  # P7
    assert settled["payment_source"]["id"]
    assert balances(merchant)[0] == body["amount_in_minor"]


def test_a_flow_at_creation_checks_its_return_uri(operator: Operator) -> None:
    merchant = operator.new_merchant("Bad return")
    body = sdk_body(merchant, "dotnet-payment-merchant-account-authorization-flow")
    body["authorization_flow"]["redirect"]["return_uri"] = "not-a-uri"
    assert_invalid(merchant.signed_post(PAYMENTS, body), "authorization_flow.redirect.return_uri")


def test_hosted_page_at_creation_answers_the_pages_link(operator: Operator) -> None:
    merchant = operator.new_merchant("Hosted")
    body = sdk_body(merchant, "dotnet-payment-merchant-account-hosted-page")
    answer = created(merchant, body)
    assert answer["status"] == "authorization_required"
    link = urlsplit(answer["hosted_page"]["uri"])
    base = urlsplit(str(merchant.http.base_url))
    assert (link.scheme, link.netloc, link.path, link.query) == (
        base.scheme,
        base.netloc,
        "/hpp/payments",
        "",
    )
    fragment = {k: v[0] for k, v in parse_qs(link.fragment).items()}
    assert fragment == {
        "payment_id": answer["id"],
        "resource_token": answer["resource_token"],
        "return_uri": body["hosted_page"]["return_uri"],
    }
    # The link's token is the payment's resource token: the payer's page may read it.
    seen = merchant.http.get(
        f"{PAYMENTS}/{answer['id']}", headers=bearer(fragment["resource_token"])
    )
    assert seen.status_code == 200, seen.text
    assert seen.json()["status"] == "authorization_required"


def test_an_authorizing_payment_reads_its_current_next_action(operator: Operator) -> None:
    merchant = operator.new_merchant("Next action")
    body = sdk_body(merchant, "dotnet-payment-merchant-account-gbp")
    payment_id = created(merchant, body)["id"]
    assert "authorization_flow" not in get_record(merchant, f"{PAYMENTS}/{payment_id}")

    selection = start_flow(merchant, payment_id)
    assert selection["type"] == "provider_selection"
    assert selection["providers"]
    payment = get_record(merchant, f"{PAYMENTS}/{payment_id}")
    assert payment["authorization_flow"]["actions"]["next"] == selection
    # Before the payer chose, the selection names no provider.
    assert "provider_id" not in payment["payment_method"]["provider_selection"]

    redirect = choose(merchant, payment_id, "mock-payments-gb-redirect")
    payment = get_record(merchant, f"{PAYMENTS}/{payment_id}")
    assert payment["authorization_flow"]["actions"]["next"] == redirect
    assert payment["payment_method"]["provider_selection"]["provider_id"] == (
        "mock-payments-gb-redirect"
    )
    assert (
        payment["payment_method"]["provider_selection"]["scheme_selection"]
        == (body["payment_method"]["provider_selection"]["scheme_selection"])
    )


def _attempt_failed(merchant: MerchantClient, payment_id: str) -> dict[str, Any]:
    """Start the journey with `retry` and have the bank reject the authorisation."""
    at_bank(
        merchant.http, payment_id, start_flow(merchant, payment_id, retry={}), "RejectAuthorisation"
    )
    payment = get_record(merchant, f"{PAYMENTS}/{payment_id}")
    assert payment["status"] == "attempt_failed", payment
    assert (payment["failure_stage"], payment["failure_reason"]) == (
        "authorizing",
        "authorization_failed",
    )
    assert payment["failed_at"]
    return payment


def test_a_payment_with_retry_survives_a_rejected_attempt_and_can_succeed(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = merchant_with_webhooks(operator, receiver)
    body = sdk_body(merchant, "java-payment-preselected-retry")
    payment_id = created(merchant, body)["id"]
    _attempt_failed(merchant, payment_id)
    # Not terminal, no webhook: the payer tries again, and this time the bank executes.
    assert recorded_event_types(operator, merchant) == []
    redirect = start_flow(merchant, payment_id, retry={})
    payment = get_record(merchant, f"{PAYMENTS}/{payment_id}")
    assert payment["status"] == "authorizing"
    assert "failed_at" not in payment
    assert "failure_reason" not in payment
    at_bank(merchant.http, payment_id, redirect, "Execute")
    assert settled_payment(merchant, payment_id)["payment_method"]["retry"] == {}
    assert wait_payment_event(receiver, payment_id, "payment_settled")
    statuses = [
        h["status"] for h in get_record(merchant, f"{PAYMENTS}/{payment_id}")["status_history"]
    ]
    assert statuses[:5] == [
        "authorization_required",
        "authorizing",
        "attempt_failed",
        "authorizing",
        "authorized",
    ]


def test_a_failed_attempt_becomes_payment_failed_when_the_retry_window_ends(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = merchant_with_webhooks(operator, receiver)
    body = sdk_body(merchant, "java-payment-preselected-retry")
    payment_id = created(merchant, body)["id"]
    _attempt_failed(merchant, payment_id)
    advance_clock(operator, 15 * 60 + 1)
    merchant.forget_token()
    payment = wait_record_status(merchant, f"{PAYMENTS}/{payment_id}", {"payment_failed"})
    assert (payment["failure_stage"], payment["failure_reason"]) == (
        "authorizing",
        "authorization_failed",
    )
    event = wait_payment_event(receiver, payment_id, "payment_failed")
    assert event["failure_reason"] == "authorization_failed"
    # Once the window is over the journey cannot start again.
    answer = merchant.signed_post(
        f"{PAYMENTS}/{payment_id}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}},
    )
    assert_problem(answer, 409)


def test_without_retry_a_rejected_authorisation_fails_the_payment(operator: Operator) -> None:
    merchant = operator.new_merchant("No retry")
    body = sdk_body(merchant, "java-payment-preselected")
    payment_id = created(merchant, body)["id"]
    at_bank(
        merchant.http, payment_id, start_flow(merchant, payment_id, retry={}), "RejectAuthorisation"
    )
    payment = get_record(merchant, f"{PAYMENTS}/{payment_id}")
    assert (payment["status"], payment["failure_reason"]) == (
        "payment_failed",
        "authorization_failed",
    )
    assert "retry" not in payment["payment_method"]


def test_a_refund_without_amount_refunds_what_is_left(operator: Operator) -> None:
    merchant = operator.new_merchant("Refunds of what is left")
    user = {"id": f"user-{uuid.uuid4()}", "name": "Jane Payer"}
    payment_id = settled_payment(merchant, authorised_pay_in(merchant, 1_000, user))["id"]
    refunds = f"{PAYMENTS}/{payment_id}/refunds"
    # The Java suite's reference (22 characters) is an ordinary one.
    first = merchant.signed_post(
        refunds, {"amount_in_minor": 300, "reference": "Payment refund request"}
    )
    assert first.status_code == 201, first.text
    rest = merchant.signed_post(refunds, {"reference": "a-reference"})
    assert rest.status_code == 201, rest.text
    refund = get_record(merchant, f"{refunds}/{rest.json()['id']}")
    assert (refund["amount_in_minor"], refund["reference"]) == (700, "a-reference")
    assert get_record(merchant, f"{PAYMENTS}/{payment_id}")["refunded_amount_in_minor"] == 1_000
    # Nothing is left: a refund of "the rest" is refused.
    assert_problem(merchant.signed_post(refunds, {"reference": "again"}), 409)


def test_refund_references_go_up_to_140_characters(operator: Operator) -> None:
    merchant = operator.new_merchant("Long references")
    user = {"id": f"user-{uuid.uuid4()}", "name": "Jane Payer"}
    payment_id = settled_payment(merchant, authorised_pay_in(merchant, 1_000, user))["id"]
    refunds = f"{PAYMENTS}/{payment_id}/refunds"
    answer = merchant.signed_post(refunds, {"amount_in_minor": 1, "reference": "r" * 140})
    assert answer.status_code == 201, answer.text
    assert_invalid(merchant.signed_post(refunds, {"reference": "r" * 141}), "reference")
