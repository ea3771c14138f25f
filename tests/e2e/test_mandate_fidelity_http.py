"""Mandates as the official SDKs use them (spec/fidelity.md MD1, MD3, MD4, decision 5), over
HTTP against `bankrail serve`: every mandate and mandate-payment body the SDKs send
(tests/fixtures/sdk-bodies, copied from spec/sdk-bodies) is accepted and read back; an
external-account mandate's payments credit no merchant account; a `user_selected` filter
decides the banks offered; retries run on the service clock; and every mandate route keeps
the scopes of the two kinds apart."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import assert_invalid, assert_problem, bearer, get_record, wait_record_status
from mandate_helpers import (
    GB_REDIRECT,
    MANDATES,
    RETURN_URI,
    authorised_mandate,
    client_token,
    create_mandate,
    mandate_body,
)
from pay_in_helpers import PAYMENTS, advance_clock, balances, next_action

from support.api import MerchantClient, Operator

BODIES = Path(__file__).resolve().parents[1] / "fixtures" / "sdk-bodies"
MANDATE_BODIES = sorted(
    p.name for p in BODIES.glob("*-mandate-*.json") if "-payment-mandate" not in p.name
)
PAYMENT_BODIES = sorted(p.name for p in BODIES.glob("*-payment-mandate*.json"))
MANDATE_PLACEHOLDER = "00000000-0000-4000-8000-000000000004"
USER_PLACEHOLDER = "00000000-0000-4000-8000-000000000005"
FINISHED = {"payment_settled", "payment_failed"}
HOUR = 3_600
GB = GB_REDIRECT


def sdk_body(name: str, mandate_id: str | None = None) -> dict[str, Any]:
    """The body an SDK sends, its placeholders filled in (README of sdk-bodies)."""
    text = (BODIES / name).read_text()
    text = text.replace(USER_PLACEHOLDER, str(uuid.uuid4()))
    if mandate_id is not None:
        text = text.replace(MANDATE_PLACEHOLDER, mandate_id)
    body: dict[str, Any] = json.loads(text)["body"]
    return body


def _sent(value: dict[str, Any]) -> dict[str, Any]:
    """What an object reads back as: its null fields are the same as absent ones."""
    return {key: item for key, item in value.items() if item is not None}


def _pay(merchant: MerchantClient, body: dict[str, Any]) -> str:
    answer = merchant.signed_post(PAYMENTS, body)
    assert answer.status_code == 201, answer.text
    created = answer.json()
    assert list(created) == ["id", "user", "resource_token", "status"]
    assert created["status"] == "authorized"
    return str(created["id"])


def _payment(merchant: MerchantClient, payment_id: str) -> dict[str, Any]:
    return get_record(merchant, f"{PAYMENTS}/{payment_id}")


def _finished(merchant: MerchantClient, payment_id: str) -> dict[str, Any]:
    return wait_record_status(merchant, f"{PAYMENTS}/{payment_id}", FINISHED)


def _funds(merchant: MerchantClient, mandate_id: str, amount: int) -> bool:
    answer = merchant.get(f"{MANDATES}/{mandate_id}/funds", amount_in_minor=amount, currency="GBP")
    assert answer.status_code == 200, answer.text
    return bool(answer.json()["confirmed"])


def _advance(operator: Operator, merchant: MerchantClient, seconds: float) -> None:
    """Move the service clock; the merchant's access token may expire on the way."""
    advance_clock(operator, seconds)
    merchant.forget_token()


def _set_balance(operator: Operator, mandate_id: str, balance: int) -> None:
    answer = operator.put(
        f"/sandbox/mandates/{mandate_id}/remitter-balance", {"remitter_balance_in_minor": balance}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"mandate_id": mandate_id, "remitter_balance_in_minor": balance}


@pytest.mark.parametrize("name", MANDATE_BODIES)
def test_every_sdk_mandate_body_is_created_and_read_back(operator: Operator, name: str) -> None:
    merchant = operator.new_merchant()
    body = sdk_body(name)
    kind = body["mandate"]["type"]
    token = client_token(operator, merchant, [f"recurring_payments:{kind}"])
    answer = merchant.signed_post(MANDATES, body, token=token)
    assert answer.status_code == 201, answer.text
    created = answer.json()
    assert list(created) == ["id", "user", "resource_token", "status"]
    assert created["user"] == {"id": body["user"]["id"]}
    read = merchant.http.get(f"{MANDATES}/{created['id']}", headers=bearer(token))
    assert read.status_code == 200, read.text
    mandate = read.json()
    assert mandate["type"] == kind
    assert mandate["status"] == "authorization_required"
    assert mandate["currency"] == "GBP"
    assert mandate["beneficiary"] == body["mandate"]["beneficiary"]
    assert mandate["provider_selection"] == body["mandate"]["provider_selection"]
    assert mandate.get("use_case") == body["mandate"].get("use_case")
    assert mandate.get("related_products") == body.get("related_products")
    assert mandate["user"] == _sent(body["user"])
    assert mandate["constraints"] == body["constraints"]
    assert mandate["metadata"] == body["metadata"]


def test_the_full_user_and_nulls_read_back(operator: Operator) -> None:
    merchant = operator.new_merchant()
    body = sdk_body("java-mandate-commercial-preselected.json")
    user = {
        "id": "payer-42",
        "name": "John Smith",
        "email": "john@example.com",
        "phone": "+44777777777",
        "date_of_birth": "1990-01-31",
        "address": {
            "address_line1": "1 Hardwick St",
            "address_line2": None,
            "city": "London",
            "state": "London",
            "zip": "EC1R 4RB",
            "country_code": "GB",
        },
    }
    body.update(user=user, related_products=None)
    body["mandate"].update(reference=None, use_case=None)
    mandate_id = str(create_mandate(merchant, body)["id"])
    mandate = get_record(merchant, f"{MANDATES}/{mandate_id}")
    assert mandate["user"] == {**user, "address": _sent(user["address"])}
    assert "related_products" not in mandate
    assert "use_case" not in mandate


SHORT_SORT_CODE = {
    "type": "external_account",
    "account_holder_name": "A",
    "account_identifier": {
        "type": "sort_code_account_number",
        "sort_code": "14066",
        "account_number": "10003957",
    },
}
PRESELECTED_WITH_FILTER = {
    "type": "preselected",
    "provider_id": GB_REDIRECT,
    "filter": {"countries": ["GB"]},
}
UNKNOWN_CHANNEL = {"type": "user_selected", "filter": {"release_channel": "beta"}}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"use_case": "financial_services", "type": "sweeping"}, "mandate.use_case"),
        ({"use_case": "gambling"}, "mandate.use_case"),
        ({"provider_selection": PRESELECTED_WITH_FILTER}, "mandate.provider_selection.filter"),
        (
            {"provider_selection": UNKNOWN_CHANNEL},
            "mandate.provider_selection.filter.release_channel",
        ),
        (
            {"beneficiary": SHORT_SORT_CODE},
            "mandate.beneficiary.account_identifier.sort_code",
        ),
    ],
)
def test_bad_new_mandate_fields_are_400_naming_the_field(
    operator: Operator, change: dict[str, Any], field: str
) -> None:
    merchant = operator.new_merchant()
    body = sdk_body("java-mandate-commercial-preselected.json")
    body["mandate"].update(change)
    assert_invalid(merchant.signed_post(MANDATES, body), field)
    assert get_record(merchant, MANDATES)["items"] == []


def _offered(merchant: MerchantClient, provider_filter: dict[str, Any]) -> tuple[str, list[str]]:
    body = sdk_body("dotnet-mandate-commercial-user-selected.json")
    body["mandate"]["provider_selection"]["filter"] = provider_filter
    mandate_id = str(create_mandate(merchant, body)["id"])
    flow = merchant.signed_post(
        f"{MANDATES}/{mandate_id}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}},
    )
    assert flow.status_code == 200, flow.text
    action = next_action(flow.json())
    assert action["type"] == "provider_selection"
    return mandate_id, [provider["id"] for provider in action["providers"]]


def test_a_user_selected_filter_decides_the_banks_offered(operator: Operator) -> None:
    merchant = operator.new_merchant()
    wanted = {"countries": ["GB"], "release_channel": "private_beta"}
    mandate_id, offered = _offered(merchant, wanted)
    assert GB_REDIRECT in offered
    assert GB_REDIRECT in _offered(merchant, {"release_channel": "private_beta"})[1]
    elsewhere, none = _offered(merchant, {"countries": ["FR"]})
    assert none == []
    # The payer can pick only a bank the filter offers.
    selection = "authorization-flow/actions/provider-selection"
    refused = merchant.signed_post(f"{MANDATES}/{elsewhere}/{selection}", {"provider_id": GB})
    assert_invalid(refused, "provider_id")
    chosen = merchant.signed_post(f"{MANDATES}/{mandate_id}/{selection}", {"provider_id": GB})
    assert chosen.status_code == 200, chosen.text
    mandate = get_record(merchant, f"{MANDATES}/{mandate_id}")
    assert mandate["provider_selection"] == {
        "type": "user_selected",
        "provider_id": GB_REDIRECT,
        "filter": wanted,
    }


def test_payments_on_an_external_account_mandate_credit_no_merchant_account(
    operator: Operator,
) -> None:
    merchant = operator.new_merchant()
    body = sdk_body("java-mandate-commercial-preselected.json")
    mandate_id, _ = authorised_mandate(merchant, body)
    before = {currency: balances(merchant, currency) for currency in ("GBP", "EUR")}
    payment_id = _pay(merchant, sdk_body("java-payment-mandate.json", mandate_id))
    payment = _finished(merchant, payment_id)
    assert payment["status"] == "payment_settled", payment
    assert payment["payment_method"] == {
        "type": "mandate",
        "mandate_id": mandate_id,
        "reference": "a-custom-reference",
    }
    assert "merchant_account_id" not in payment  # no merchant account is credited
    assert "payment_source" not in payment
    # The payer's bank paid the external account: no Bankrail account moved.
    assert {currency: balances(merchant, currency) for currency in ("GBP", "EUR")} == before
    assert operator.get("/admin/ledger/check").json() == {"ok": True, "violations": []}
    month = get_record(merchant, f"{MANDATES}/{mandate_id}/constraints")["periodic_limits"]
    assert month["month"]["current_amount"] == 1_000
    assert month["month"]["maximum_available_amount"] == 1_000
    # Over the individual maximum it fails as on any mandate.
    over = sdk_body("java-payment-mandate.json", mandate_id)
    over["amount_in_minor"] = 1_001
    failed = _finished(merchant, _pay(merchant, over))
    assert (failed["status"], failed["failure_reason"]) == (
        "payment_failed",
        "constraint_violation",
    )


@pytest.mark.parametrize("name", PAYMENT_BODIES)
def test_every_sdk_payment_on_a_mandate_is_accepted_and_read_back(
    operator: Operator, name: str
) -> None:
    merchant = operator.new_merchant()
    mandate_id, _ = authorised_mandate(merchant)
    body = sdk_body(name, mandate_id)
    payment = _finished(merchant, _pay(merchant, body))
    assert payment["status"] == "payment_settled", payment
    assert payment["payment_method"] == _sent(body["payment_method"])
    assert payment["amount_in_minor"] == body["amount_in_minor"]
    assert balances(merchant) == (1_000, 1_000)


def test_null_retry_and_user_interaction_are_absent(operator: Operator) -> None:
    merchant = operator.new_merchant()
    mandate_id, _ = authorised_mandate(merchant)
    body = sdk_body("java-payment-mandate.json", mandate_id)
    body["payment_method"].update(retry=None, user_interaction=None)
    payment = _finished(merchant, _pay(merchant, body))
    assert payment["payment_method"] == {
        "type": "mandate",
        "mandate_id": mandate_id,
        "reference": "a-custom-reference",
    }


@pytest.mark.parametrize(
    ("method", "field"),
    [
        ({"retry": {"type": "smart"}}, "payment_method.retry.for"),
        ({"retry": {"type": "standard", "for": "91d"}}, "payment_method.retry"),
        ({"user_interaction": "sometimes"}, "payment_method.user_interaction"),
    ],
)
def test_bad_retry_or_user_interaction_is_400(
    operator: Operator, method: dict[str, Any], field: str
) -> None:
    merchant = operator.new_merchant()
    mandate_id, _ = authorised_mandate(merchant)
    body = sdk_body("java-payment-mandate.json", mandate_id)
    body["payment_method"].update(method)
    assert_invalid(merchant.signed_post(PAYMENTS, body), field)


def test_a_smart_retry_waits_for_funds_and_keeps_the_minimum(operator: Operator) -> None:
    merchant = operator.new_merchant()
    mandate_id, _ = authorised_mandate(merchant, remitter_balance_in_minor=1_050)
    # 1,000 of 1,050 would leave the payer 50, below the minimum of 100.
    body = sdk_body("java-payment-mandate-retry-smart-user-present.json", mandate_id)
    waiting = _pay(merchant, body)
    # Another payment, without retry, over the balance fails at once: the bank has answered.
    plain = sdk_body("java-payment-mandate.json", mandate_id)
    plain["amount_in_minor"] = 1_051
    assert _finished(merchant, _pay(merchant, plain))["failure_reason"] == "insufficient_funds"
    _advance(operator, merchant, 5 * HOUR)
    assert _payment(merchant, waiting)["status"] == "authorized"
    assert _funds(merchant, mandate_id, 1_050)  # untouched
    _set_balance(operator, mandate_id, 1_100)
    _advance(operator, merchant, HOUR)
    settled = _finished(merchant, waiting)
    assert settled["status"] == "payment_settled", settled
    assert balances(merchant) == (1_000, 1_000)
    # The payer keeps exactly the minimum.
    assert _funds(merchant, mandate_id, 100)
    assert not _funds(merchant, mandate_id, 101)


def test_a_smart_retry_fails_when_its_window_ends(operator: Operator) -> None:
    merchant = operator.new_merchant()
    mandate_id, _ = authorised_mandate(merchant, remitter_balance_in_minor=500)
    body = sdk_body("java-payment-mandate-retry-smart.json", mandate_id)
    body["payment_method"]["retry"]["for"] = "1d"
    payment_id = _pay(merchant, body)
    _advance(operator, merchant, 23 * HOUR)
    assert _payment(merchant, payment_id)["status"] == "authorized"
    _advance(operator, merchant, 2 * HOUR)
    failed = _finished(merchant, payment_id)
    assert failed["status"] == "payment_failed"
    assert failed["failure_stage"] == "authorized"
    assert failed["failure_reason"] == "insufficient_funds"
    assert _funds(merchant, mandate_id, 500)
    assert balances(merchant) == (0, 0)
    # A failed payment gives its allowance back.
    limits = get_record(merchant, f"{MANDATES}/{mandate_id}/constraints")["periodic_limits"]
    assert limits["month"]["current_amount"] == 0


def test_a_standard_retry_pays_once_funds_arrive_within_its_window(operator: Operator) -> None:
    merchant = operator.new_merchant()
    mandate_id, _ = authorised_mandate(merchant, remitter_balance_in_minor=500)
    standard = sdk_body("java-payment-mandate-retry-standard.json", mandate_id)  # 30m
    late = _pay(merchant, standard)
    paid = _pay(merchant, standard)
    _advance(operator, merchant, 31 * 60)
    assert _finished(merchant, late)["failure_reason"] == "insufficient_funds"
    # The second one's window ended too; a third waits and is paid once funds arrive.
    assert _finished(merchant, paid)["failure_reason"] == "insufficient_funds"
    third = _pay(merchant, standard)
    _set_balance(operator, mandate_id, 1_000)
    _advance(operator, merchant, 5 * 60)
    assert _finished(merchant, third)["status"] == "payment_settled"
    # A standard retry keeps nothing back.
    assert not _funds(merchant, mandate_id, 1)


# --- scopes (decision 5: MD2 not adopted) -----------------------------------------------------


def _routes(mandate_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    base = f"{MANDATES}/{mandate_id}"
    return [
        ("GET", base, None),
        ("GET", f"{base}/constraints", None),
        ("GET", f"{base}/funds?amount_in_minor=1&currency=GBP", None),
        ("POST", f"{base}/authorization-flow", {"redirect": {"return_uri": RETURN_URI}}),
        ("POST", f"{base}/authorization-flow/actions/provider-selection", {"provider_id": GB}),
        ("POST", f"{base}/revoke", None),
    ]  # fmt: skip


def _call(merchant: MerchantClient, method: str, path: str, body: Any, token: str) -> Any:
    if method == "GET":
        return merchant.http.get(path, headers=bearer(token))
    if body is None:
        return merchant.signed_post(path, None, raw=b"", token=token)
    return merchant.signed_post(path, body, token=token)


@pytest.mark.parametrize("kind", ["commercial", "sweeping"])
def test_every_mandate_route_keeps_the_two_kinds_apart(operator: Operator, kind: str) -> None:
    other = "sweeping" if kind == "commercial" else "commercial"
    merchant = operator.new_merchant()
    own = client_token(operator, merchant, [f"recurring_payments:{kind}"])
    wrong = client_token(operator, merchant, [f"recurring_payments:{other}"])
    body = mandate_body(merchant, mandate_type=kind, provider_id=None)
    denied = assert_problem(merchant.signed_post(MANDATES, body, token=wrong), 403)
    assert f"recurring_payments:{kind}" in denied["detail"]
    mandate_id = str(create_mandate(merchant, body)["id"])  # with `payments`
    for method, path, sent in _routes(mandate_id):
        refused = assert_problem(_call(merchant, method, path, sent, wrong), 403)
        assert f"recurring_payments:{kind}" in refused["detail"], (path, refused)
        assert "InvalidAudience" in refused["detail"]
    assert get_record(merchant, f"{MANDATES}/{mandate_id}")["status"] == "authorization_required"
    # The right scope reaches each route (its answer then depends on the mandate's status).
    for method, path, sent in _routes(mandate_id):
        answer = _call(merchant, method, path, sent, own)
        assert answer.status_code != 403, (path, answer.text)
    listed = merchant.http.get(MANDATES, headers=bearer(wrong)).json()["items"]
    assert listed == []
    listed = merchant.http.get(MANDATES, headers=bearer(own)).json()["items"]
    assert [m["id"] for m in listed] == [mandate_id]


def test_payments_on_a_mandate_need_the_payments_scope(operator: Operator) -> None:
    merchant = operator.new_merchant()
    mandate_id, _ = authorised_mandate(merchant)
    commercial = client_token(operator, merchant, ["recurring_payments:commercial"])
    body = sdk_body("java-payment-mandate.json", mandate_id)
    refused = assert_problem(merchant.signed_post(PAYMENTS, body, token=commercial), 403)
    assert "`payments`" in refused["detail"]
    assert _finished(merchant, _pay(merchant, body))["status"] == "payment_settled"
