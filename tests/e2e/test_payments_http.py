"""Payments API v3 pay-ins over HTTP against `bankrail serve`, the happy paths (spec 2.5-2.8, 3.3,
4.2, 6.2; docs/api.md).

Requests are signed with the public `truelayer-signing` library; the payer's decision is taken
through the mock bank's headless action API; webhooks are collected by a loopback receiver.
Background steps run in the server's worker, so every wait polls with a deadline."""

from __future__ import annotations

import re
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
    wait_for,
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
    bank_token as _bank_token,
)
from pay_in_helpers import (
    fill_in_embedded_forms,
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
RETURN_URI = "https://shop.example/back"
ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$")
QUIET_STATUSES = {"authorization_required", "authorizing", "authorized"}


# --- helpers ----------------------------------------------------------------------------------


def _create(merchant: MerchantClient, body: dict[str, Any], path: str = PAYMENTS) -> dict[str, Any]:
    answer = merchant.signed_post(path, body)
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    assert set(created) == {"id", "user", "resource_token", "status"}, created
    assert created["status"] == "authorization_required"
    assert is_uuid(created["id"])
    return created


def _start(merchant: MerchantClient, payment_id: str, *, prefix: str = "/v3") -> dict[str, Any]:
    answer = merchant.signed_post(
        f"{prefix}/payments/{payment_id}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}},
    )
    assert answer.status_code == 200, answer.text
    flow: dict[str, Any] = answer.json()
    assert flow["status"] == "authorizing", flow
    return flow


def _select(
    merchant: MerchantClient, payment_id: str, provider_id: str, *, path: str | None = None
) -> dict[str, Any]:
    answer = merchant.signed_post(
        path or f"{PAYMENTS}/{payment_id}/authorization-flow/actions/provider-selection",
        {"provider_id": provider_id},
    )
    assert answer.status_code == 200, answer.text
    flow: dict[str, Any] = answer.json()
    assert flow["status"] == "authorizing", flow
    return flow


def _redirect_uri(merchant: MerchantClient, payment_id: str, provider_id: str = GB_REDIRECT) -> str:
    """Start the flow and pick the provider; the uri of the mock bank."""
    action = _next(_start(merchant, payment_id))
    if action["type"] == "provider_selection":
        action = _next(_select(merchant, payment_id, provider_id))
    assert action["type"] == "redirect", action
    return str(action["uri"])


def _pay(
    merchant: MerchantClient,
    payment_id: str,
    action: str = "Execute",
    provider_id: str = GB_REDIRECT,
    **delays: int,
) -> httpx.Response:
    uri = _redirect_uri(merchant, payment_id, provider_id)
    answer = _bank(merchant.http, payment_id, uri, action, **delays)
    assert answer.status_code == 202, answer.text
    return answer


def _get(merchant: MerchantClient, payment_id: str, path: str = PAYMENTS) -> dict[str, Any]:
    answer = merchant.get(f"{path}/{payment_id}")
    assert answer.status_code == 200, answer.text
    payment: dict[str, Any] = answer.json()
    return payment


def _wait_status(
    merchant: MerchantClient, payment_id: str, status: str, timeout: float = 20
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        payment = _get(merchant, payment_id)
        assert payment["status"] != "payment_failed" or status == "payment_failed", payment
        return payment if payment["status"] == status else None

    return wait_for(check, timeout=timeout, what=f"payment {payment_id} {status}")


def _sources(merchant: MerchantClient, currency: str, user_id: str) -> list[dict[str, Any]]:
    answer = merchant.get(
        f"/v3/merchant-accounts/{merchant.accounts[currency]['id']}/payment-sources",
        user_id=user_id,
    )
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


# --- creation ---------------------------------------------------------------------------------


def test_create_with_the_nested_form(operator: Operator) -> None:
    merchant = _merchant(operator)
    body = _body(merchant, metadata={"order": "A-1"})
    created = _create(merchant, body)
    assert isinstance(created["resource_token"], str)
    assert created["resource_token"].count(".") == 2  # a JWT

    payment = _get(merchant, created["id"])
    assert payment["id"] == created["id"]
    assert payment["status"] == "authorization_required"
    assert payment["amount_in_minor"] == 1_000
    assert payment["currency"] == "GBP"
    assert payment["merchant_account_id"] == merchant.accounts["GBP"]["id"]
    assert payment["payment_method"]["type"] == "bank_transfer"
    assert payment["payment_method"]["provider_selection"]["type"] == "user_selected"
    assert payment["payment_method"]["beneficiary"] == {
        "type": "merchant_account",
        "merchant_account_id": merchant.accounts["GBP"]["id"],
    }
    assert payment["metadata"] == {"order": "A-1"}
    assert payment["user"]["id"] == created["user"]["id"]
    assert ISO_Z.match(payment["created_at"]), payment
    for absent in ("failure_stage", "failure_reason", "settled_at", "payment_source"):
        assert absent not in payment


def test_create_with_the_specs_flat_form(operator: Operator) -> None:
    merchant = _merchant(operator)
    body = {
        "amount_in_minor": 2_000,
        "currency": "EUR",
        "merchant_account_id": merchant.accounts["EUR"]["id"],
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": {"type": "preselected", "provider_id": DE_REDIRECT},
            "scheme_selection": {"type": "preselected", "scheme_id": "sepa_credit_transfer"},
        },
        "user": {"id": "flat-user"},
    }
    created = _create(merchant, body)
    assert created["user"] == {"id": "flat-user"}
    payment = _get(merchant, created["id"])
    assert payment["merchant_account_id"] == merchant.accounts["EUR"]["id"]
    assert (
        payment["payment_method"]["beneficiary"]["merchant_account_id"]
        == (merchant.accounts["EUR"]["id"])
    )
    assert payment["provider_id"] == DE_REDIRECT
    assert payment["scheme_id"] == "sepa_credit_transfer"


def test_create_with_the_flat_form_and_no_provider(operator: Operator) -> None:
    merchant = _merchant(operator)
    body = {
        "amount_in_minor": 2_000,
        "currency": "GBP",
        "merchant_account_id": merchant.accounts["GBP"]["id"],
        "payment_method": {
            "type": "bank_transfer",
            "scheme_selection": {"type": "preselected", "scheme_id": "faster_payments_service"},
        },
    }
    created = _create(merchant, body)
    payment = _get(merchant, created["id"])
    assert payment["merchant_account_id"] == merchant.accounts["GBP"]["id"]
    assert payment["payment_method"]["provider_selection"]["type"] == "user_selected"
    assert payment["scheme_id"] == "faster_payments_service"


def test_create_with_both_forms_agreeing(operator: Operator) -> None:
    merchant = _merchant(operator)
    body = _body(merchant, merchant_account_id=merchant.accounts["GBP"]["id"])
    created = _create(merchant, body)
    assert _get(merchant, created["id"])["merchant_account_id"] == merchant.accounts["GBP"]["id"]
    # The ids agree whatever their letter case.
    body = _body(merchant, merchant_account_id=merchant.accounts["GBP"]["id"].upper())
    created = _create(merchant, body)
    assert _get(merchant, created["id"])["merchant_account_id"] == merchant.accounts["GBP"]["id"]


def test_user_id_is_generated_when_absent_and_echoed_when_given(operator: Operator) -> None:
    merchant = _merchant(operator)
    generated = [_create(merchant, _body(merchant))["user"]["id"] for _ in range(2)]
    assert all(generated)
    assert generated[0] != generated[1]
    without_id = _create(merchant, _body(merchant, user={"name": "Jane Payer"}))
    assert without_id["user"]["id"]
    assert without_id["user"]["id"] not in generated

    given = _create(
        merchant,
        _body(
            merchant,
            user={
                "id": "customer-42",
                "name": "Jane Payer",
                "email": "jane@example.com",
                "phone": "+447700900123",
                "date_of_birth": "1990-01-31",
            },
        ),
    )
    assert given["user"] == {"id": "customer-42"}
    assert _get(merchant, given["id"])["user"]["id"] == "customer-42"


def test_create_without_the_prefix(operator: Operator) -> None:
    merchant = _merchant(operator)
    created = _create(merchant, _body(merchant), path="/payments")
    assert _get(merchant, created["id"])["status"] == "authorization_required"


# --- the journey ------------------------------------------------------------------------------


def test_user_selected_journey_to_settlement_with_webhooks(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = _merchant(operator, receiver)
    metadata = {"order": "A-17", "customer": "c 42"}
    created = _create(
        merchant,
        _body(
            merchant, amount=1_234, user={"id": "payer-1", "name": "Jane Payer"}, metadata=metadata
        ),
    )
    payment_id = created["id"]
    assert _balances(merchant) == (0, 0)

    flow = _start(merchant, payment_id)
    action = _next(flow)
    assert action["type"] == "provider_selection"
    offered = {p["id"] for p in action["providers"]}
    assert offered == {GB_REDIRECT}  # every GA provider of GBP, nothing else
    assert _get(merchant, payment_id)["status"] == "authorizing"

    action = _next(_select(merchant, payment_id, GB_REDIRECT))
    assert action["type"] == "redirect"
    uri = urlsplit(action["uri"])
    assert f"{uri.scheme}://{uri.netloc}" == str(merchant.http.base_url).rstrip("/")
    assert uri.path == f"/mock-bank/login/{payment_id}"
    assert not uri.query
    assert parse_qs(uri.fragment)["token"]
    still = _get(merchant, payment_id)
    assert still["status"] == "authorizing"
    assert still["provider_id"] == GB_REDIRECT
    assert still["scheme_id"] == "faster_payments_service"

    answer = _bank(merchant.http, payment_id, action["uri"], "Execute")
    assert answer.status_code == 202, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    back = urlsplit(answer.text)
    assert (back.scheme, back.netloc, back.path) == ("https", "shop.example", "/back")
    assert parse_qs(back.query) == {"payment_id": [payment_id]}

    payment = _wait_status(merchant, payment_id, "payment_settled")
    history = [h["status"] for h in payment["status_history"]]
    assert history == [
        "authorization_required",
        "authorizing",
        "authorized",
        "payment_executed",
        "payment_settled",
    ]
    created_at, authorized_at, executed_at, settled_at = (
        parse_time(payment[k]) for k in ("created_at", "authorized_at", "executed_at", "settled_at")
    )
    assert created_at <= authorized_at <= executed_at <= settled_at
    source = payment["payment_source"]
    assert is_uuid(source["id"])
    assert source["account_holder_name"] == "Jane Payer"
    kinds = {i["type"] for i in source["account_identifiers"]}
    assert kinds == {"sort_code_account_number", "iban"}

    # The balance moved by exactly the amount.
    assert _balances(merchant) == (1_234, 1_234)

    executed = _wait_event(receiver, payment_id, "payment_executed")
    settled = _wait_event(receiver, payment_id, "payment_settled")
    common = {"type", "event_version", "event_id", "payment_id", "payment_method", "metadata"}
    assert set(executed) == common | {"executed_at"}, executed
    assert set(settled) == common | {"settled_at", "payment_source", "user_id"}, settled
    for event in (executed, settled):
        assert event["event_version"] == 1
        assert is_uuid(event["event_id"])
        assert event["payment_id"] == payment_id
        assert event["metadata"] == metadata
        assert event["payment_method"] == {
            "type": "bank_transfer",
            "provider_id": GB_REDIRECT,
            "scheme_id": "faster_payments_service",
        }
    assert executed["event_id"] != settled["event_id"]
    assert executed["executed_at"] == payment["executed_at"]
    assert settled["settled_at"] == payment["settled_at"]
    assert settled["user_id"] == "payer-1"
    assert settled["payment_source"] == source
    assert set(settled["payment_source"]) == {"id", "account_identifiers", "account_holder_name"}

    # The quiet statuses sent nothing: neither delivered nor even recorded.
    assert not [e for e in _events(receiver, payment_id) if e["type"] in QUIET_STATUSES]
    assert _recorded_event_types(operator, merchant) == ["payment_executed", "payment_settled"]

    # The settled payment is on the account's statement.
    answer = merchant.get(
        f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}/transactions", type="payment"
    )
    assert answer.status_code == 200, answer.text
    items = [i for i in answer.json()["items"] if i["id"] == payment_id]
    assert len(items) == 1, answer.json()
    assert items[0]["type"] == "merchant_account_payment"
    assert items[0]["amount_in_minor"] == 1_234
    assert items[0]["currency"] == "GBP"
    assert items[0]["status"] == "settled"

    # And its source is listed for the user, usable for closed-loop payouts.
    sources = _sources(merchant, "GBP", "payer-1")
    assert [s["id"] for s in sources] == [source["id"]]
    assert sources[0]["account_identifiers"] == source["account_identifiers"]
    assert sources[0]["account_holder_name"] == "Jane Payer"
    assert _sources(merchant, "GBP", "someone-else") == []
    assert _sources(merchant, "EUR", "payer-1") == []


def test_the_same_user_paying_again_gets_the_same_payment_source(operator: Operator) -> None:
    merchant = _merchant(operator)
    ids = []
    for _ in range(2):
        created = _create(merchant, _body(merchant, amount=500, user={"id": "returning"}))
        _pay(merchant, created["id"])
        ids.append(_wait_status(merchant, created["id"], "payment_settled")["payment_source"]["id"])
    assert ids[0] == ids[1]
    assert [s["id"] for s in _sources(merchant, "GBP", "returning")] == [ids[0]]

    other = _create(merchant, _body(merchant, amount=500, user={"id": "newcomer"}))
    _pay(merchant, other["id"])
    other_source = _wait_status(merchant, other["id"], "payment_settled")["payment_source"]
    assert other_source["id"] != ids[0]
    assert _balances(merchant) == (1_500, 1_500)


def test_preselected_provider_goes_straight_to_the_bank(operator: Operator) -> None:
    merchant = _merchant(operator)
    created = _create(merchant, _body(merchant, provider_id=GB_REDIRECT))
    action = _next(_start(merchant, created["id"]))
    assert action["type"] == "redirect"
    assert urlsplit(action["uri"]).path == f"/mock-bank/login/{created['id']}"
    payment = _get(merchant, created["id"])
    assert payment["payment_method"]["provider_selection"]["type"] == "preselected"
    assert payment["payment_method"]["provider_selection"]["provider_id"] == GB_REDIRECT
    assert _bank(merchant.http, created["id"], action["uri"], "Execute").status_code == 202
    _wait_status(merchant, created["id"], "payment_settled")


def test_preselected_provider_without_scheme_reports_the_scheme_used(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = _merchant(operator, receiver)
    created = _create(merchant, _body(merchant, provider_id=GB_REDIRECT))
    _pay(merchant, created["id"])
    payment = _wait_status(merchant, created["id"], "payment_settled")
    settled = _wait_event(receiver, created["id"], "payment_settled")
    assert settled["payment_method"] == {
        "type": "bank_transfer",
        "provider_id": GB_REDIRECT,
        "scheme_id": "faster_payments_service",
    }
    assert payment["scheme_id"] == "faster_payments_service"


def test_eur_payment_through_a_user_selected_provider(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = _merchant(operator, receiver)
    created = _create(merchant, _body(merchant, "EUR", 4_200))
    action = _next(_start(merchant, created["id"]))
    offered = {p["id"] for p in action["providers"]}
    # Every GA provider of EUR; the private-beta one only with a filter.
    assert offered == {
        DE_REDIRECT,
        "mock-payments-fr-redirect",
        DE_EMBEDDED,
        "mock-payments-de-redirect-additional-input-text",
    }
    for provider in action["providers"]:
        assert provider["capabilities"]["payments"]["bank_transfer"]["schemes"]
    action = _next(_select(merchant, created["id"], DE_REDIRECT))
    assert _bank(merchant.http, created["id"], action["uri"], "Execute").status_code == 202
    payment = _wait_status(merchant, created["id"], "payment_settled")
    assert payment["scheme_id"] in {"sepa_credit_transfer_instant", "sepa_credit_transfer"}
    assert [i["type"] for i in payment["payment_source"]["account_identifiers"]] == ["iban"]
    assert _balances(merchant, "EUR") == (4_200, 4_200)
    assert _balances(merchant, "GBP") == (0, 0)
    settled = _wait_event(receiver, created["id"], "payment_settled")
    assert settled["payment_method"]["provider_id"] == DE_REDIRECT
    assert settled["payment_method"]["scheme_id"] == payment["scheme_id"]


def test_filter_offers_the_private_beta_provider(operator: Operator) -> None:
    merchant = _merchant(operator)
    body = _body(merchant, "EUR")
    body["payment_method"]["provider_selection"]["filter"] = {
        "countries": ["NL"],
        "release_channel": "private_beta",
    }
    created = _create(merchant, body)
    action = _next(_start(merchant, created["id"]))
    assert [p["id"] for p in action["providers"]] == ["mock-payments-nl-redirect"]
    action = _next(_select(merchant, created["id"], "mock-payments-nl-redirect"))
    assert action["type"] == "redirect"


def test_execution_and_settlement_delays_run_on_the_service_clock(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = _merchant(operator, receiver)
    created = _create(merchant, _body(merchant, amount=700))
    payment_id = created["id"]
    _pay(
        merchant,
        payment_id,
        execution_delay_in_seconds=600,
        settlement_delay_in_seconds=600,
    )
    assert _get(merchant, payment_id)["status"] == "authorized"

    # Almost there: nothing moves.
    _advance(operator, 590)
    assert _get(merchant, payment_id)["status"] == "authorized"
    assert _balances(merchant) == (0, 0)

    _advance(operator, 10)
    executed = _wait_status(merchant, payment_id, "payment_executed")
    assert "settled_at" not in executed
    gap = parse_time(executed["executed_at"]) - parse_time(executed["authorized_at"])
    assert gap.total_seconds() >= 600
    _wait_event(receiver, payment_id, "payment_executed")
    # Executed is not settled: no money yet, and no settlement event.
    assert _balances(merchant) == (0, 0)
    assert not [e for e in _events(receiver, payment_id) if e["type"] == "payment_settled"]

    _advance(operator, 600)
    settled = _wait_status(merchant, payment_id, "payment_settled")
    gap = parse_time(settled["settled_at"]) - parse_time(settled["executed_at"])
    assert gap.total_seconds() >= 600
    assert _balances(merchant) == (700, 700)
    _wait_event(receiver, payment_id, "payment_settled")


def test_embedded_provider_uses_a_form(operator: Operator) -> None:
    merchant = _merchant(operator)
    created = _create(merchant, _body(merchant, "EUR", 900, provider_id=DE_EMBEDDED))
    action = _next(_start(merchant, created["id"]))
    assert action["type"] == "form"
    ids = [i["id"] for i in action["inputs"]]
    assert ids == ["remitter-name", "remitter-iban", "psu-id", "psu-password"]

    answer = fill_in_embedded_forms(merchant, created["id"], "test_executed")
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] in {"authorized", "payment_executed", "payment_settled"}
    assert _next(answer.json()) == {"type": "wait"}
    payment = _wait_status(merchant, created["id"], "payment_settled")
    assert payment["provider_id"] == DE_EMBEDDED
    assert payment["scheme_id"] == "sepa_credit_transfer"
    assert _balances(merchant, "EUR") == (900, 900)


# --- resource token, aliases, provider return -------------------------------------------------


def test_resource_token_reads_and_drives_its_own_payment_unsigned(operator: Operator) -> None:
    merchant = _merchant(operator)
    created = _create(merchant, _body(merchant))
    other = _create(merchant, _body(merchant))
    payment_id = created["id"]
    resource = bearer(created["resource_token"])
    http = merchant.http

    answer = http.get(f"{PAYMENTS}/{payment_id}", headers=resource)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "authorization_required"

    # The hosted page calls the authorisation endpoints with no signature or idempotency key.
    answer = http.post(
        f"{PAYMENTS}/{payment_id}/authorization-flow",
        json={"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}},
        headers=resource,
    )
    assert answer.status_code == 200, answer.text
    assert _next(answer.json())["type"] == "provider_selection"
    answer = http.post(
        f"{PAYMENTS}/{payment_id}/submit-provider-selection",
        json={"provider_id": GB_REDIRECT},
        headers=resource,
    )
    assert answer.status_code == 200, answer.text
    uri = _next(answer.json())["uri"]
    assert _bank(http, payment_id, uri, "Execute").status_code == 202
    _wait_status(merchant, payment_id, "payment_settled")

    # Bound to one payment: another payment's token is refused.
    wrong = bearer(other["resource_token"])
    assert_problem(http.get(f"{PAYMENTS}/{payment_id}", headers=wrong), 401)
    assert_problem(
        http.post(
            f"{PAYMENTS}/{payment_id}/authorization-flow",
            json={"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}},
            headers=wrong,
        ),
        401,
    )
    assert _get(merchant, other["id"])["status"] == "authorization_required"
    # And it is no access token.
    assert_problem(http.get("/v3/merchant-accounts", headers=resource), 401)
    assert_problem(http.get(f"/v3/payouts/{uuid.uuid4()}", headers=resource), 401)


def test_the_mock_bank_token_is_not_a_resource_token(operator: Operator) -> None:
    merchant = _merchant(operator)
    created = _create(merchant, _body(merchant, provider_id=GB_REDIRECT))
    uri = _next(_start(merchant, created["id"]))["uri"]
    # The resource token does not work at the mock bank, and the bank token not at the API.
    answer = merchant.http.post(
        f"/mock-bank/api/single-immediate-payments/{created['id']}/action",
        json={"action": "Execute"},
        headers=bearer(created["resource_token"]),
    )
    assert_problem(answer, 401)
    answer = merchant.http.get(f"{PAYMENTS}/{created['id']}", headers=bearer(_bank_token(uri)))
    assert_problem(answer, 401)
    assert _get(merchant, created["id"])["status"] == "authorizing"


def test_no_prefix_aliases(operator: Operator) -> None:
    merchant = _merchant(operator)
    created = _create(merchant, _body(merchant))
    payment_id = created["id"]
    flow = _start(merchant, payment_id, prefix="")
    assert _next(flow)["type"] == "provider_selection"
    action = _next(
        _select(
            merchant,
            payment_id,
            GB_REDIRECT,
            path=f"/payments/{payment_id}/submit-provider-selection",
        )
    )
    assert action["type"] == "redirect"
    payment = _get(merchant, payment_id, path="/payments")
    assert payment["status"] == "authorizing"
    assert payment == _get(merchant, payment_id)
    answer = merchant.http.get(f"/payments/{payment_id}", headers=bearer(created["resource_token"]))
    assert answer.status_code == 200, answer.text


def test_provider_return_needs_no_token(operator: Operator) -> None:
    merchant = _merchant(operator)
    created = _create(merchant, _body(merchant))
    payment_id = created["id"]
    uri = _redirect_uri(merchant, payment_id)
    back = _bank(merchant.http, payment_id, uri, "Execute").text
    anonymous = httpx.Client(base_url=str(merchant.http.base_url), timeout=30)
    expected = {"resource": {"type": "payment", "payment_id": payment_id}}
    try:
        for body in (
            {"query": urlsplit(back).query},
            {"query": f"payment_id={payment_id}"},
            {"query": f"?state=x&payment_id={payment_id}"},
            {"fragment": f"payment_id={payment_id}&x=1"},
            {"query": "foo=bar", "fragment": f"#payment_id={payment_id}"},
        ):
            answer = anonymous.post("/v3/payments-provider-return", json=body)
            assert answer.status_code == 200, (body, answer.text)
            assert answer.json() == expected

        for body in ({"query": "foo=bar"}, {"fragment": "state=1"}, {}):
            assert_invalid(anonymous.post("/v3/payments-provider-return", json=body))
        answer = anonymous.post(
            "/v3/payments-provider-return", json={"query": f"payment_id={uuid.uuid4()}"}
        )
        assert_problem(answer, 404)
    finally:
        anonymous.close()
