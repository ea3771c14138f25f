"""Payments API v3 pay-ins that fail, and requests that are refused, over HTTP against
`bankrail serve` (spec 2.7, 3.3, 6.2, 7; docs/api.md).

Every failure path of spec 3.3 is checked by GET and in the `payment_failed` webhook; bad input
must answer a clear problem+json. Waits poll with deadlines; time-based steps (expiry, delays)
are driven by advancing the service clock."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from e2e_helpers import (
    assert_invalid,
    assert_problem,
    bearer,
    get_record,
    is_uuid,
    parse_time,
    wait_record_status,
)
from pay_in_helpers import (
    EMBEDDED_FIRST_FORM,
    fill_in_embedded_forms,
)
from pay_in_helpers import (
    advance_clock as _advance,
)
from pay_in_helpers import (
    balances as _balances,
)
from pay_in_helpers import (
    bank_action as _bank,
)
from pay_in_helpers import (
    merchant_with_webhooks as _merchant,
)
from pay_in_helpers import (
    next_action as _next,
)
from pay_in_helpers import (
    payment_body as _body,
)
from pay_in_helpers import (
    payment_events as _events,
)
from pay_in_helpers import (
    recorded_event_types as _recorded_event_types,
)
from pay_in_helpers import (
    wait_payment_event as _wait_event,
)

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver

PAYMENTS = "/v3/payments"
GB_REDIRECT = "mock-payments-gb-redirect"
DE_REDIRECT = "mock-payments-de-redirect"
DE_EMBEDDED = "mock-payments-de-embedded"
NL_PRIVATE_BETA = "mock-payments-nl-redirect"
RETURN_URI = "https://shop.example/back"
FAILED = "payment_failed"
WINDOW_SECONDS = 15 * 60


# --- helpers ----------------------------------------------------------------------------------


def _create(merchant: MerchantClient, body: dict[str, Any]) -> str:
    answer = merchant.signed_post(PAYMENTS, body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def _flow_body(return_uri: str = RETURN_URI) -> dict[str, Any]:
    return {"provider_selection": {}, "redirect": {"return_uri": return_uri}}


def _start(merchant: MerchantClient, payment_id: str) -> dict[str, Any]:
    answer = merchant.signed_post(f"{PAYMENTS}/{payment_id}/authorization-flow", _flow_body())
    assert answer.status_code == 200, answer.text
    flow: dict[str, Any] = answer.json()
    return flow


def _select_path(payment_id: str) -> str:
    return f"{PAYMENTS}/{payment_id}/authorization-flow/actions/provider-selection"


def _redirect_uri(merchant: MerchantClient, payment_id: str, provider_id: str = GB_REDIRECT) -> str:
    action = _next(_start(merchant, payment_id))
    if action["type"] == "provider_selection":
        answer = merchant.signed_post(_select_path(payment_id), {"provider_id": provider_id})
        assert answer.status_code == 200, answer.text
        action = _next(answer.json())
    assert action["type"] == "redirect", action
    return str(action["uri"])


def _get(merchant: MerchantClient, payment_id: str) -> dict[str, Any]:
    return get_record(merchant, f"{PAYMENTS}/{payment_id}")


def _wait_status(
    merchant: MerchantClient, payment_id: str, status: str, timeout: float = 20
) -> dict[str, Any]:
    return wait_record_status(merchant, f"{PAYMENTS}/{payment_id}", {status}, timeout)


def _assert_failed(
    operator: Operator,
    merchant: MerchantClient,
    receiver: WebhookReceiver,
    payment_id: str,
    stage: str,
    reason: str,
    *,
    metadata: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The payment failed at `stage` for `reason`, as GET and the webhook both say; nothing
    was credited and no success event was recorded."""
    payment = _wait_status(merchant, payment_id, FAILED)
    assert payment["failure_stage"] == stage, payment
    assert payment["failure_reason"] == reason, payment
    assert "settled_at" not in payment
    assert "payment_source" not in payment
    failed_at = parse_time(payment["failed_at"])
    assert failed_at >= parse_time(payment["created_at"])
    history = [h["status"] for h in payment["status_history"]]
    assert history[-2:] == [stage, FAILED], history

    event = _wait_event(receiver, payment_id, "payment_failed")
    assert event["event_version"] == 1
    assert is_uuid(event["event_id"])
    assert event["failure_stage"] == stage
    assert event["failure_reason"] == reason
    assert event["failed_at"] == payment["failed_at"]
    assert event["payment_method"]["type"] == "bank_transfer"
    assert event["metadata"] == (metadata or {})
    assert not {"executed_at", "settled_at", "payment_source"} & set(event), event

    types = [e["type"] for e in _events(receiver, payment_id)]
    assert "payment_settled" not in types
    assert _balances(merchant, payment["currency"]) == (0, 0)
    return payment


# --- failures at the bank ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "stage", "reason"),
    [
        ("RejectAuthorisation", "authorizing", "authorization_failed"),
        ("RejectExecution", "authorized", "provider_rejected"),
        ("Cancel", "authorizing", "not_authorized"),
    ],
)
def test_bank_outcomes_fail_at_the_documented_stage(
    operator: Operator, receiver: WebhookReceiver, action: str, stage: str, reason: str
) -> None:
    merchant = _merchant(operator, receiver)
    metadata = {"order": action}
    payment_id = _create(merchant, _body(merchant, metadata=metadata))
    uri = _redirect_uri(merchant, payment_id)
    answer = _bank(merchant.http, payment_id, uri, action)
    assert answer.status_code == 202, answer.text
    back = urlsplit(answer.text)
    assert parse_qs(back.query)["payment_id"] == [payment_id]

    payment = _assert_failed(
        operator, merchant, receiver, payment_id, stage, reason, metadata=metadata
    )
    event = _wait_event(receiver, payment_id, "payment_failed")
    assert event["payment_method"]["provider_id"] == GB_REDIRECT
    if action == "RejectExecution":
        assert "authorized_at" in payment
    else:
        assert "authorized_at" not in payment
    # Only the failure is announced (the execution was rejected before it happened).
    assert _recorded_event_types(operator, merchant) == ["payment_failed"]


@pytest.mark.parametrize(
    ("username", "stage", "reason"),
    [
        ("test_authorisation_failed", "authorizing", "authorization_failed"),
        ("TEST_EXECUTION_REJECTED", "authorized", "provider_rejected"),
    ],
)
def test_embedded_form_usernames_pick_the_failure(
    operator: Operator, receiver: WebhookReceiver, username: str, stage: str, reason: str
) -> None:
    merchant = _merchant(operator, receiver)
    payment_id = _create(merchant, _body(merchant, "EUR", provider_id=DE_EMBEDDED))
    assert _next(_start(merchant, payment_id))["type"] == "form"
    answer = fill_in_embedded_forms(merchant, payment_id, username)
    assert answer.status_code == 200, answer.text
    _assert_failed(operator, merchant, receiver, payment_id, stage, reason)


def test_form_on_a_redirect_provider_is_refused(operator: Operator) -> None:
    merchant = _merchant(operator)
    payment_id = _create(merchant, _body(merchant, provider_id=GB_REDIRECT))
    _start(merchant, payment_id)
    answer = merchant.signed_post(
        f"{PAYMENTS}/{payment_id}/authorization-flow/actions/form", EMBEDDED_FIRST_FORM
    )
    assert_problem(answer, 409)
    assert _get(merchant, payment_id)["status"] == "authorizing"


# --- the merchant cancels ---------------------------------------------------------------------


def _cancel(merchant: MerchantClient, payment_id: str) -> httpx.Response:
    return merchant.signed_post(f"{PAYMENTS}/{payment_id}/actions/cancel", {})


def test_cancel_before_the_flow_starts(operator: Operator, receiver: WebhookReceiver) -> None:
    merchant = _merchant(operator, receiver)
    payment_id = _create(merchant, _body(merchant))
    answer = _cancel(merchant, payment_id)
    assert answer.status_code == 202, answer.text
    _assert_failed(operator, merchant, receiver, payment_id, "authorization_required", "canceled")
    # A cancelled payment cannot be authorised any more.
    answer = merchant.signed_post(f"{PAYMENTS}/{payment_id}/authorization-flow", _flow_body())
    assert_problem(answer, 409)


def test_cancel_while_authorizing_then_the_bank_cannot_execute(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = _merchant(operator, receiver)
    payment_id = _create(merchant, _body(merchant))
    uri = _redirect_uri(merchant, payment_id)
    answer = _cancel(merchant, payment_id)
    assert answer.status_code == 202, answer.text
    _assert_failed(operator, merchant, receiver, payment_id, "authorizing", "canceled")
    assert_problem(_bank(merchant.http, payment_id, uri, "Execute"), 409)
    assert _get(merchant, payment_id)["failure_reason"] == "canceled"


def test_cancel_an_authorized_payment_stops_its_execution(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = _merchant(operator, receiver)
    payment_id = _create(merchant, _body(merchant))
    uri = _redirect_uri(merchant, payment_id)
    answer = _bank(merchant.http, payment_id, uri, "Execute", execution_delay_in_seconds=300)
    assert answer.status_code == 202, answer.text
    assert _get(merchant, payment_id)["status"] == "authorized"
    assert _cancel(merchant, payment_id).status_code == 202
    _assert_failed(operator, merchant, receiver, payment_id, "authorized", "canceled")

    # The bank's scheduled execution finds the payment cancelled and does nothing.
    _advance(operator, 301)
    witness = _create(merchant, _body(merchant))
    witness_uri = _redirect_uri(merchant, witness)
    assert _bank(merchant.http, witness, witness_uri, "Execute").status_code == 202
    _wait_status(merchant, witness, "payment_settled")
    payment = _get(merchant, payment_id)
    assert payment["status"] == FAILED
    assert payment["failure_stage"] == "authorized"
    assert "executed_at" not in payment
    assert _balances(merchant) == (1_000, 1_000)  # the witness only
    assert "payment_executed" not in [e["type"] for e in _events(receiver, payment_id)]


def test_cancel_a_settled_or_failed_payment_is_a_conflict(operator: Operator) -> None:
    merchant = _merchant(operator)
    settled = _create(merchant, _body(merchant))
    uri = _redirect_uri(merchant, settled)
    assert _bank(merchant.http, settled, uri, "Execute").status_code == 202
    _wait_status(merchant, settled, "payment_settled")
    body = assert_problem(_cancel(merchant, settled), 409, "Conflict")
    assert "cancel" in body["detail"].lower()
    assert _get(merchant, settled)["status"] == "payment_settled"
    assert _balances(merchant) == (1_000, 1_000)

    cancelled = _create(merchant, _body(merchant))
    assert _cancel(merchant, cancelled).status_code == 202
    assert_problem(_cancel(merchant, cancelled), 409, "Conflict")
    payment = _get(merchant, cancelled)
    assert (payment["failure_stage"], payment["failure_reason"]) == (
        "authorization_required",
        "canceled",
    )


def test_cancel_an_executed_payment_is_a_conflict(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = _merchant(operator, receiver)
    payment_id = _create(merchant, _body(merchant, amount=800))
    uri = _redirect_uri(merchant, payment_id)
    answer = _bank(merchant.http, payment_id, uri, "Execute", settlement_delay_in_seconds=300)
    assert answer.status_code == 202, answer.text
    _wait_status(merchant, payment_id, "payment_executed")
    # The bank accepted it: too late to cancel.
    assert_problem(_cancel(merchant, payment_id), 409, "Conflict")
    _advance(operator, 300)
    _wait_status(merchant, payment_id, "payment_settled")
    assert _balances(merchant) == (800, 800)
    assert "payment_failed" not in [e["type"] for e in _events(receiver, payment_id)]


def test_cancel_with_the_same_idempotency_key_replays(operator: Operator) -> None:
    merchant = _merchant(operator)
    payment_id = _create(merchant, _body(merchant))
    key = str(uuid.uuid4())
    path = f"{PAYMENTS}/{payment_id}/actions/cancel"
    first = merchant.signed_post(path, {}, idempotency_key=key)
    again = merchant.signed_post(path, {}, idempotency_key=key)
    assert first.status_code == again.status_code == 202
    assert first.content == again.content


# --- expiry -----------------------------------------------------------------------------------


def test_an_unauthorised_payment_expires_after_fifteen_minutes(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = _merchant(operator, receiver)
    waiting = _create(merchant, _body(merchant, metadata={"k": "v"}))
    started = _create(merchant, _body(merchant))
    _redirect_uri(merchant, started)

    _advance(operator, WINDOW_SECONDS - 30)
    assert _get(merchant, waiting)["status"] == "authorization_required"
    assert _get(merchant, started)["status"] == "authorizing"

    _advance(operator, 31)
    payment = _assert_failed(
        operator,
        merchant,
        receiver,
        waiting,
        "authorization_required",
        "expired",
        metadata={"k": "v"},
    )
    elapsed = parse_time(payment["failed_at"]) - parse_time(payment["created_at"])
    assert elapsed.total_seconds() >= WINDOW_SECONDS
    _assert_failed(operator, merchant, receiver, started, "authorizing", "expired")


def test_an_authorized_payment_does_not_expire(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = _merchant(operator, receiver)
    authorized = _create(merchant, _body(merchant, amount=600))
    uri = _redirect_uri(merchant, authorized)
    answer = _bank(merchant.http, authorized, uri, "Execute", execution_delay_in_seconds=1_000)
    assert answer.status_code == 202, answer.text
    # Created after it, so its expiry is due after the authorised payment's.
    witness = _create(merchant, _body(merchant))
    assert _get(merchant, authorized)["status"] == "authorized"

    _advance(operator, WINDOW_SECONDS + 1)
    _wait_status(merchant, witness, FAILED)
    assert _get(merchant, authorized)["status"] == "authorized"

    _advance(operator, 1_000 - WINDOW_SECONDS)
    payment = _wait_status(merchant, authorized, "payment_settled")
    assert FAILED not in [h["status"] for h in payment["status_history"]]
    assert _balances(merchant) == (600, 600)
    types = [e["type"] for e in _events(receiver, authorized)]
    assert "payment_failed" not in types


# --- the mock bank's retries ------------------------------------------------------------------


def test_a_retried_bank_action_answers_again_and_credits_once(operator: Operator) -> None:
    merchant = _merchant(operator)
    payment_id = _create(merchant, _body(merchant, amount=2_500))
    uri = _redirect_uri(merchant, payment_id)
    first = _bank(merchant.http, payment_id, uri, "Execute")
    again = _bank(merchant.http, payment_id, uri, "Execute")
    assert first.status_code == again.status_code == 202, (first.text, again.text)
    assert first.text == again.text
    _wait_status(merchant, payment_id, "payment_settled")
    # Once settled, the same retry still answers the same, and credits nothing more.
    late = _bank(merchant.http, payment_id, uri, "Execute")
    assert late.status_code == 202, late.text
    assert late.text == first.text
    assert _balances(merchant) == (2_500, 2_500)
    answer = merchant.get(
        f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}/transactions", type="payment"
    )
    assert answer.status_code == 200, answer.text
    assert [i["id"] for i in answer.json()["items"]] == [payment_id]


def test_concurrent_bank_actions_credit_once(operator: Operator) -> None:
    merchant = _merchant(operator)
    payment_id = _create(merchant, _body(merchant, amount=3_300))
    uri = _redirect_uri(merchant, payment_id)
    base_url = str(merchant.http.base_url)

    def act(_: int) -> int:
        with httpx.Client(base_url=base_url, timeout=30) as http:
            return _bank(http, payment_id, uri, "Execute").status_code

    with ThreadPoolExecutor(max_workers=6) as pool:
        codes = list(pool.map(act, range(6)))
    assert codes == [202] * 6
    _wait_status(merchant, payment_id, "payment_settled")
    assert _balances(merchant) == (3_300, 3_300)
    assert operator.get("/admin/ledger/check").json()["ok"] is True


@pytest.mark.parametrize("later", ["RejectAuthorisation", "RejectExecution", "Cancel"])
def test_another_action_after_execute_is_a_conflict(operator: Operator, later: str) -> None:
    merchant = _merchant(operator)
    payment_id = _create(merchant, _body(merchant))
    uri = _redirect_uri(merchant, payment_id)
    assert _bank(merchant.http, payment_id, uri, "Execute").status_code == 202
    assert_problem(_bank(merchant.http, payment_id, uri, later), 409, "Conflict")
    _wait_status(merchant, payment_id, "payment_settled")
    assert_problem(_bank(merchant.http, payment_id, uri, later), 409, "Conflict")


def test_a_failed_payment_takes_no_other_bank_action(operator: Operator) -> None:
    merchant = _merchant(operator)
    payment_id = _create(merchant, _body(merchant))
    uri = _redirect_uri(merchant, payment_id)
    assert _bank(merchant.http, payment_id, uri, "RejectAuthorisation").status_code == 202
    assert _bank(merchant.http, payment_id, uri, "RejectAuthorisation").status_code == 202
    assert_problem(_bank(merchant.http, payment_id, uri, "Execute"), 409)
    payment = _get(merchant, payment_id)
    assert (payment["status"], payment["failure_reason"]) == (FAILED, "authorization_failed")


def test_the_mock_bank_needs_the_token_of_that_payment(operator: Operator) -> None:
    merchant = _merchant(operator)
    payment_id = _create(merchant, _body(merchant))
    other = _create(merchant, _body(merchant))
    other_uri = _redirect_uri(merchant, other)
    uri = _redirect_uri(merchant, payment_id)
    path = f"/mock-bank/api/single-immediate-payments/{payment_id}/action"
    assert_problem(merchant.http.post(path, json={"action": "Execute"}), 401)
    assert_problem(
        merchant.http.post(path, json={"action": "Execute"}, headers=bearer("not-a-token")), 401
    )
    assert_problem(_bank(merchant.http, payment_id, other_uri, "Execute"), 401)
    assert_problem(
        merchant.http.post(path, json={"action": "Execute"}, headers=bearer(merchant.token())),
        401,
    )
    assert_invalid(_bank(merchant.http, payment_id, uri, "Approve"), "action")
    assert _get(merchant, payment_id)["status"] == "authorizing"


# --- bad input --------------------------------------------------------------------------------


def _with_selection(body: dict[str, Any], **selection: Any) -> dict[str, Any]:
    body["payment_method"]["provider_selection"] = selection
    return body


@pytest.mark.parametrize(
    ("case", "field"),
    [
        ("unknown-provider", "payment_method.provider_selection.provider_id"),
        ("provider-other-currency", "payment_method.provider_selection.provider_id"),
        ("scheme-the-provider-lacks", "payment_method.provider_selection.scheme_id"),
        ("provider-id-with-user-selected", "payment_method.provider_selection.provider_id"),
        ("preselected-without-provider", "payment_method.provider_selection.provider_id"),
        ("currency-not-the-accounts", "currency"),
        ("amount-zero", "amount_in_minor"),
        ("amount-negative", "amount_in_minor"),
        ("amount-as-string", "amount_in_minor"),
        ("forms-disagree", None),
        ("no-merchant-account", None),
        ("not-bank-transfer", "payment_method.type"),
        ("scheme-id-not-preselected", "payment_method.scheme_selection.scheme_id"),
    ],
)
def test_bad_payment_requests_are_400(operator: Operator, case: str, field: str | None) -> None:
    merchant = _merchant(operator)
    body = _body(merchant)
    if case == "unknown-provider":
        _with_selection(body, type="preselected", provider_id="mock-payments-xx-nowhere")
    elif case == "provider-other-currency":
        _with_selection(body, type="preselected", provider_id=DE_REDIRECT)
    elif case == "scheme-the-provider-lacks":
        _with_selection(
            body, type="preselected", provider_id=GB_REDIRECT, scheme_id="sepa_credit_transfer"
        )
    elif case == "provider-id-with-user-selected":
        _with_selection(body, type="user_selected", provider_id=GB_REDIRECT)
    elif case == "preselected-without-provider":
        _with_selection(body, type="preselected")
    elif case == "currency-not-the-accounts":
        body["currency"] = "EUR"
    elif case == "amount-zero":
        body["amount_in_minor"] = 0
    elif case == "amount-negative":
        body["amount_in_minor"] = -5
    elif case == "amount-as-string":
        body["amount_in_minor"] = "1000"
    elif case == "forms-disagree":
        body["merchant_account_id"] = merchant.accounts["EUR"]["id"]
    elif case == "no-merchant-account":
        del body["payment_method"]["beneficiary"]
    elif case == "not-bank-transfer":
        body["payment_method"]["type"] = "card"
    elif case == "scheme-id-not-preselected":
        body["payment_method"]["scheme_selection"] = {
            "type": "instant_only",
            "scheme_id": "faster_payments_service",
        }
    answer = merchant.signed_post(PAYMENTS, body)
    problem = assert_invalid(answer, *([field] if field else []))
    assert problem["detail"]
    if case == "forms-disagree":
        assert "disagree" in json.dumps(problem)


def test_a_preselected_scheme_no_provider_of_the_currency_offers_is_400(
    operator: Operator,
) -> None:
    merchant = _merchant(operator)
    body = {
        "amount_in_minor": 1_000,
        "currency": "GBP",
        "merchant_account_id": merchant.accounts["GBP"]["id"],
        "payment_method": {
            "type": "bank_transfer",
            "scheme_selection": {"type": "preselected", "scheme_id": "sepa_credit_transfer"},
        },
    }
    assert_invalid(merchant.signed_post(PAYMENTS, body), "payment_method.scheme_selection")


def test_selecting_a_provider_without_the_preselected_scheme_is_refused(
    operator: Operator,
) -> None:
    merchant = _merchant(operator)
    body = {
        "amount_in_minor": 1_000,
        "currency": "EUR",
        "merchant_account_id": merchant.accounts["EUR"]["id"],
        "payment_method": {
            "type": "bank_transfer",
            "scheme_selection": {
                "type": "preselected",
                "scheme_id": "sepa_credit_transfer_instant",
            },
        },
    }
    payment_id = _create(merchant, body)
    offered = {p["id"] for p in _next(_start(merchant, payment_id))["providers"]}
    # Only providers offering the scheme are offered (the embedded one lacks it)...
    assert offered == {
        DE_REDIRECT,
        "mock-payments-fr-redirect",
        "mock-payments-de-redirect-additional-input-text",
    }
    # ...and choosing another is refused: no payment may have a provider lacking its scheme.
    answer = merchant.signed_post(_select_path(payment_id), {"provider_id": DE_EMBEDDED})
    assert_invalid(answer, "provider_id")
    payment = _get(merchant, payment_id)
    assert "provider_id" not in payment
    assert payment["scheme_id"] == "sepa_credit_transfer_instant"
    answer = merchant.signed_post(_select_path(payment_id), {"provider_id": DE_REDIRECT})
    assert answer.status_code == 200, answer.text
    payment = _get(merchant, payment_id)
    assert (payment["provider_id"], payment["scheme_id"]) == (
        DE_REDIRECT,
        "sepa_credit_transfer_instant",
    )


@pytest.mark.parametrize("return_uri", ["not-a-uri", "ftp://x", "/relative/back", "https://"])
def test_a_bad_return_uri_is_400_and_starts_nothing(operator: Operator, return_uri: str) -> None:
    merchant = _merchant(operator)
    payment_id = _create(merchant, _body(merchant))
    answer = merchant.signed_post(
        f"{PAYMENTS}/{payment_id}/authorization-flow", _flow_body(return_uri)
    )
    assert_invalid(answer, "redirect.return_uri")
    assert _get(merchant, payment_id)["status"] == "authorization_required"


def test_provider_selection_only_while_authorizing(operator: Operator) -> None:
    merchant = _merchant(operator)
    payment_id = _create(merchant, _body(merchant))
    # Not started yet.
    answer = merchant.signed_post(_select_path(payment_id), {"provider_id": GB_REDIRECT})
    assert_problem(answer, 409, "Conflict")
    _start(merchant, payment_id)
    answer = merchant.signed_post(_select_path(payment_id), {"provider_id": GB_REDIRECT})
    assert answer.status_code == 200, answer.text
    # Chosen once only.
    answer = merchant.signed_post(_select_path(payment_id), {"provider_id": GB_REDIRECT})
    assert_problem(answer, 409, "Conflict")
    # A second authorization-flow call is a conflict too.
    answer = merchant.signed_post(f"{PAYMENTS}/{payment_id}/authorization-flow", _flow_body())
    assert_problem(answer, 409, "Conflict")

    preselected = _create(merchant, _body(merchant, provider_id=GB_REDIRECT))
    _start(merchant, preselected)
    answer = merchant.signed_post(_select_path(preselected), {"provider_id": GB_REDIRECT})
    assert_problem(answer, 409, "Conflict")


@pytest.mark.parametrize(
    ("currency", "provider_id"),
    [
        ("EUR", NL_PRIVATE_BETA),  # private beta, not offered without a filter
        ("GBP", DE_REDIRECT),  # does not serve GBP
        ("GBP", "mock-payments-xx-nowhere"),  # unknown
    ],
)
def test_selecting_a_provider_not_offered_is_400(
    operator: Operator, currency: str, provider_id: str
) -> None:
    merchant = _merchant(operator)
    payment_id = _create(merchant, _body(merchant, currency))
    offered = {p["id"] for p in _next(_start(merchant, payment_id))["providers"]}
    assert provider_id not in offered
    answer = merchant.signed_post(_select_path(payment_id), {"provider_id": provider_id})
    assert_invalid(answer)
    payment = _get(merchant, payment_id)
    assert payment["status"] == "authorizing"
    assert "provider_id" not in payment


@pytest.mark.parametrize(
    ("selection", "field"),
    [
        ({"provider_id": "mock-payments-xx-nowhere"}, "provider_id"),
        ({"provider_id": DE_REDIRECT}, "provider_id"),
        ({"provider_id": GB_REDIRECT, "scheme_id": "sepa_credit_transfer"}, "scheme_id"),
    ],
    ids=["unknown", "other-currency", "scheme-lacking"],
)
def test_provider_selection_errors_name_the_fields_of_the_body(
    operator: Operator, selection: dict[str, str], field: str
) -> None:
    merchant = _merchant(operator)
    payment_id = _create(merchant, _body(merchant))
    _start(merchant, payment_id)
    body = assert_invalid(merchant.signed_post(_select_path(payment_id), selection))
    assert set(body["errors"]) == {field}, body["errors"]


def test_a_filter_excluding_a_provider_refuses_it(operator: Operator) -> None:
    merchant = _merchant(operator)
    body = _body(merchant, "EUR")
    body["payment_method"]["provider_selection"]["filter"] = {"countries": ["FR"]}
    payment_id = _create(merchant, body)
    offered = [p["id"] for p in _next(_start(merchant, payment_id))["providers"]]
    assert offered == ["mock-payments-fr-redirect"]
    answer = merchant.signed_post(_select_path(payment_id), {"provider_id": DE_REDIRECT})
    assert_invalid(answer, "provider_id")


def test_another_merchants_payment_is_404(operator: Operator) -> None:
    owner = _merchant(operator)
    stranger = _merchant(operator)
    payment_id = _create(owner, _body(owner))
    assert_problem(stranger.get(f"{PAYMENTS}/{payment_id}"), 404, "Not Found")
    assert_problem(stranger.get(f"/payments/{payment_id}"), 404, "Not Found")
    for path, body in (
        (f"{PAYMENTS}/{payment_id}/authorization-flow", _flow_body()),
        (_select_path(payment_id), {"provider_id": GB_REDIRECT}),
        (f"{PAYMENTS}/{payment_id}/actions/cancel", {}),
    ):
        assert_problem(stranger.signed_post(path, body), 404, "Not Found")
    # Paying into another merchant's account is 404 as well.
    assert_problem(stranger.signed_post(PAYMENTS, _body(owner)), 404, "Not Found")
    assert_problem(stranger.get(f"{PAYMENTS}/{uuid.uuid4()}"), 404, "Not Found")
    assert _get(owner, payment_id)["status"] == "authorization_required"


def test_unsigned_merchant_posts_are_401(operator: Operator) -> None:
    merchant = _merchant(operator)
    payment_id = _create(merchant, _body(merchant))
    headers = {**bearer(merchant.token()), "Idempotency-Key": str(uuid.uuid4())}
    for path, body in (
        (PAYMENTS, _body(merchant)),
        (f"{PAYMENTS}/{payment_id}/authorization-flow", _flow_body()),
        (f"{PAYMENTS}/{payment_id}/actions/cancel", {}),
        (_select_path(payment_id), {"provider_id": GB_REDIRECT}),
    ):
        answer = merchant.http.post(path, json=body, headers=headers)
        problem = assert_problem(answer, 401, "Unauthenticated")
        assert "signature" in problem["detail"].lower()
    # Signed, but without an Idempotency-Key.
    problem = assert_problem(
        merchant.signed_post(PAYMENTS, _body(merchant), idempotency_key=None), 401
    )
    assert "idempotency-key" in problem["detail"].lower()
    problem = assert_problem(
        merchant.signed_post(f"{PAYMENTS}/{payment_id}/actions/cancel", {}, idempotency_key=None),
        401,
    )
    # No token at all.
    assert_problem(merchant.http.post(PAYMENTS, json=_body(merchant)), 401)
    assert_problem(merchant.http.get(f"{PAYMENTS}/{payment_id}"), 401)
    assert _get(merchant, payment_id)["status"] == "authorization_required"


def test_idempotent_replay_of_create_is_byte_identical(operator: Operator) -> None:
    merchant = _merchant(operator)
    key = str(uuid.uuid4())
    body = _body(merchant, metadata={"order": "once"})
    first = merchant.signed_post(PAYMENTS, body, idempotency_key=key)
    again = merchant.signed_post(PAYMENTS, body, idempotency_key=key)
    assert first.status_code == again.status_code == 201, (first.text, again.text)
    assert first.content == again.content
    assert first.headers["content-type"] == again.headers["content-type"]
    # A new key makes a new payment.
    other = merchant.signed_post(PAYMENTS, body)
    assert other.status_code == 201
    assert other.json()["id"] != first.json()["id"]
    # The same key with another body is refused.
    changed = merchant.signed_post(
        PAYMENTS, _body(merchant, amount=999, metadata={"order": "once"}), idempotency_key=key
    )
    assert_problem(changed, 422, "Idempotency-Key Reuse")
    assert _get(merchant, first.json()["id"])["amount_in_minor"] == 1_000


def test_idempotent_replay_of_a_refused_create(operator: Operator) -> None:
    merchant = _merchant(operator)
    key = str(uuid.uuid4())
    body = _body(merchant, provider_id=DE_REDIRECT)
    first = merchant.signed_post(PAYMENTS, body, idempotency_key=key)
    again = merchant.signed_post(PAYMENTS, body, idempotency_key=key)
    assert first.status_code == again.status_code == 400
    assert first.content == again.content
