"""Verified payouts (beneficiary `user_determined`, fidelity PO2 and H1) over HTTP against
`bankrail serve`: the SDKs' bodies accepted and read back, and the payee's steps at the payout
page as plain forms, ending executed on the rails or failed with the verification's reason,
with the hold, the balances and the webhooks of any payout."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_helpers import assert_invalid, parse_time
from pay_in_helpers import advance_clock, authorised_pay_in, balances, settled_payment
from payout_helpers import PATH, get_payout, wait_payout_status
from verified_payout_helpers import (
    PAGE,
    RETURN_URI,
    SDK_BODIES,
    accounts_offered,
    at_bank,
    create_verified,
    decide_at_bank,
    sdk_body,
    verified_merchant,
)

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver
from support.server import RunningServer

TERMINAL = {"executed", "failed"}
DAY = 86_400
WINDOW = 7 * DAY  # the payout page's window (docs/api.md, "Verified payouts")
API_DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


@pytest.fixture
def http(server: RunningServer) -> Iterator[httpx.Client]:
    """The payee's browser, without JavaScript and without following redirects."""
    client = httpx.Client(base_url=server.base_url, timeout=30, follow_redirects=False)
    yield client
    client.close()


def _payout_events(receiver: WebhookReceiver, payout_id: str) -> list[dict[str, Any]]:
    return [
        e
        for r in receiver.snapshot()
        if r.path == "/payments" and (e := r.json()).get("payout_id") == payout_id
    ]


def _wait_event(receiver: WebhookReceiver, payout_id: str, event_type: str) -> dict[str, Any]:
    receiver.wait_for(
        lambda _seen: any(e["type"] == event_type for e in _payout_events(receiver, payout_id))
    )
    (found,) = [e for e in _payout_events(receiver, payout_id) if e["type"] == event_type]
    return found


# --- creation and read-back ---------------------------------------------------------------------


@pytest.mark.parametrize("name", SDK_BODIES)
def test_every_sdk_body_is_accepted_and_read_back(operator: Operator, name: str) -> None:
    merchant = verified_merchant(operator, "Verified Echo Ltd")
    body = sdk_body(name, merchant)
    created = create_verified(merchant, body)
    sent_user_id = body["beneficiary"]["user"].get("id")
    if sent_user_id is None:
        assert created["user"]["id"]  # the service gives the payee an id
    payout = get_payout(merchant, created["id"])
    assert payout["status"] == "authorization_required"
    assert payout["merchant_account_id"] == merchant.accounts["GBP"]["id"]
    assert payout["amount_in_minor"] == body["amount_in_minor"]
    assert payout["scheme_id"] == "faster_payments_service"
    beneficiary = payout["beneficiary"]
    expected = {**body["beneficiary"]}
    # Read back as sent: null members absent, plus the payee's id the answer named.
    expected["user"] = {k: v for k, v in expected["user"].items() if v is not None}
    expected["user"]["id"] = created["user"]["id"]
    assert beneficiary == expected
    criteria = body["beneficiary"]["verification"].get("transaction_search_criteria")
    if criteria is not None:
        read = beneficiary["verification"]["transaction_search_criteria"]
        assert read["created_at"] == criteria["created_at"]
    # Funds are held at acceptance, as for any payout.
    assert balances(merchant) == (10_000, 10_000 - body["amount_in_minor"])


def test_the_same_key_answers_the_same_token(operator: Operator) -> None:
    merchant = verified_merchant(operator, "Verified Replay Ltd")
    body = sdk_body("dotnet-payout-user-determined-name-verification", merchant)
    first = merchant.signed_post(PATH, body, idempotency_key="verified-replay-1")
    again = merchant.signed_post(PATH, body, idempotency_key="verified-replay-1")
    assert first.status_code == again.status_code == 202, again.text
    assert first.json() == again.json()
    assert balances(merchant) == (10_000, 9_900)  # one payout, one hold


def test_a_timestamp_criteria_date_reads_back_as_its_date(operator: Operator) -> None:
    merchant = verified_merchant(operator, "Verified Dates Ltd")
    body = sdk_body("java-payout-user-determined", merchant)
    criteria = body["beneficiary"]["verification"]["transaction_search_criteria"]
    criteria["created_at"] = "2026-11-20T23:30:00+01:00"
    created = create_verified(merchant, body)
    read = get_payout(merchant, created["id"])["beneficiary"]["verification"]
    assert read["transaction_search_criteria"]["created_at"] == "2026-11-20"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            {"type": "preselected", "provider_id": "mock-payments-gb-redirect"},
            "beneficiary.provider_selection.provider_id",
        ),
        (
            {
                "type": "preselected",
                "provider_id": "mock",
                "scheme_selection": {"type": "preselected", "scheme_id": "sepa_credit_transfer"},
            },
            "beneficiary.provider_selection.scheme_selection.scheme_id",
        ),
        (
            {"type": "user_selected", "filter": {"countries": ["DE"]}},
            "beneficiary.provider_selection.filter",
        ),
    ],
)
def test_a_selection_that_leaves_no_provider_is_refused(
    operator: Operator, change: dict[str, Any], field: str
) -> None:
    merchant = verified_merchant(operator, "Verified Refusals Ltd")
    body = sdk_body("dotnet-payout-user-determined-preselected", merchant)
    body["beneficiary"]["provider_selection"] = change
    assert_invalid(merchant.signed_post(PATH, body), field)
    assert balances(merchant) == (10_000, 10_000)


def test_a_verified_payout_without_a_name_is_refused(operator: Operator) -> None:
    merchant = verified_merchant(operator, "Verified Names Ltd")
    body = sdk_body("dotnet-payout-user-determined-preselected", merchant)
    del body["beneficiary"]["user"]["name"]
    assert_invalid(merchant.signed_post(PATH, body), "beneficiary.user.name")


# --- the payout page -------------------------------------------------------------------------


def test_the_page_answers_the_sdk_link_without_a_query(http: httpx.Client) -> None:
    answer = http.get(PAGE)
    assert answer.status_code == 200, answer.text
    assert "payout_id=" in answer.text  # the script that reads the fragment


def test_name_verified_payout_executes_as_any_payout(
    operator: Operator, http: httpx.Client, receiver: WebhookReceiver
) -> None:
    merchant = verified_merchant(operator, "Verified Payer Ltd", receiver)
    created = create_verified(
        merchant, sdk_body("dotnet-payout-user-determined-name-verification", merchant)
    )
    bank = at_bank(http, created)
    assert get_payout(merchant, created["id"])["status"] == "authorizing"
    assert [holder for holder, _ in accounts_offered(bank)] == ["John Doe", "Alex Other"]
    result = decide_at_bank(http, created, "authorise", "John Doe")
    assert "Payout on its way" in result.text
    assert f"{RETURN_URI}&amp;payout_id={created['id']}" in result.text
    payout = wait_payout_status(merchant, created["id"], TERMINAL)
    assert payout["status"] == "executed", payout
    assert parse_time(payout["executed_at"]) >= parse_time(payout["authorized_at"])
    event = _wait_event(receiver, created["id"], "payout_executed")
    assert event["beneficiary"]["type"] == "user_determined"
    assert balances(merchant) == (9_900, 9_900)


def test_an_account_in_another_name_fails_name_verification(
    operator: Operator, http: httpx.Client, receiver: WebhookReceiver
) -> None:
    merchant = verified_merchant(operator, "Verified Names Two Ltd", receiver)
    created = create_verified(
        merchant, sdk_body("dotnet-payout-user-determined-preselected", merchant)
    )
    result = decide_at_bank(http, created, "authorise", "Alex Other")
    assert "name_verification_failed" in result.text
    payout = get_payout(merchant, created["id"])
    assert payout["status"] == "failed"
    assert payout["failure_reason"] == "name_verification_failed"
    event = _wait_event(receiver, created["id"], "payout_failed")
    assert event["failure_reason"] == "name_verification_failed"
    assert balances(merchant) == (10_000, 10_000)  # the hold is released


def test_declining_at_the_bank_fails_the_payout(
    operator: Operator, http: httpx.Client, receiver: WebhookReceiver
) -> None:
    merchant = verified_merchant(operator, "Verified Declines Ltd", receiver)
    created = create_verified(merchant, sdk_body("java-payout-user-determined", merchant))
    result = decide_at_bank(http, created, "decline")
    assert "authorization_failed" in result.text
    assert get_payout(merchant, created["id"])["failure_reason"] == "authorization_failed"
    assert _wait_event(receiver, created["id"], "payout_failed")["payout_id"] == created["id"]
    assert balances(merchant) == (10_000, 10_000)
    # The payee can act only once.
    again = http.get(
        f"{PAGE}/{created['id']}/bank",
        params={"resource_token": created["resource_token"], "return_uri": RETURN_URI},
    )
    assert again.status_code == 409, again.text


def _transaction_body(merchant: MerchantClient, pay_in: dict[str, Any]) -> dict[str, Any]:
    body = sdk_body("dotnet-payout-user-determined-transaction-verification", merchant)
    criteria = body["beneficiary"]["verification"]["transaction_search_criteria"]
    criteria["created_at"] = parse_time(pay_in["created_at"]).date().isoformat()
    return body


def test_transaction_search_finds_the_payees_earlier_pay_in(
    operator: Operator, http: httpx.Client, receiver: WebhookReceiver
) -> None:
    merchant = verified_merchant(operator, "Betropolis LTD", receiver, gbp=0)
    payer = {"id": "betropolis-john", "name": "John Doe", "email": "john.doe@example.com"}
    pay_in = settled_payment(merchant, authorised_pay_in(merchant, 1_000, payer))
    created = create_verified(merchant, _transaction_body(merchant, pay_in))
    bank = at_bank(http, created)
    # The account John Doe paid from, a new one in his name and one in another name.
    offered = accounts_offered(bank)
    assert [holder for holder, _ in offered] == ["John Doe", "John Doe", "Alex Other"]
    result = decide_at_bank(http, created, "authorise", "John Doe")
    assert "Payout on its way" in result.text
    payout = wait_payout_status(merchant, created["id"], TERMINAL)
    assert payout["status"] == "executed", payout
    assert balances(merchant) == (900, 900)


def test_transaction_search_without_a_matching_pay_in_fails(
    operator: Operator, http: httpx.Client, receiver: WebhookReceiver
) -> None:
    merchant = verified_merchant(operator, "Betropolis LTD", receiver, gbp=5_000)
    payer = {"id": "betropolis-john-2", "name": "John Doe", "email": "john.doe@example.com"}
    pay_in = settled_payment(merchant, authorised_pay_in(merchant, 999, payer))
    created = create_verified(merchant, _transaction_body(merchant, pay_in))  # asks for 1,000
    result = decide_at_bank(http, created, "authorise", "John Doe")  # the account paid from
    assert "transaction_verification_failed" in result.text
    payout = get_payout(merchant, created["id"])
    assert payout["failure_reason"] == "transaction_verification_failed"
    assert _wait_event(receiver, created["id"], "payout_failed")["failed_at"]
    assert balances(merchant) == (5_999, 5_999)


def test_the_verified_payout_of_the_api_docs_is_accepted_and_read_as_shown(
    operator: Operator,
) -> None:
    merchant = verified_merchant(operator, "Verified Docs Ltd")
    blocks = [
        json.loads(b)
        for b in re.findall(r"^```json\n(.*?)^```", API_DOCS.read_text(), re.M | re.S)
        if '"user_determined"' in b
    ]
    request, read = blocks  # the request, then GET's answer
    request["merchant_account_id"] = merchant.accounts["GBP"]["id"]
    created = create_verified(merchant, request)
    assert created["user"] == {"id": "user-42"}
    payout = get_payout(merchant, created["id"])
    shown = {k: v for k, v in read.items() if k not in ("id", "merchant_account_id", "created_at")}
    assert {k: payout[k] for k in shown} == shown


def test_payouts_are_listed_by_their_verified_status(
    operator: Operator, http: httpx.Client
) -> None:
    merchant = verified_merchant(operator, "Verified Lists Ltd")
    waiting = create_verified(merchant, sdk_body("java-payout-user-determined", merchant))
    chosen = create_verified(merchant, sdk_body("java-payout-user-determined", merchant))
    at_bank(http, chosen)
    for status, payout in (("authorization_required", waiting), ("authorizing", chosen)):
        answer = merchant.get(PATH, status=status)
        assert answer.status_code == 200, answer.text
        assert [p["id"] for p in answer.json()["items"]] == [payout["id"]]
        assert answer.json()["items"][0]["status"] == status


def test_an_unfunded_verified_payout_fails_once_authorised(
    operator: Operator, http: httpx.Client, receiver: WebhookReceiver
) -> None:
    merchant = verified_merchant(operator, "Verified Unfunded Ltd", receiver, gbp=50)
    created = create_verified(
        merchant, sdk_body("dotnet-payout-user-determined-name-verification", merchant)
    )
    assert balances(merchant) == (50, 50)  # nothing to hold: nothing held
    decide_at_bank(http, created, "authorise", "John Doe")
    payout = wait_payout_status(merchant, created["id"], TERMINAL)
    assert (payout["status"], payout["failure_reason"]) == ("failed", "insufficient_funds")
    assert _wait_event(receiver, created["id"], "payout_failed")["payout_id"] == created["id"]
    assert balances(merchant) == (50, 50)


def test_the_page_needs_the_payouts_own_token(operator: Operator, http: httpx.Client) -> None:
    merchant = verified_merchant(operator, "Verified Tokens Ltd")
    created = create_verified(merchant, sdk_body("java-payout-user-determined", merchant))
    other = create_verified(merchant, sdk_body("java-payout-user-determined", merchant))
    params = {"payout_id": created["id"], "return_uri": RETURN_URI}
    for token in ("", "not-a-token", other["resource_token"]):
        answer = http.get(PAGE, params={**params, "resource_token": token})
        assert answer.status_code == 401, answer.text
    unknown = {**params, "payout_id": "0193a1c4-7d1e-7c2a-9a51-2b8f0e6f4d10"}
    answer = http.get(PAGE, params={**unknown, "resource_token": created["resource_token"]})
    assert answer.status_code == 404, answer.text
    bad_return = {**params, "resource_token": created["resource_token"], "return_uri": "nope"}
    assert http.get(PAGE, params=bad_return).status_code == 400
    assert get_payout(merchant, created["id"])["status"] == "authorization_required"


def test_a_payout_whose_payee_never_acts_expires_and_releases_its_hold(
    operator: Operator, http: httpx.Client, receiver: WebhookReceiver
) -> None:
    merchant = verified_merchant(operator, "Verified Expiry Ltd", receiver)
    waiting = create_verified(merchant, sdk_body("java-payout-user-determined", merchant))
    chosen = create_verified(merchant, sdk_body("java-payout-user-determined", merchant))
    at_bank(http, chosen)  # the payee chose a provider, then walked away
    acted = create_verified(
        merchant, sdk_body("dotnet-payout-user-determined-name-verification", merchant)
    )
    decide_at_bank(http, acted, "authorise", "John Doe")
    assert wait_payout_status(merchant, acted["id"], TERMINAL)["status"] == "executed"
    assert balances(merchant) == (9_900, 9_900 - 2 * 75)

    # A minute before the window closes the payouts still wait, their funds held.
    advance_clock(operator, WINDOW - 60)
    merchant.forget_token()  # the access token expired as the clock moved
    assert get_payout(merchant, waiting["id"])["status"] == "authorization_required"
    assert get_payout(merchant, chosen["id"])["status"] == "authorizing"
    assert balances(merchant) == (9_900, 9_900 - 2 * 75)

    advance_clock(operator, 61)
    merchant.forget_token()
    for created in (waiting, chosen):
        payout = wait_payout_status(merchant, created["id"], TERMINAL)
        assert (payout["status"], payout["failure_reason"]) == ("failed", "expired"), payout
        assert parse_time(payout["failed_at"]) >= parse_time(payout["created_at"])
        event = _wait_event(receiver, created["id"], "payout_failed")
        assert event["failure_reason"] == "expired"
        assert event["beneficiary"]["type"] == "user_determined"
    # Both holds are released; the executed payout is untouched.
    assert balances(merchant) == (9_900, 9_900)
    assert get_payout(merchant, acted["id"])["status"] == "executed"
    assert [e["type"] for e in _payout_events(receiver, acted["id"])] == ["payout_executed"]
    # The payee's link no longer opens the page.
    params = {"payout_id": waiting["id"], "return_uri": RETURN_URI}
    answer = http.get(PAGE, params={**params, "resource_token": waiting["resource_token"]})
    assert answer.status_code == 401, answer.text
    ledger = operator.get("/admin/ledger/check")
    assert ledger.status_code == 200, ledger.text
    assert ledger.json() == {"ok": True, "violations": []}


def test_a_blocked_payout_whose_payee_never_acts_fails_as_blocked_not_expired(
    operator: Operator, http: httpx.Client, receiver: WebhookReceiver
) -> None:
    """A payout accepted with a failure pending (here its user is on the screening list, so
    nothing was held) could never have been paid: when its window closes it fails with that
    reason, not with `expired`, which would put it down to the payee."""
    before = operator.get("/admin/screening-list")
    assert before.status_code == 200, before.text
    try:
        # The mock provider's account holder, listed by another spelling of the name.
        listed = operator.post("/admin/screening-list", {"names": ["JOHN  doe."]})
        assert listed.status_code == 200, listed.text
        merchant = verified_merchant(operator, "Verified Screening Ltd", receiver)
        body = sdk_body("dotnet-payout-user-determined-name-verification", merchant)
        assert body["beneficiary"]["user"]["name"] == "John Doe"
        created = create_verified(merchant, body)
        authorised = create_verified(merchant, body)
        assert balances(merchant) == (10_000, 10_000)  # nothing held for a blocked payout
        # Once its payee authorises, a blocked payout fails as any payout to a listed name.
        decide_at_bank(http, authorised, "authorise", "John Doe")
        payout = wait_payout_status(merchant, authorised["id"], TERMINAL)
        assert (payout["status"], payout["failure_reason"]) == ("failed", "blocked"), payout

        advance_clock(operator, WINDOW + 1)
        merchant.forget_token()
        payout = wait_payout_status(merchant, created["id"], TERMINAL)
        assert (payout["status"], payout["failure_reason"]) == ("failed", "blocked"), payout
        event = _wait_event(receiver, created["id"], "payout_failed")
        assert event["failure_reason"] == "blocked"
        assert balances(merchant) == (10_000, 10_000)
    finally:
        operator.post("/admin/screening-list", {"names": before.json()["names"]})
