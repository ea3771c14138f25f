"""Payments API v3 payouts over HTTP against `bankrail serve` (spec 2.4, 4.2, 6.4, 7; docs/api.md,
§5, §7 "Payments API v3 — payouts"). Requests are signed with the public `truelayer-signing`
library; webhooks are collected by a loopback receiver."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from e2e_helpers import (
    account_by_currency,
    assert_invalid,
    assert_problem,
    bearer,
    identifier,
    is_uuid,
    parse_time,
)
from payout_helpers import (
    BAD_CHECKSUM_IBAN,
    DE_IBAN,
    GB_IBAN,
    PATH,
    SORT_CODE,
    create_payout,
    external_beneficiary,
    funded_merchant,
    get_payout,
    payout_body,
    wait_payout_status,
)

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver

TERMINAL = {"executed", "failed"}
ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$")


def _events(receiver: WebhookReceiver, payout_id: str) -> list[dict[str, Any]]:
    return [
        e
        for r in receiver.snapshot()
        if r.path == "/payments" and (e := r.json()).get("payout_id") == payout_id
    ]


def _wait_event(receiver: WebhookReceiver, payout_id: str, event_type: str) -> dict[str, Any]:
    receiver.wait_for(
        lambda _seen: any(e["type"] == event_type for e in _events(receiver, payout_id))
    )
    found = [e for e in _events(receiver, payout_id) if e["type"] == event_type]
    assert len({e["event_id"] for e in found}) == 1, found
    return found[0]


def _balances(merchant: MerchantClient, currency: str) -> tuple[int, int]:
    """(current, available)."""
    account = account_by_currency(merchant, currency)
    return account["current_balance_in_minor"], account["available_balance_in_minor"]


def _signed_headers(
    merchant: MerchantClient, content: bytes, signed: dict[str, str]
) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {merchant.token()}",
        "Content-Type": "application/json",
        "Svc-Signature": merchant.sign("POST", PATH, content, signed),
    }


# --- open loop, happy paths -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("currency", "account_identifier", "scheme"),
    [
        ("GBP", SORT_CODE, "faster_payments_service"),
        ("GBP", GB_IBAN, "faster_payments_service"),
        ("EUR", DE_IBAN, "sepa_credit_transfer_instant"),
    ],
    ids=["gbp-sort-code", "gbp-gb-iban", "eur-de-iban"],
)
def test_open_loop_payout_executes_and_is_reported(
    operator: Operator,
    receiver: WebhookReceiver,
    currency: str,
    account_identifier: dict[str, Any],
    scheme: str,
) -> None:
    merchant = funded_merchant(operator, receiver, **{currency.lower(): 10_000})
    metadata = {"order": "A-17", "customer": "c 42"}
    beneficiary = external_beneficiary(
        account_identifier,
        date_of_birth="1990-01-31",
        address={
            "address_line1": "1 High Street",
            "city": "London",
            "state": "Greater London",
            "zip": "EC1A 1BB",
            "country_code": "GB",
        },
    )
    payout_id = create_payout(
        merchant, payout_body(merchant, currency, 2_500, beneficiary, metadata=metadata)
    )

    record = wait_payout_status(merchant, payout_id, TERMINAL)
    assert record["status"] == "executed", record
    assert record["id"] == payout_id
    assert record["merchant_account_id"] == merchant.accounts[currency]["id"]
    assert record["amount_in_minor"] == 2_500
    assert record["currency"] == currency
    assert record["scheme_id"] == scheme
    assert record["metadata"] == metadata
    assert "failure_reason" not in record
    assert "failed_at" not in record
    shown = record["beneficiary"]
    assert shown["type"] == "external_account"
    assert shown["reference"] == "payout 1"
    assert shown["account_holder_name"] == "Jane Doe"
    assert shown["account_identifier"] == account_identifier
    assert shown["account_identifiers"] == [account_identifier]
    assert shown["date_of_birth"] == "1990-01-31"
    assert shown["address"]["city"] == "London"
    for field in ("created_at", "authorized_at", "executed_at"):
        assert ISO_Z.match(record[field]), record[field]
    created = parse_time(record["created_at"])
    authorized = parse_time(record["authorized_at"])
    executed = parse_time(record["executed_at"])
    assert created < authorized < executed  # strictly, even when taken in one transaction

    event = _wait_event(receiver, payout_id, "payout_executed")
    assert set(event) == {
        "type",
        "event_version",
        "event_id",
        "payout_id",
        "merchant_account_id",
        "executed_at",
        "scheme_id",
        "beneficiary",
        "metadata",
    }
    assert event["event_version"] == 1
    assert is_uuid(event["event_id"])
    assert event["merchant_account_id"] == record["merchant_account_id"]
    assert event["executed_at"] == record["executed_at"]
    assert event["scheme_id"] == scheme
    assert event["beneficiary"] == record["beneficiary"]
    assert event["metadata"] == metadata
    delivered = next(
        r for r in receiver.snapshot() if r.path == "/payments" and b"payout_executed" in r.body
    )
    headers = {k.lower() for k in delivered.headers}
    assert {"svc-signature", "x-svc-webhook-timestamp"} <= headers

    assert _balances(merchant, currency) == (7_500, 7_500)
    assert not [e for e in _events(receiver, payout_id) if e["type"] == "payout_failed"]


def test_payout_without_metadata_reports_empty_metadata(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, gbp=1_000)
    payout_id = create_payout(
        merchant, payout_body(merchant, "GBP", 100, external_beneficiary(SORT_CODE))
    )
    assert wait_payout_status(merchant, payout_id, TERMINAL)["status"] == "executed"
    assert _wait_event(receiver, payout_id, "payout_executed")["metadata"] == {}


def test_iban_is_stored_in_its_normalised_form(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=1_000)
    spaced = {"type": "iban", "iban": "gb29 nwbk 6016 1331 9268 19"}
    payout_id = create_payout(
        merchant, payout_body(merchant, "GBP", 100, external_beneficiary(spaced))
    )
    record = wait_payout_status(merchant, payout_id, TERMINAL)
    assert record["status"] == "executed"
    assert record["beneficiary"]["account_identifier"] == GB_IBAN
    assert record["beneficiary"]["account_identifiers"] == [GB_IBAN]


# --- balances and the sandbox clock -----------------------------------------------------------


def _wait_submitted(merchant: MerchantClient, currency: str, payout_id: str) -> dict[str, Any]:
    """Wait until the worker has handed the payout to the scheme: authorised and submitted
    in one step, which v3 shows as `authorized` (the account's transaction list shows the
    payout `pending` until it is executed)."""
    del currency  # the payout's record tells
    return wait_payout_status(merchant, payout_id, {"authorized"})


def test_delayed_payout_holds_funds_until_the_clock_moves(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, gbp=10_000)
    body = payout_body(
        merchant, "GBP", 3_000, external_beneficiary(SORT_CODE, reference="slow delay:600")
    )
    payout_id = create_payout(merchant, body)
    # The hold is taken in the request's transaction: available falls before any job runs.
    assert _balances(merchant, "GBP") == (10_000, 7_000)

    _wait_submitted(merchant, "GBP", payout_id)
    record = get_payout(merchant, payout_id)
    assert record["status"] == "authorized"
    assert "executed_at" not in record
    assert _balances(merchant, "GBP") == (10_000, 7_000)
    assert not _events(receiver, payout_id)

    advanced = operator.post("/sandbox/clock/advance", {"seconds": 600})
    assert advanced.status_code == 200, advanced.text
    record = wait_payout_status(merchant, payout_id, TERMINAL)
    assert record["status"] == "executed", record
    assert _balances(merchant, "GBP") == (7_000, 7_000)
    _wait_event(receiver, payout_id, "payout_executed")


def test_delayed_payout_executes_no_earlier_than_its_delay(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=5_000)
    payout_id = create_payout(
        merchant,
        payout_body(merchant, "GBP", 1_000, external_beneficiary(SORT_CODE, reference="DELAY:600")),
    )
    submitted = _wait_submitted(merchant, "GBP", payout_id)
    assert operator.post("/sandbox/clock/advance", {"seconds": 1}).status_code == 200
    assert get_payout(merchant, payout_id)["status"] == "authorized"
    assert operator.post("/sandbox/clock/advance", {"seconds": 600}).status_code == 200
    record = wait_payout_status(merchant, payout_id, TERMINAL)
    assert record["status"] == "executed"
    # Authorised and submitted in one step (a microsecond apart): the delay counts from there.
    elapsed = parse_time(record["executed_at"]) - parse_time(submitted["authorized_at"])
    assert elapsed.total_seconds() >= 600


# --- asynchronous failures --------------------------------------------------------------------


def _assert_failed(
    merchant: MerchantClient, receiver: WebhookReceiver, payout_id: str, reason: str
) -> dict[str, Any]:
    record = wait_payout_status(merchant, payout_id, TERMINAL)
    assert record["status"] == "failed", record
    assert record["failure_reason"] == reason
    assert ISO_Z.match(record["failed_at"])
    assert "executed_at" not in record
    event = _wait_event(receiver, payout_id, "payout_failed")
    assert set(event) == {
        "type",
        "event_version",
        "event_id",
        "payout_id",
        "merchant_account_id",
        "failed_at",
        "failure_reason",
        "scheme_id",
        "beneficiary",
        "metadata",
    }
    assert event["event_version"] == 1
    assert is_uuid(event["event_id"])
    assert event["failure_reason"] == reason
    assert event["failed_at"] == record["failed_at"]
    assert event["merchant_account_id"] == record["merchant_account_id"]
    assert not [e for e in _events(receiver, payout_id) if e["type"] == "payout_executed"]
    return record


def test_insufficient_funds_is_accepted_then_fails(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, gbp=500)
    payout_id = create_payout(
        merchant, payout_body(merchant, "GBP", 501, external_beneficiary(SORT_CODE))
    )
    record = _assert_failed(merchant, receiver, payout_id, "insufficient_funds")
    assert "authorized_at" not in record
    assert _balances(merchant, "GBP") == (500, 500)


def test_insufficient_funds_on_an_empty_account(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver)
    payout_id = create_payout(
        merchant, payout_body(merchant, "EUR", 1, external_beneficiary(DE_IBAN))
    )
    _assert_failed(merchant, receiver, payout_id, "insufficient_funds")
    assert _balances(merchant, "EUR") == (0, 0)


@pytest.fixture
def screening(operator: Operator) -> Iterator[None]:
    """Restore the (global) screening list after the test."""
    before = operator.get("/admin/screening-list")
    assert before.status_code == 200, before.text
    yield
    operator.post("/admin/screening-list", {"names": before.json()["names"]})


@pytest.mark.usefixtures("screening")
def test_screened_beneficiary_is_blocked(operator: Operator, receiver: WebhookReceiver) -> None:
    listed = operator.post("/admin/screening-list", {"names": ["Jöhn  SMITH"]})
    assert listed.status_code == 200, listed.text
    merchant = funded_merchant(operator, receiver, gbp=2_000)
    payout_id = create_payout(
        merchant,
        payout_body(merchant, "GBP", 1_000, external_beneficiary(SORT_CODE, name="john smith")),
    )
    _assert_failed(merchant, receiver, payout_id, "blocked")
    assert _balances(merchant, "GBP") == (2_000, 2_000)
    # Someone else is paid normally.
    other = create_payout(
        merchant,
        payout_body(merchant, "GBP", 1_000, external_beneficiary(SORT_CODE, name="Jo Smith")),
    )
    assert wait_payout_status(merchant, other, TERMINAL)["status"] == "executed"


# Each of them looks like the listed "Evil Corp" and has to be screened as it is.
LOOK_ALIKES_OF_EVIL_CORP = [
    "Evil\u200b Corp",  # zero-width space
    "Ev\u200dil Corp",  # zero-width joiner
    "\u0415vil Corp",  # Cyrillic capital Ie
    "Ev\u00adil Corp",  # soft hyphen
    "Evil Corp.",  # punctuation
]


@pytest.mark.usefixtures("screening")
def test_a_look_alike_of_a_screened_name_is_blocked(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    listed = operator.post("/admin/screening-list", {"names": ["Evil Corp"]})
    assert listed.status_code == 200, listed.text
    merchant = funded_merchant(operator, receiver, gbp=10_000)
    payout_ids = [
        create_payout(
            merchant,
            payout_body(merchant, "GBP", 1_000, external_beneficiary(SORT_CODE, name=name)),
        )
        for name in LOOK_ALIKES_OF_EVIL_CORP
    ]
    for payout_id in payout_ids:
        _assert_failed(merchant, receiver, payout_id, "blocked")
    assert _balances(merchant, "GBP") == (10_000, 10_000)


def test_scheme_error_fails_and_releases_the_hold(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, gbp=4_000)
    payout_id = create_payout(
        merchant,
        payout_body(
            merchant, "GBP", 1_500, external_beneficiary(GB_IBAN, reference="x fail:scheme_error")
        ),
    )
    record = _assert_failed(merchant, receiver, payout_id, "scheme_error")
    assert "authorized_at" in record  # it got as far as the scheme
    assert _balances(merchant, "GBP") == (4_000, 4_000)


# --- internal transfers -----------------------------------------------------------------------


def test_payout_to_another_bankrail_account_is_an_internal_transfer(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    payer = funded_merchant(operator, receiver, gbp=9_000)
    payee = funded_merchant(operator, gbp=100)
    payee_account = payee.accounts["GBP"]
    scan = identifier(payee_account, "sort_code_account_number")
    payout_id = create_payout(
        payer,
        payout_body(
            payer,
            "GBP",
            4_000,
            external_beneficiary(scan, name=payee_account["account_holder_name"]),
        ),
    )
    record = wait_payout_status(payer, payout_id, TERMINAL)
    assert record["status"] == "executed", record
    assert record["scheme_id"] == "internal_transfer"
    assert _wait_event(receiver, payout_id, "payout_executed")["scheme_id"] == "internal_transfer"
    assert _balances(payer, "GBP") == (5_000, 5_000)
    assert _balances(payee, "GBP") == (4_100, 4_100)


@pytest.mark.parametrize("currency", ["GBP", "EUR"])
def test_payout_to_another_bankrail_iban_is_internal(operator: Operator, currency: str) -> None:
    payer = funded_merchant(operator, **{currency.lower(): 3_000})
    payee = funded_merchant(operator)
    iban = identifier(payee.accounts[currency], "iban")
    payout_id = create_payout(
        payer, payout_body(payer, currency, 1_000, external_beneficiary(iban))
    )
    record = wait_payout_status(payer, payout_id, TERMINAL)
    assert record["status"] == "executed"
    assert record["scheme_id"] == "internal_transfer"
    assert _balances(payee, currency) == (1_000, 1_000)
    assert _balances(payer, currency) == (2_000, 2_000)


# --- closed loop ------------------------------------------------------------------------------


def test_closed_loop_with_an_unknown_payment_source_is_400(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=1_000)
    beneficiary = {
        "type": "payment_source",
        "user_id": str(uuid.uuid4()),
        "payment_source_id": str(uuid.uuid4()),
        "reference": "refund",
    }
    answer = merchant.signed_post(PATH, payout_body(merchant, "GBP", 100, beneficiary))
    body = assert_invalid(answer, "beneficiary.payment_source_id")
    assert "beneficiary.payment_source_id" in body["errors"]
    assert _balances(merchant, "GBP") == (1_000, 1_000)


# --- idempotency ------------------------------------------------------------------------------


def test_same_key_same_body_replays_identical_bytes_and_pays_once(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=5_000)
    body = payout_body(merchant, "GBP", 1_000, external_beneficiary(SORT_CODE))
    key = str(uuid.uuid4())
    first = merchant.signed_post(PATH, body, idempotency_key=key)
    assert first.status_code == 202, first.text
    second = merchant.signed_post(PATH, body, idempotency_key=key)
    assert second.status_code == 202
    assert second.content == first.content
    assert second.headers["content-type"] == first.headers["content-type"]
    payout_id = first.json()["id"]
    assert wait_payout_status(merchant, payout_id, TERMINAL)["status"] == "executed"
    third = merchant.signed_post(PATH, body, idempotency_key=key)  # after it finished
    assert third.status_code == 202
    assert third.content == first.content
    assert _balances(merchant, "GBP") == (4_000, 4_000)  # paid once
    # A new key is a new payout.
    other = create_payout(merchant, body)
    assert other != payout_id


def test_same_key_different_body_is_422(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=5_000)
    key = str(uuid.uuid4())
    body = payout_body(merchant, "GBP", 1_000, external_beneficiary(SORT_CODE))
    assert merchant.signed_post(PATH, body, idempotency_key=key).status_code == 202
    changed = {**body, "amount_in_minor": 1_001}
    answer = merchant.signed_post(PATH, changed, idempotency_key=key)
    assert_problem(answer, 422, "Idempotency-Key Reuse")
    _current, available = _balances(merchant, "GBP")
    assert available == 4_000


def test_missing_idempotency_key_is_401(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=1_000)
    answer = merchant.signed_post(
        PATH,
        payout_body(merchant, "GBP", 100, external_beneficiary(SORT_CODE)),
        idempotency_key=None,
    )
    body = assert_problem(answer, 401, "Unauthenticated")
    assert "Invalid request signature" in body["detail"]
    assert _balances(merchant, "GBP") == (1_000, 1_000)


def test_idempotency_key_not_in_signed_headers_is_401(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=1_000)
    content = json.dumps(
        payout_body(merchant, "GBP", 100, external_beneficiary(SORT_CODE))
    ).encode()
    headers = _signed_headers(merchant, content, {})  # tl_headers is empty
    headers["Idempotency-Key"] = str(uuid.uuid4())
    answer = merchant.http.post(PATH, content=content, headers=headers)
    body = assert_problem(answer, 401, "Unauthenticated")
    assert "Invalid request signature" in body["detail"]
    assert _balances(merchant, "GBP") == (1_000, 1_000)


# --- authentication and authorisation ---------------------------------------------------------


def test_unsigned_request_is_401(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=1_000)
    answer = merchant.http.post(
        PATH,
        json=payout_body(merchant, "GBP", 100, external_beneficiary(SORT_CODE)),
        headers={**bearer(merchant.token()), "Idempotency-Key": str(uuid.uuid4())},
    )
    body = assert_problem(answer, 401, "Unauthenticated")
    assert "Invalid request signature" in body["detail"]


def test_body_tampered_after_signing_is_401(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    body = payout_body(merchant, "GBP", 100, external_beneficiary(SORT_CODE))
    content = json.dumps(body).encode()
    key = str(uuid.uuid4())
    headers = {
        **_signed_headers(merchant, content, {"Idempotency-Key": key}),
        "Idempotency-Key": key,
    }
    tampered = json.dumps({**body, "amount_in_minor": 9_999}).encode()
    answer = merchant.http.post(PATH, content=tampered, headers=headers)
    problem = assert_problem(answer, 401, "Unauthenticated")
    assert "Invalid request signature" in problem["detail"]
    assert _balances(merchant, "GBP") == (10_000, 10_000)
    # The untouched request verifies.
    assert merchant.http.post(PATH, content=content, headers=headers).status_code == 202


def test_missing_token_is_401(operator: Operator) -> None:
    merchant = funded_merchant(operator)
    answer = httpx.post(
        f"{merchant.base_url}{PATH}",
        json=payout_body(merchant, "GBP", 100, external_beneficiary(SORT_CODE)),
        timeout=30,
    )
    assert_problem(answer, 401, "Unauthenticated")


def test_token_without_payments_scope_is_403_invalid_audience(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=1_000, scopes=[])
    answer = merchant.signed_post(
        PATH, payout_body(merchant, "GBP", 100, external_beneficiary(SORT_CODE))
    )
    body = assert_problem(answer, 403, "Forbidden")
    assert "InvalidAudience" in body["detail"]
    assert_problem(merchant.get(f"{PATH}/{uuid.uuid4()}"), 403, "Forbidden")
    # A second client of the same merchant, with the payments scope, sees nothing happened.
    client = operator.post(f"/admin/merchants/{merchant.merchant_id}/clients", {}).json()
    token = merchant.http.post(
        "/connect/token",
        data={
            "grant_type": "client_credentials",
            "client_id": client["client_id"],
            "client_secret": client["client_secret"],
        },
    ).json()["access_token"]
    account = merchant.http.get(
        f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}", headers=bearer(token)
    ).json()
    assert account["available_balance_in_minor"] == 1_000


def test_another_merchants_account_is_404(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=1_000)
    other = funded_merchant(operator, gbp=1_000)
    body = payout_body(merchant, "GBP", 100, external_beneficiary(SORT_CODE))
    body["merchant_account_id"] = other.accounts["GBP"]["id"]
    assert_problem(merchant.signed_post(PATH, body), 404, "Not Found")
    assert _balances(other, "GBP") == (1_000, 1_000)


def test_unknown_account_is_404(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=1_000)
    body = payout_body(merchant, "GBP", 100, external_beneficiary(SORT_CODE))
    body["merchant_account_id"] = str(uuid.uuid4())
    assert_problem(merchant.signed_post(PATH, body), 404, "Not Found")


def test_another_merchants_payout_is_404(operator: Operator) -> None:
    owner = funded_merchant(operator, gbp=1_000)
    stranger = funded_merchant(operator)
    payout_id = create_payout(
        owner, payout_body(owner, "GBP", 100, external_beneficiary(SORT_CODE))
    )
    assert get_payout(owner, payout_id)["id"] == payout_id
    assert_problem(stranger.get(f"{PATH}/{payout_id}"), 404, "Not Found")
    assert_problem(stranger.get(f"{PATH}/{uuid.uuid4()}"), 404, "Not Found")


# --- validation -------------------------------------------------------------------------------


def _without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}


ADDRESS = {
    "address_line1": "1 High Street",
    "state": "Greater London",
    "zip": "EC1A 1BB",
    "country_code": "GB",
}

BAD_INPUTS: list[tuple[str, str, dict[str, Any], str]] = [
    # (id, account currency, changes to a valid GBP/sort-code body, field named in `errors`)
    (
        "iban-checksum",
        "GBP",
        {"beneficiary": external_beneficiary(BAD_CHECKSUM_IBAN)},
        "beneficiary.account_identifier.iban",
    ),
    ("amount-zero", "GBP", {"amount_in_minor": 0}, "amount_in_minor"),
    ("amount-negative", "GBP", {"amount_in_minor": -1}, "amount_in_minor"),
    ("amount-too-big", "GBP", {"amount_in_minor": 2**63}, "amount_in_minor"),
    ("amount-string", "GBP", {"amount_in_minor": "100"}, "amount_in_minor"),
    ("amount-float", "GBP", {"amount_in_minor": 100.0}, "amount_in_minor"),
    (
        "no-reference",
        "GBP",
        {"beneficiary": _without(external_beneficiary(SORT_CODE), "reference")},
        "beneficiary.reference",
    ),
    (
        "no-holder-name",
        "GBP",
        {"beneficiary": _without(external_beneficiary(SORT_CODE), "account_holder_name")},
        "beneficiary.account_holder_name",
    ),
    (
        "gbp-to-de-iban",
        "GBP",
        {"beneficiary": external_beneficiary(DE_IBAN)},
        "beneficiary.account_identifier",
    ),
    (
        "eur-to-sort-code",
        "EUR",
        {"currency": "EUR", "beneficiary": external_beneficiary(SORT_CODE)},
        "beneficiary.account_identifier",
    ),
    (
        "eur-to-gb-iban",
        "EUR",
        {"currency": "EUR", "beneficiary": external_beneficiary(GB_IBAN)},
        "beneficiary.account_identifier",
    ),
    (
        "currency-not-the-accounts",
        "GBP",
        {"currency": "EUR", "beneficiary": external_beneficiary(DE_IBAN)},
        "currency",
    ),
    (
        "date-of-birth-2020-02-30",
        "GBP",
        {"beneficiary": external_beneficiary(SORT_CODE, date_of_birth="2020-02-30")},
        "beneficiary.date_of_birth",
    ),
    (
        "address-without-city",
        "GBP",
        {"beneficiary": external_beneficiary(SORT_CODE, address=ADDRESS)},
        "beneficiary.address.city",
    ),
    (
        "unknown-beneficiary-type",
        "GBP",
        {"beneficiary": {**external_beneficiary(SORT_CODE), "type": "crypto_wallet"}},
        "beneficiary",
    ),
    (
        "unknown-identifier-type",
        "GBP",
        {"beneficiary": external_beneficiary({"type": "bic", "bic": "NWBKGB2L"})},
        "beneficiary.account_identifier",
    ),
    (
        "sort-code-too-short",
        "GBP",
        {"beneficiary": external_beneficiary({**SORT_CODE, "sort_code": "04000"})},
        "beneficiary.account_identifier.sort_code",
    ),
    ("no-merchant-account", "GBP", {"merchant_account_id": None}, "merchant_account_id"),
    ("metadata-not-string", "GBP", {"metadata": {"n": 1}}, "metadata.n"),
]


def _bad_request(
    operator: Operator, account_currency: str, changes: dict[str, Any]
) -> tuple[MerchantClient, httpx.Response]:
    merchant = funded_merchant(operator, **{account_currency.lower(): 1_000})
    body = {
        **payout_body(merchant, account_currency, 100, external_beneficiary(SORT_CODE)),
        **changes,
    }
    body = {k: v for k, v in body.items() if v is not None}
    return merchant, merchant.signed_post(PATH, body)


@pytest.mark.parametrize(
    ("account_currency", "changes", "field"),
    [case[1:] for case in BAD_INPUTS],
    ids=[case[0] for case in BAD_INPUTS],
)
def test_bad_input_is_400_and_pays_nothing(
    operator: Operator, account_currency: str, changes: dict[str, Any], field: str
) -> None:
    merchant, answer = _bad_request(operator, account_currency, changes)
    problem = assert_invalid(answer, field.split(".")[0])
    assert problem["detail"]
    assert all(isinstance(m, list) and m for m in problem["errors"].values()), problem
    assert _balances(merchant, account_currency) == (1_000, 1_000)


@pytest.mark.parametrize(
    ("account_currency", "changes", "field"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_INPUTS],
)
def test_bad_input_errors_name_the_json_path(
    operator: Operator, account_currency: str, changes: dict[str, Any], field: str
) -> None:
    _, answer = _bad_request(operator, account_currency, changes)
    assert_invalid(answer, field)


def test_payout_to_its_own_sort_code_is_an_internal_transfer_to_itself(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=1_000)
    own = identifier(merchant.accounts["GBP"], "sort_code_account_number")
    payout_id = create_payout(
        merchant, payout_body(merchant, "GBP", 100, external_beneficiary(own))
    )
    record = wait_payout_status(merchant, payout_id, TERMINAL)
    assert (record["status"], record["scheme_id"]) == ("executed", "internal_transfer")
    assert _balances(merchant, "GBP") == (1_000, 1_000)


def test_malformed_json_is_400(operator: Operator) -> None:
    merchant = funded_merchant(operator)
    answer = merchant.signed_post(PATH, None, raw=b'{"amount_in_minor": ')
    assert_problem(answer, 400, "Invalid Parameters")


# --- books ------------------------------------------------------------------------------------


def test_zz_ledger_is_clean_after_the_payouts(operator: Operator) -> None:
    answer = operator.get("/admin/ledger/check")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"ok": True, "violations": []}
