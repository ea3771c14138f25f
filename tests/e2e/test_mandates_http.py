"""Mandates (variable recurring payments) over HTTP against `bankrail serve` (docs/api.md
"Mandates"): the consent at the mock bank, payments taken within the limits and refused beyond
them, periods on the service clock, revocation, expiry, funds, constraints, scopes, isolation,
concurrency, and every webhook verified with the public signing library."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from e2e_helpers import (
    assert_invalid,
    assert_problem,
    bearer,
    get_record,
    parse_time,
    service_now,
    wait_record_status,
)
from mandate_helpers import (
    GB_REDIRECT,
    MANDATES,
    RETURN_URI,
    authorised_mandate,
    client_token,
    consent_action,
    create_mandate,
    mandate_body,
    mandate_payment,
    redirected_mandate,
)
from pay_in_helpers import (
    PAYMENTS,
    advance_clock,
    balances,
    merchant_with_webhooks,
    next_action,
    verify_webhook,
    wait_payment_event,
    wait_webhook,
)

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver

DAY_LIMIT = {"day": {"maximum_amount": 3_000, "period_alignment": "consent"}}


def _pay(merchant: MerchantClient, mandate_id: str, amount: int, **extra: Any) -> str:
    answer = merchant.signed_post(PAYMENTS, mandate_payment(mandate_id, amount, **extra))
    assert answer.status_code == 201, answer.text
    created = answer.json()
    # The real API's answer (fidelity MD3): {id, user: {id}, resource_token, status}.
    assert list(created) == ["id", "user", "resource_token", "status"]
    assert created["resource_token"].count(".") == 2  # a JWT
    assert created["status"] == "authorized"
    return str(created["id"])


def _outcome(merchant: MerchantClient, payment_id: str) -> dict[str, Any]:
    return wait_record_status(
        merchant, f"{PAYMENTS}/{payment_id}", {"payment_settled", "payment_failed"}
    )


def _query(merchant: MerchantClient, path: str, **params: Any) -> dict[str, Any]:
    answer = merchant.get(path, **params)
    assert answer.status_code == 200, answer.text
    record: dict[str, Any] = answer.json()
    return record


def _mandate(merchant: MerchantClient, mandate_id: str) -> dict[str, Any]:
    return get_record(merchant, f"{MANDATES}/{mandate_id}")


def _constraints(merchant: MerchantClient, mandate_id: str) -> dict[str, Any]:
    return get_record(merchant, f"{MANDATES}/{mandate_id}/constraints")


def _failed_with(merchant: MerchantClient, payment_id: str, reason: str) -> dict[str, Any]:
    payment = _outcome(merchant, payment_id)
    assert payment["status"] == "payment_failed", payment
    assert payment["failure_stage"] == "authorized"
    assert payment["failure_reason"] == reason
    return payment


def _mandate_webhook(
    receiver: WebhookReceiver, jwks: dict[str, Any], mandate_id: str, event_type: str
) -> dict[str, Any]:
    received = wait_webhook(receiver, "mandate_id", mandate_id, event_type)
    verify_webhook(jwks, received)
    event: dict[str, Any] = received.json()
    assert event["event_version"] == 1
    uuid.UUID(event["event_id"])
    return event


def test_a_commercial_mandate_from_consent_to_revocation(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = merchant_with_webhooks(operator, receiver)
    jwks = merchant.http.get("/.well-known/jwks").json()
    body = mandate_body(merchant, maximum_individual_amount=2_000, periodic_limits=DAY_LIMIT)
    created = create_mandate(merchant, body)
    assert set(created) == {"id", "user", "resource_token", "status"}
    assert created["status"] == "authorization_required"
    assert created["user"] == {"id": "mandate-user"}
    mandate_id = str(created["id"])

    flow = merchant.signed_post(
        f"{MANDATES}/{mandate_id}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}},
    )
    assert flow.status_code == 200, flow.text
    assert flow.json()["status"] == "authorizing"
    action = next_action(flow.json())
    assert action["type"] == "redirect"
    assert f"/mock-bank/login/{mandate_id}#token=" in action["uri"]
    token = action["uri"].split("#token=")[1]
    assert _mandate(merchant, mandate_id)["status"] == "authorizing"

    answer = consent_action(merchant.http, mandate_id, token, "Authorise")
    assert answer.status_code == 202, answer.text
    assert answer.text == f"{RETURN_URI}?mandate_id={mandate_id}"
    mandate = _mandate(merchant, mandate_id)
    assert mandate["status"] == "authorized"
    assert mandate["type"] == "commercial"
    assert mandate["currency"] == "GBP"
    assert mandate["reference"] == "subscription"
    assert mandate["beneficiary"]["merchant_account_id"] == merchant.accounts["GBP"]["id"]
    assert mandate["provider_selection"] == {"type": "preselected", "provider_id": GB_REDIRECT}
    assert mandate["constraints"] == body["constraints"]
    assert mandate["metadata"] == {"plan": "gold"}
    assert mandate["user"]["id"] == "mandate-user"
    assert mandate["remitter"]["account_holder_name"] == "Mary Payer"
    assert mandate["remitter"]["account_identifier"]["type"] == "sort_code_account_number"
    authorised = _mandate_webhook(receiver, jwks, mandate_id, "mandate_authorized")
    assert set(authorised) == {
        "type",
        "event_version",
        "event_id",
        "mandate_id",
        "authorized_at",
        "metadata",
    }
    assert authorised["authorized_at"] == mandate["authorized_at"]
    assert authorised["metadata"] == {"plan": "gold"}

    # Payments until the day's limit is reached: 2,000 + 1,000 = 3,000.
    first = _pay(merchant, mandate_id, 2_000)
    second = _pay(merchant, mandate_id, 1_000)
    for payment_id in (first, second):
        payment = _outcome(merchant, payment_id)
        assert payment["status"] == "payment_settled", payment
        assert payment["payment_method"] == {
            "type": "mandate",
            "mandate_id": mandate_id,
            "reference": "invoice",
        }
        assert payment["user"] == {"id": "mandate-user"}
        assert [h["status"] for h in payment["status_history"]] == [
            "authorized",
            "payment_executed",
            "payment_settled",
        ]
        assert payment["merchant_account_id"] == merchant.accounts["GBP"]["id"]
        for event_type in ("payment_executed", "payment_settled"):
            event = wait_payment_event(receiver, payment_id, event_type)
            assert event["payment_method"]["type"] == "mandate"
    assert balances(merchant) == (3_000, 3_000)
    # The constraints read as the real API reads them (fidelity MD4).
    constraints = _constraints(merchant, mandate_id)
    assert set(constraints) == {"maximum_individual_amount", "periodic_limits"}
    day = constraints["periodic_limits"]["day"]
    assert set(day) == {
        "start_date",
        "end_date",
        "current_amount",
        "maximum_available_amount",
        "period_alignment",
    }
    assert day["current_amount"] == 3_000
    assert day["maximum_available_amount"] == 0
    assert day["period_alignment"] == "consent"

    # The next one breaches the day's limit.
    refused = _pay(merchant, mandate_id, 1)
    _failed_with(merchant, refused, "constraint_violation")
    failed = wait_payment_event(receiver, refused, "payment_failed")
    assert failed["failure_stage"] == "authorized"
    assert failed["failure_reason"] == "constraint_violation"
    assert balances(merchant) == (3_000, 3_000)

    # The next day is a new period.
    advance_clock(operator, 86_400)
    merchant.forget_token()
    period = _constraints(merchant, mandate_id)["periodic_limits"]["day"]
    assert period["maximum_available_amount"] == 3_000
    now = service_now(operator)
    assert parse_time(period["start_date"]) <= now < parse_time(period["end_date"])
    again = _pay(merchant, mandate_id, 1_500)
    assert _outcome(merchant, again)["status"] == "payment_settled"
    assert balances(merchant) == (4_500, 4_500)

    revoked = merchant.signed_post(f"{MANDATES}/{mandate_id}/revoke", None, raw=b"")
    assert revoked.status_code == 204, revoked.text
    assert revoked.content == b""
    mandate = _mandate(merchant, mandate_id)
    assert mandate["status"] == "revoked"
    assert mandate["revocation_source"] == "client"
    event = _mandate_webhook(receiver, jwks, mandate_id, "mandate_revoked")
    assert event["revocation_source"] == "client"
    assert event["revoked_at"] == mandate["revoked_at"]

    before = get_record(merchant, PAYMENTS)["items"]
    answer = merchant.signed_post(PAYMENTS, mandate_payment(mandate_id, 100))
    assert_invalid(answer, "payment_method.mandate_id")
    assert get_record(merchant, PAYMENTS)["items"] == before

    # Every payment webhook verifies too.
    for payment_id in (first, second, refused, again):
        for received in receiver.snapshot():
            if received.json().get("payment_id") == payment_id:
                verify_webhook(jwks, received)


def test_concurrent_payments_never_exceed_a_period_limit(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    # Consent-aligned, so that no period boundary of the shared service clock falls within it.
    limits = {"year": {"maximum_amount": 10_000, "period_alignment": "consent"}}
    mandate_id, _ = authorised_mandate(
        merchant, mandate_body(merchant, maximum_individual_amount=1_000, periodic_limits=limits)
    )
    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(lambda _: _pay(merchant, mandate_id, 1_000), range(16)))
    outcomes = [_outcome(merchant, payment_id) for payment_id in ids]
    settled = [p for p in outcomes if p["status"] == "payment_settled"]
    failed = [p for p in outcomes if p["status"] == "payment_failed"]
    assert len(settled) == 10, [p["status"] for p in outcomes]
    assert {p["failure_reason"] for p in failed} == {"constraint_violation"}
    assert balances(merchant) == (10_000, 10_000)
    year = _constraints(merchant, mandate_id)["periodic_limits"]["year"]
    assert year["maximum_available_amount"] == 0
    check = operator.get("/admin/ledger/check")
    assert check.status_code == 200, check.text
    assert check.json() == {"ok": True, "violations": []}


def _limit(amount: Any) -> dict[str, Any]:
    return {"month": {"maximum_amount": amount, "period_alignment": "calendar"}}


BAD_MANDATES: dict[str, tuple[dict[str, Any], str]] = {
    "EUR mandate": ({"currency": "EUR"}, "currency"),
    "no periodic limit": ({"periodic_limits": {}}, "constraints.periodic_limits"),
    "a zero limit": ({"periodic_limits": _limit(0)}, "constraints.periodic_limits"),
    "a negative limit": ({"periodic_limits": _limit(-5)}, "constraints.periodic_limits"),
    "a zero individual maximum": (
        {"maximum_individual_amount": 0},
        "constraints.maximum_individual_amount",
    ),
    "an unknown period": (
        {"periodic_limits": {"hour": {"maximum_amount": 1, "period_alignment": "calendar"}}},
        "constraints.periodic_limits",
    ),
    "an unknown alignment": (
        {"periodic_limits": {"day": {"maximum_amount": 1, "period_alignment": "lunar"}}},
        "constraints.periodic_limits",
    ),
    "valid_to before valid_from": (
        {"valid_from": "2030-02-01T00:00:00Z", "valid_to": "2030-01-01T00:00:00Z"},
        "constraints",
    ),
    "a provider that takes no mandates": (
        {"provider_id": "mock-payments-de-redirect"},
        "mandate.provider_selection.provider_id",
    ),
    "an unknown provider": (
        {"provider_id": "mock-nope"},
        "mandate.provider_selection.provider_id",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_MANDATES))
def test_bad_mandates_are_400_and_change_nothing(operator: Operator, case: str) -> None:
    merchant = merchant_with_webhooks(operator)
    change, field = BAD_MANDATES[case]
    options = {k: v for k, v in change.items() if k in ("currency", "provider_id")}
    body = mandate_body(merchant, **options)
    constraints = {k: v for k, v in change.items() if k not in options}
    body["constraints"].update(constraints)
    answer = merchant.signed_post(MANDATES, body)
    assert_invalid(answer, field)
    assert get_record(merchant, MANDATES)["items"] == []


def test_a_mandate_into_a_eur_account_is_400(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    body = mandate_body(merchant)
    body["mandate"]["beneficiary"]["merchant_account_id"] = merchant.accounts["EUR"]["id"]
    assert_invalid(merchant.signed_post(MANDATES, body), "mandate.beneficiary.merchant_account_id")
    assert get_record(merchant, MANDATES)["items"] == []


def test_payments_on_mandates_that_are_not_authorised_are_400(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    other = merchant_with_webhooks(operator)
    waiting = str(create_mandate(merchant)["id"])
    rejected, token = redirected_mandate(merchant)
    assert consent_action(merchant.http, rejected, token, "Reject").status_code == 202
    theirs, _ = authorised_mandate(other)
    for mandate_id in (waiting, rejected, theirs, str(uuid.uuid4())):
        answer = merchant.signed_post(PAYMENTS, mandate_payment(mandate_id, 100))
        assert_invalid(answer, "payment_method.mandate_id")
    # The other merchant's mandate answers exactly as an unknown one.
    unknown = merchant.signed_post(PAYMENTS, mandate_payment(str(uuid.uuid4()), 100)).json()
    mine = merchant.signed_post(PAYMENTS, mandate_payment(theirs, 100)).json()
    assert mine["errors"] == unknown["errors"]
    assert get_record(merchant, PAYMENTS)["items"] == []
    # A body that mixes the two payment methods is refused before anything is looked up.
    body = mandate_payment(theirs, 100)
    body["payment_method"]["provider_selection"] = {"type": "user_selected"}
    assert_invalid(merchant.signed_post(PAYMENTS, body), "payment_method")
    body = mandate_payment(theirs, 100, merchant_account_id=merchant.accounts["GBP"]["id"])
    assert_invalid(merchant.signed_post(PAYMENTS, body))


def test_the_individual_maximum_and_the_validity_window(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    body = mandate_body(merchant, maximum_individual_amount=500)
    mandate_id, _ = authorised_mandate(merchant, body)
    _failed_with(merchant, _pay(merchant, mandate_id, 501), "constraint_violation")
    assert _outcome(merchant, _pay(merchant, mandate_id, 500))["status"] == "payment_settled"

    now = service_now(operator)
    later = mandate_body(merchant, valid_from=f"{now.year + 1}-01-01T00:00:00Z")
    future_id, _ = authorised_mandate(merchant, later)
    _failed_with(merchant, _pay(merchant, future_id, 100), "constraint_violation")
    constraints = _constraints(merchant, future_id)
    assert parse_time(constraints["valid_from"]) == parse_time(f"{now.year + 1}-01-01T00:00:00Z")
    assert constraints["maximum_individual_amount"] == 5_000
    # Failed payments do not count against the limits.
    month = constraints["periodic_limits"]["month"]
    assert month["current_amount"] == 0
    assert month["maximum_available_amount"] == 100_000
    assert month["period_alignment"] == "calendar"


def test_funds_and_the_remitters_balance(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    mandate_id, token = redirected_mandate(merchant)
    funds = f"{MANDATES}/{mandate_id}/funds"
    assert_problem(merchant.get(funds, amount_in_minor=1, currency="GBP"), 409)
    answer = consent_action(
        merchant.http, mandate_id, token, "Authorise", remitter_balance_in_minor=4_000
    )
    assert answer.status_code == 202, answer.text
    confirmed = _query(merchant, funds, amount_in_minor=4000, currency="GBP")
    assert confirmed["confirmed"] is True
    assert parse_time(confirmed["confirmed_at"]) <= service_now(operator)
    assert _query(merchant, funds, amount_in_minor=4001, currency="GBP")["confirmed"] is False
    assert_invalid(merchant.get(funds, amount_in_minor=1, currency="EUR"), "currency")
    assert_invalid(merchant.get(funds, amount_in_minor=0, currency="GBP"), "amount_in_minor")

    _failed_with(merchant, _pay(merchant, mandate_id, 4_001), "insufficient_funds")
    assert _outcome(merchant, _pay(merchant, mandate_id, 4_000))["status"] == "payment_settled"


def test_the_bank_rejects_and_the_payer_revokes(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = merchant_with_webhooks(operator, receiver)
    jwks = merchant.http.get("/.well-known/jwks").json()
    rejected, token = redirected_mandate(merchant)
    assert consent_action(merchant.http, rejected, token, "Reject").status_code == 202
    mandate = _mandate(merchant, rejected)
    assert (mandate["status"], mandate["failure_stage"], mandate["failure_reason"]) == (
        "failed",
        "authorizing",
        "authorization_failed",
    )
    event = _mandate_webhook(receiver, jwks, rejected, "mandate_failed")
    assert event["failure_stage"] == "authorizing"
    assert event["failure_reason"] == "authorization_failed"
    assert event["failed_at"] == mandate["failed_at"]
    # The bank decided: another decision is a conflict; the same one answers the same.
    assert_problem(consent_action(merchant.http, rejected, token, "Authorise"), 409)
    assert consent_action(merchant.http, rejected, token, "Reject").status_code == 202

    mandate_id, token = authorised_mandate(merchant)
    assert consent_action(merchant.http, mandate_id, token, "Revoke").status_code == 202
    mandate = _mandate(merchant, mandate_id)
    assert (mandate["status"], mandate["revocation_source"]) == ("revoked", "user")
    event = _mandate_webhook(receiver, jwks, mandate_id, "mandate_revoked")
    assert event["revocation_source"] == "user"
    assert_problem(merchant.signed_post(f"{MANDATES}/{mandate_id}/revoke", None, raw=b""), 409)

    other, _ = redirected_mandate(merchant)
    assert_problem(consent_action(merchant.http, other, token, "Authorise"), 401)
    assert_problem(consent_action(merchant.http, other, "not-a-token", "Authorise"), 401)


def test_the_payer_picks_a_bank_that_takes_mandates(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    mandate_id = str(create_mandate(merchant, mandate_body(merchant, provider_id=None))["id"])
    flow = merchant.signed_post(f"{MANDATES}/{mandate_id}/authorization-flow", {})
    assert flow.status_code == 200, flow.text
    action = next_action(flow.json())
    assert action["type"] == "provider_selection"
    assert [p["id"] for p in action["providers"]] == [GB_REDIRECT]
    assert action["providers"][0]["capabilities"]["mandates"]["vrp_commercial"]
    selection = f"{MANDATES}/{mandate_id}/authorization-flow/actions/provider-selection"
    assert_invalid(
        merchant.signed_post(selection, {"provider_id": "mock-payments-de-redirect"}),
        "provider_id",
    )
    answer = merchant.signed_post(selection, {"provider_id": GB_REDIRECT})
    assert answer.status_code == 200, answer.text
    assert next_action(answer.json())["type"] == "redirect"
    assert _mandate(merchant, mandate_id)["provider_selection"]["provider_id"] == GB_REDIRECT
    assert_problem(merchant.signed_post(selection, {"provider_id": GB_REDIRECT}), 409)


def test_an_unauthorised_mandate_expires_after_fifteen_minutes(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = merchant_with_webhooks(operator, receiver)
    waiting = str(create_mandate(merchant)["id"])
    at_bank, token = redirected_mandate(merchant)
    advance_clock(operator, 15 * 60 + 1)
    merchant.forget_token()
    for mandate_id, stage in ((waiting, "authorization_required"), (at_bank, "authorizing")):
        mandate = wait_record_status(merchant, f"{MANDATES}/{mandate_id}", {"failed"})
        assert (mandate["failure_stage"], mandate["failure_reason"]) == (stage, "expired")
        event = wait_webhook(receiver, "mandate_id", mandate_id, "mandate_failed").json()
        assert event["failure_reason"] == "expired"
    assert_problem(consent_action(merchant.http, at_bank, token, "Authorise"), 409)


def test_mandate_listing_by_user(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    first = str(create_mandate(merchant)["id"])
    body = mandate_body(merchant)
    body["user"] = {"id": "someone-else"}
    second = str(create_mandate(merchant, body)["id"])
    listed = get_record(merchant, MANDATES)
    assert [m["id"] for m in listed["items"]] == [second, first]
    assert listed["pagination"] == {"next_cursor": None}
    mine = _query(merchant, MANDATES, user_id="someone-else")["items"]
    assert [m["id"] for m in mine] == [second]
    page = _query(merchant, MANDATES, limit=1)
    assert [m["id"] for m in page["items"]] == [second]
    cursor = page["pagination"]["next_cursor"]
    rest = _query(merchant, MANDATES, limit=1, cursor=cursor)
    assert [m["id"] for m in rest["items"]] == [first]


def test_mandate_scopes(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    commercial = client_token(operator, merchant, ["recurring_payments:commercial"])
    sweeping = client_token(operator, merchant, ["recurring_payments:sweeping"])
    payouts = client_token(operator, merchant, ["payouts"])

    body = mandate_body(merchant)
    answer = merchant.signed_post(MANDATES, body, token=commercial)
    assert answer.status_code == 201, answer.text
    mandate_id = answer.json()["id"]
    denied = assert_problem(merchant.signed_post(MANDATES, body, token=sweeping), 403)
    assert "InvalidAudience" in denied["detail"]
    assert_problem(merchant.signed_post(MANDATES, body, token=payouts), 403)
    sweep_body = mandate_body(merchant, mandate_type="sweeping")
    assert merchant.signed_post(MANDATES, sweep_body, token=sweeping).status_code == 201

    path = f"{MANDATES}/{mandate_id}"
    assert merchant.http.get(path, headers=bearer(commercial)).status_code == 200
    assert merchant.http.get(path, headers=bearer(merchant.token())).status_code == 200
    assert_problem(merchant.http.get(path, headers=bearer(sweeping)), 403)
    assert_problem(merchant.http.get(path, headers=bearer(payouts)), 403)
    assert_problem(merchant.http.get(path), 401)
    # Each token lists the types it covers.
    listed = merchant.http.get(MANDATES, headers=bearer(sweeping)).json()["items"]
    assert {m["type"] for m in listed} == {"sweeping"}
    listed = merchant.http.get(MANDATES, headers=bearer(merchant.token())).json()["items"]
    assert {m["type"] for m in listed} == {"sweeping", "commercial"}
    flow = f"{path}/authorization-flow"
    assert_problem(merchant.signed_post(flow, {}, token=sweeping), 403)
    assert _mandate(merchant, mandate_id)["status"] == "authorization_required"
    assert merchant.signed_post(flow, {}, token=commercial).status_code == 200


def test_another_merchants_mandate_is_404(operator: Operator) -> None:
    owner = merchant_with_webhooks(operator)
    intruder = merchant_with_webhooks(operator)
    mandate_id, _ = authorised_mandate(owner)
    base = f"{MANDATES}/{mandate_id}"
    for path in (base, f"{base}/constraints"):
        assert_problem(intruder.get(path), 404)
    assert_problem(intruder.get(f"{base}/funds", amount_in_minor=1, currency="GBP"), 404)
    for path in (f"{base}/revoke", f"{base}/authorization-flow"):
        assert_problem(intruder.signed_post(path, {}), 404)
    assert get_record(intruder, MANDATES)["items"] == []
    assert _mandate(owner, mandate_id)["status"] == "authorized"


def test_a_mandate_request_is_idempotent(operator: Operator) -> None:
    merchant = merchant_with_webhooks(operator)
    body = mandate_body(merchant)
    first = merchant.signed_post(MANDATES, body, idempotency_key="mandate-key-1")
    again = merchant.signed_post(MANDATES, body, idempotency_key="mandate-key-1")
    assert first.status_code == 201, first.text
    assert again.content == first.content
    assert len(get_record(merchant, MANDATES)["items"]) == 1
    unsigned = merchant.http.post(
        MANDATES, json=body, headers={**bearer(merchant.token()), "Idempotency-Key": "k"}
    )
    assert_problem(unsigned, 401)
