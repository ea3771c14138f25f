"""The hosted payment page and the mock bank pages over plain HTTP (no browser): the happy path
as forms, and every kind of bad input answered with an HTML page of the right status that
changes nothing (401 token, 403 tampered form, 404 unknown payment, 409 finished payment,
400 bad return_uri)."""

from __future__ import annotations

import hashlib
import hmac
import html
import re
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from e2e_helpers import assert_hosted_page, page_field, wait_for

from support.api import MerchantClient, Operator
from support.server import RunningServer

RETURN_URI = "https://shop.example/back?order=7"
HPP = "/hpp/payments"


@pytest.fixture
def http(server: RunningServer) -> Iterator[httpx.Client]:
    """The payer's browser, without JavaScript and without following redirects."""
    client = httpx.Client(base_url=server.base_url, timeout=30, follow_redirects=False)
    yield client
    client.close()


@pytest.fixture
def merchant(operator: Operator) -> MerchantClient:
    return operator.new_merchant("Hpp Test Shop")


def _create(merchant: MerchantClient, currency: str = "GBP", **selection: Any) -> dict[str, Any]:
    body = {
        "amount_in_minor": 250_075,
        "currency": currency,
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": selection or {"type": "user_selected"},
            "beneficiary": {
                "type": "merchant_account",
                "merchant_account_id": merchant.accounts[currency]["id"],
            },
        },
    }
    answer = merchant.signed_post("/v3/payments", body)
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def _status(merchant: MerchantClient, payment_id: str) -> dict[str, Any]:
    answer = merchant.get(f"/v3/payments/{payment_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _params(payment: dict[str, Any], **overrides: str) -> dict[str, str]:
    return {
        "payment_id": payment["id"],
        "resource_token": payment["resource_token"],
        "return_uri": RETURN_URI,
        **overrides,
    }


def _choose(
    http: httpx.Client, payment: dict[str, Any], bank: str, **overrides: str
) -> httpx.Response:
    page = http.get(HPP, params=_params(payment))
    assert page.status_code == 200, page.text
    form = {
        "resource_token": payment["resource_token"],
        "return_uri": RETURN_URI,
        "csrf": page_field(page, "csrf"),
        "provider_id": bank,
        **overrides,
    }
    return http.post(f"{HPP}/{payment['id']}/provider", data=form)


def _open_bank(http: httpx.Client, location: str) -> httpx.Response:
    """What a browser does with the mock bank's login uri (`/mock-bank/login/{id}#token=..`):
    the page answers at once, and its script posts the fragment's token to the same path."""
    parts = urlsplit(location)
    assert parts.path.startswith("/mock-bank/login/"), location
    login = http.get(parts.path)
    assert_hosted_page(login, 200, "Signing you in to the bank")
    token = parse_qs(parts.fragment)["token"][0]
    return http.post(parts.path, data={"token": token})


def _at_bank(http: httpx.Client, payment: dict[str, Any]) -> httpx.Response:
    """Pick the GB bank; the mock bank's consent page."""
    chosen = _choose(http, payment, "mock-payments-gb-redirect")
    assert chosen.status_code == 303, chosen.text
    consent = _open_bank(http, chosen.headers["location"])
    assert consent.status_code == 200, consent.text
    return consent


def _bank_form(consent: httpx.Response, **fields: str) -> dict[str, str]:
    form = {name: page_field(consent, name) for name in ("payment_id", "token", "csrf")}
    return {**form, **fields}


# --- the happy path, as forms ------------------------------------------------------------------


def test_hosted_page_shows_the_payment_and_its_banks(
    http: httpx.Client, merchant: MerchantClient
) -> None:
    payment = _create(merchant)
    page = http.get(HPP, params=_params(payment))
    assert_hosted_page(page, 200, "Pay Hpp Test Shop", "2,500.75 GBP", "Mock UK Payments")
    assert "Mock German Bank" not in page.text  # EUR banks are not offered for GBP
    assert re.search(r"script-src 'nonce-[\w-]+'", page.headers["content-security-policy"])
    assert 'name="provider_id" value="mock-payments-gb-redirect"' in page.text
    # Only looking changes nothing.
    assert _status(merchant, payment["id"])["status"] == "authorization_required"


def test_search_filters_the_banks_on_the_server(
    http: httpx.Client, merchant: MerchantClient
) -> None:
    payment = _create(merchant, "EUR")
    page = http.get(HPP, params=_params(payment, q="FRENCH"))
    assert_hosted_page(page, 200, "1 of 4 banks shown", "2,500.75 EUR")
    items = re.findall(r'<li data-name="([^"]+)"( hidden)?>', page.text)
    assert {name: bool(hidden) for name, hidden in items} == {
        "mock german bank": True,
        "mock french bank": False,
        "mock german bank (embedded)": True,
        "mock german bank (additional inputs)": True,
    }
    assert "mock dutch bank" not in page.text  # private beta: not offered by default


def test_preselected_payment_offers_only_its_bank(
    http: httpx.Client, merchant: MerchantClient
) -> None:
    payment = _create(merchant, "EUR", type="preselected", provider_id="mock-payments-fr-redirect")
    page = http.get(HPP, params=_params(payment))
    assert_hosted_page(page, 200, "1 of 1 banks shown", "Mock French Bank")
    refused = _choose(http, payment, "mock-payments-de-redirect")
    assert_hosted_page(refused, 403, "This bank cannot be chosen")
    chosen = _choose(http, payment, "mock-payments-fr-redirect")
    assert chosen.status_code == 303, chosen.text
    assert f"/mock-bank/login/{payment['id']}#token=" in chosen.headers["location"]


def test_second_window_cannot_switch_banks(http: httpx.Client, merchant: MerchantClient) -> None:
    payment = _create(merchant, "EUR")
    first = _choose(http, payment, "mock-payments-de-redirect")
    assert first.status_code == 303, first.text
    again = _choose(http, payment, "mock-payments-de-redirect")  # same bank: to it again
    assert again.status_code == 303, again.text
    assert urlsplit(again.headers["location"]).path == f"/mock-bank/login/{payment['id']}"
    other = _choose(http, payment, "mock-payments-fr-redirect")
    assert_hosted_page(other, 409, "A bank has already been chosen")
    state = _status(merchant, payment["id"])
    assert (state["status"], state["provider_id"]) == ("authorizing", "mock-payments-de-redirect")


def test_payer_pays_through_the_forms(http: httpx.Client, merchant: MerchantClient) -> None:
    payment = _create(merchant)
    chosen = _choose(http, payment, "mock-payments-gb-redirect")
    assert chosen.status_code == 303, chosen.text
    assert chosen.headers["referrer-policy"] == "no-referrer"
    bank_uri = chosen.headers["location"]
    assert urlsplit(bank_uri).path == f"/mock-bank/login/{payment['id']}"
    started = _status(merchant, payment["id"])
    assert (started["status"], started["provider_id"]) == (
        "authorizing",
        "mock-payments-gb-redirect",
    )

    consent = _open_bank(http, bank_uri)
    assert_hosted_page(consent, 200, "Authorise payment", "2,500.75 GBP", "Hpp Test Shop")
    decided = http.post(
        "/mock-bank/authorize",
        data=_bank_form(consent, username="test_executed", decision="authorise"),
    )
    assert decided.status_code == 303, decided.text
    result_uri = decided.headers["location"]
    parts = urlsplit(result_uri)
    assert parts.path == f"{HPP}/{payment['id']}/result"
    query = parse_qs(parts.query)
    assert query["return_uri"] == [RETURN_URI]
    assert query["payment_id"] == [payment["id"]]

    wait_for(lambda: _status(merchant, payment["id"])["status"] == "payment_settled")
    result = http.get(result_uri)
    assert_hosted_page(result, 200, "Payment successful")
    back = f"{RETURN_URI}&payment_id={payment['id']}"
    assert f'content="3;url={back}"' in html.unescape(result.text)

    # Coming back to the hosted page later: the payment is done.
    again = http.get(HPP, params=_params(payment))
    assert_hosted_page(again, 409, "This payment has already been completed", back)


def test_execution_rejected_username(http: httpx.Client, merchant: MerchantClient) -> None:
    payment = _create(merchant)
    consent = _at_bank(http, payment)
    decided = http.post(
        "/mock-bank/authorize",
        data=_bank_form(
            consent,
            username="test_execution_rejected",
            execution_delay="0",
            settlement_delay="",
            decision="authorise",
        ),
    )
    assert decided.status_code == 303, decided.text
    wait_for(lambda: _status(merchant, payment["id"])["status"] == "payment_failed")
    failed = _status(merchant, payment["id"])
    assert (failed["failure_stage"], failed["failure_reason"]) == (
        "authorized",
        "provider_rejected",
    )
    result = http.get(decided.headers["location"])
    assert_hosted_page(result, 200, "Payment failed", "provider_rejected")


def test_embedded_bank_takes_username_then_password(
    http: httpx.Client, merchant: MerchantClient
) -> None:
    payment = _create(merchant, "EUR")
    chosen = _choose(http, payment, "mock-payments-de-embedded")
    assert chosen.status_code == 303, chosen.text
    step1 = _open_bank(http, chosen.headers["location"])
    assert_hosted_page(step1, 200, "Sign in to approve", "Step 1 of 2")
    step2 = http.post(
        "/mock-bank/embedded",
        data=_bank_form(step1, step="username", username="test_authorisation_failed"),
    )
    assert_hosted_page(step2, 200, "Enter your password", "Step 2 of 2")
    assert _status(merchant, payment["id"])["status"] == "authorizing"
    done = http.post(
        "/mock-bank/embedded",
        data=_bank_form(
            step2, step="password", username=page_field(step2, "username"), password="pw"
        ),
    )
    assert done.status_code == 303, done.text
    assert urlsplit(done.headers["location"]).path == f"{HPP}/{payment['id']}/result"
    failed = _status(merchant, payment["id"])
    assert (failed["status"], failed["failure_reason"]) == (
        "payment_failed",
        "authorization_failed",
    )


def test_repeating_the_same_decision_answers_the_same(
    http: httpx.Client, merchant: MerchantClient
) -> None:
    payment = _create(merchant)
    consent = _at_bank(http, payment)
    form = _bank_form(consent, decision="cancel")
    first = http.post("/mock-bank/authorize", data=form)
    second = http.post("/mock-bank/authorize", data=form)  # a double submit
    assert first.status_code == second.status_code == 303
    assert first.headers["location"] == second.headers["location"]
    other = http.post(
        "/mock-bank/authorize",
        data={**form, "decision": "authorise", "username": "test_executed"},
    )
    assert_hosted_page(other, 409, "This payment has already failed")


# --- bad input: the right page and status, and nothing changes --------------------------------


def test_link_without_parameters_answers_a_page_that_reads_the_fragment(
    http: httpx.Client,
) -> None:
    page = http.get(HPP)
    assert_hosted_page(page, 200, "Opening your payment", "This payment link is incomplete")
    assert "window.location.hash" in page.text  # moves fragment parameters to the query
    nonce = re.search(r"'nonce-([\w-]+)'", page.headers["content-security-policy"])
    assert nonce
    assert f'<script nonce="{nonce.group(1)}">' in page.text


def test_link_missing_one_parameter_is_400(http: httpx.Client, merchant: MerchantClient) -> None:
    payment = _create(merchant)
    for missing in ("payment_id", "resource_token", "return_uri"):
        params = _params(payment)
        del params[missing]
        assert_hosted_page(http.get(HPP, params=params), 400, "This payment link is incomplete")
    assert _status(merchant, payment["id"])["status"] == "authorization_required"


def _forged(token: str) -> str:
    head, body, signature = token.split(".")
    return f"{head}.{body}.{signature[:-6]}AAAAAA"


@pytest.mark.parametrize("kind", ["garbage", "bad-signature", "foreign", "bank-token"])
def test_bad_resource_token_is_401_and_changes_nothing(
    http: httpx.Client, merchant: MerchantClient, kind: str
) -> None:
    payment = _create(merchant)
    other = _create(merchant)
    if kind == "bank-token":
        # The mock bank's token of this very payment is not a resource token.
        bank_uri = _choose(http, payment, "mock-payments-gb-redirect").headers["location"]
        token = parse_qs(urlsplit(bank_uri).fragment)["token"][0]
    else:
        token = {
            "garbage": "not-a-jwt",
            "bad-signature": _forged(payment["resource_token"]),
            "foreign": other["resource_token"],
        }[kind]
    before = _status(merchant, payment["id"])

    page = http.get(HPP, params=_params(payment, resource_token=token))
    assert_hosted_page(page, 401, "This link has expired or is not valid")
    posted = http.post(
        f"{HPP}/{payment['id']}/provider",
        data={
            "resource_token": token,
            "return_uri": RETURN_URI,
            "csrf": hmac.new(token.encode(), b"hpp", hashlib.sha256).hexdigest(),
            "provider_id": "mock-payments-gb-redirect",
        },
    )
    assert_hosted_page(posted, 401)
    result = http.get(
        f"{HPP}/{payment['id']}/result", params={"resource_token": token, "return_uri": RETURN_URI}
    )
    assert_hosted_page(result, 401)
    assert _status(merchant, payment["id"]) == before


def test_unknown_payment_is_404(http: httpx.Client, merchant: MerchantClient) -> None:
    payment = _create(merchant)
    unknown = str(uuid.uuid4())
    assert_hosted_page(
        http.get(HPP, params=_params(payment, payment_id=unknown)), 404, "Payment not found"
    )
    assert_hosted_page(http.get(HPP, params=_params(payment, payment_id="not-a-uuid")), 404)
    posted = http.post(
        f"{HPP}/{unknown}/provider",
        data={"resource_token": payment["resource_token"], "return_uri": RETURN_URI},
    )
    assert_hosted_page(posted, 404)
    assert_hosted_page(
        http.get(
            f"{HPP}/{unknown}/result",
            params={"resource_token": payment["resource_token"], "return_uri": RETURN_URI},
        ),
        404,
    )
    assert _status(merchant, payment["id"])["status"] == "authorization_required"


@pytest.mark.parametrize(
    "return_uri",
    [
        "javascript:alert(1)",
        "/relative/path",
        "ftp://shop.example/back",
        "https://",
        "",
        "https://shop.example/a b",
        "https://shop.example/" + "x" * 2100,
    ],
)
def test_return_uri_must_be_absolute_http(
    http: httpx.Client, merchant: MerchantClient, return_uri: str
) -> None:
    payment = _create(merchant)
    page = http.get(HPP, params=_params(payment, return_uri=return_uri))
    assert_hosted_page(page, 400, "This payment link is not valid")
    assert "javascript:" not in page.text
    chosen = _choose(http, payment, "mock-payments-gb-redirect", return_uri=return_uri)
    assert_hosted_page(chosen, 400, "This payment link is not valid")
    result = http.get(
        f"{HPP}/{payment['id']}/result",
        params={"resource_token": payment["resource_token"], "return_uri": return_uri},
    )
    assert_hosted_page(result, 400)
    assert _status(merchant, payment["id"])["status"] == "authorization_required"


@pytest.mark.parametrize(
    "tamper",
    [
        {"csrf": "0" * 64},
        {"csrf": ""},
        {"provider_id": "mock-payments-de-redirect"},  # an EUR bank for a GBP payment
        {"provider_id": "no-such-bank"},
        {"provider_id": ""},
    ],
)
def test_tampered_hpp_form_is_403_and_changes_nothing(
    http: httpx.Client, merchant: MerchantClient, tamper: dict[str, str]
) -> None:
    payment = _create(merchant)
    answer = _choose(http, payment, "mock-payments-gb-redirect", **tamper)
    assert_hosted_page(answer, 403)
    state = _status(merchant, payment["id"])
    assert state["status"] == "authorization_required"
    assert "provider_id" not in state


def test_csrf_field_of_another_payment_is_403(http: httpx.Client, merchant: MerchantClient) -> None:
    payment = _create(merchant)
    other = _create(merchant)
    other_csrf = page_field(http.get(HPP, params=_params(other)), "csrf")
    answer = _choose(http, payment, "mock-payments-gb-redirect", csrf=other_csrf)
    assert_hosted_page(answer, 403, "This form could not be accepted")
    assert _status(merchant, payment["id"])["status"] == "authorization_required"


def test_finished_payment_is_409(http: httpx.Client, merchant: MerchantClient) -> None:
    payment = _create(merchant)
    page = http.get(HPP, params=_params(payment))
    cancelled = merchant.signed_post(f"/v3/payments/{payment['id']}/actions/cancel", {})
    assert cancelled.status_code == 202, cancelled.text

    again = http.get(HPP, params=_params(payment))
    assert_hosted_page(
        again,
        409,
        "This payment has already failed",
        "The merchant cancelled the payment.",
        f"{RETURN_URI}&payment_id={payment['id']}",
    )
    posted = http.post(
        f"{HPP}/{payment['id']}/provider",
        data={
            "resource_token": payment["resource_token"],
            "return_uri": RETURN_URI,
            "csrf": page_field(page, "csrf"),
            "provider_id": "mock-payments-gb-redirect",
        },
    )
    assert_hosted_page(posted, 409, "This payment has already failed")
    failed = _status(merchant, payment["id"])
    assert (failed["status"], failed["failure_reason"]) == ("payment_failed", "canceled")
    result = http.get(
        f"{HPP}/{payment['id']}/result",
        params={"resource_token": payment["resource_token"], "return_uri": RETURN_URI},
    )
    assert_hosted_page(result, 200, "Payment failed", "The merchant cancelled the payment.")


def test_mock_bank_rejects_bad_tokens_and_tampered_forms(
    http: httpx.Client, merchant: MerchantClient
) -> None:
    payment = _create(merchant)
    consent = _at_bank(http, payment)
    token = page_field(consent, "token")

    def consent_page(payment_id: str = payment["id"], **form: str) -> httpx.Response:
        return http.post(f"/mock-bank/login/{payment_id}", data=form)

    assert_hosted_page(consent_page(token=payment["resource_token"]), 401)  # wrong kind of token
    assert_hosted_page(consent_page(token=_forged(token)), 401)
    assert_hosted_page(consent_page(), 401)
    assert_hosted_page(consent_page(str(uuid.uuid4()), token=token), 404)
    other = _create(merchant)
    assert_hosted_page(consent_page(other["id"], token=token), 401)

    good = {"username": "test_executed", "decision": "authorise"}
    for tampered, status in [
        ({"csrf": "f" * 64}, 403),
        ({"decision": "approve-everything"}, 403),
        ({"token": _forged(token)}, 401),
        ({"token": payment["resource_token"]}, 401),
        ({"payment_id": other["id"]}, 401),
        ({"username": ""}, 400),
        ({"execution_delay": "soon"}, 400),
        ({"settlement_delay": "-1"}, 400),
        ({"settlement_delay": "99999999"}, 400),
    ]:
        answer = http.post("/mock-bank/authorize", data=_bank_form(consent, **{**good, **tampered}))
        assert_hosted_page(answer, status)
        assert _status(merchant, payment["id"])["status"] == "authorizing", tampered
    invalid = http.post(
        "/mock-bank/authorize", data=_bank_form(consent, **good, execution_delay="soon")
    )
    assert_hosted_page(invalid, 400, "There is a problem", "The execution delay must be")
    assert 'aria-invalid="true"' in invalid.text
    assert page_field(invalid, "token") == token  # the form comes back, ready to correct

    embedded = http.post(
        "/mock-bank/embedded", data=_bank_form(consent, step="nowhere", username="x")
    )
    assert_hosted_page(embedded, 403)
    assert _status(merchant, payment["id"])["status"] == "authorizing"


def test_hosted_page_after_the_merchant_started_the_flow(
    http: httpx.Client, merchant: MerchantClient
) -> None:
    """The merchant called authorization-flow itself (status authorizing, no bank yet): the
    payer can still choose a bank here; the bank then returns them to the flow's return_uri."""
    payment = _create(merchant)
    flow = merchant.signed_post(
        f"/v3/payments/{payment['id']}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": "https://shop.example/api-flow"}},
    )
    assert flow.status_code == 200, flow.text
    consent = _at_bank(http, payment)
    assert _status(merchant, payment["id"])["provider_id"] == "mock-payments-gb-redirect"
    decided = http.post(
        "/mock-bank/authorize",
        data=_bank_form(consent, username="test_executed", decision="authorise"),
    )
    assert decided.status_code == 303, decided.text
    assert (
        decided.headers["location"] == f"https://shop.example/api-flow?payment_id={payment['id']}"
    )


def test_expired_tokens_are_401(
    http: httpx.Client, merchant: MerchantClient, operator: Operator
) -> None:
    """Runs last in this module: it moves the shared service clock past the tokens' 15 min."""
    payment = _create(merchant)
    at_bank = _create(merchant)
    consent = _at_bank(http, at_bank)
    advanced = operator.post("/sandbox/clock/advance", {"seconds": 15 * 60 + 1})
    assert advanced.status_code == 200, advanced.text

    assert_hosted_page(http.get(HPP, params=_params(payment)), 401, "Token has expired")
    bank = http.post(
        f"/mock-bank/login/{at_bank['id']}", data={"token": page_field(consent, "token")}
    )
    assert_hosted_page(bank, 401, "Token has expired")
    decided = http.post(
        "/mock-bank/authorize",
        data=_bank_form(consent, username="test_executed", decision="authorise"),
    )
    assert_hosted_page(decided, 401)
    # Nothing was authorised: the payments only expire, as unauthorised payments do.
    for made in (payment, at_bank):
        assert _status(merchant, made["id"])["status"] in {
            "authorization_required",
            "authorizing",
            "payment_failed",
        }
        assert "authorized_at" not in _status(merchant, made["id"])


def test_a_bank_chosen_on_the_hosted_page_is_the_next_action_the_payment_shows(
    http: httpx.Client, merchant: MerchantClient
) -> None:
    """Choosing the bank on the hosted page is a step of the payer's journey like the API's:
    `GET /v3/payments/{id}` then shows the redirect to that bank, not the provider list the
    merchant's own call left (nor nothing, when the merchant made none)."""
    started = _create(merchant)
    flow = merchant.signed_post(
        f"/v3/payments/{started['id']}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": "https://shop.example/api-flow"}},
    )
    assert flow.status_code == 200, flow.text
    listed = _status(merchant, started["id"])["authorization_flow"]["actions"]["next"]
    assert listed["type"] == "provider_selection"
    for payment in (started, _create(merchant)):
        chosen = _choose(http, payment, "mock-payments-gb-redirect")
        assert chosen.status_code == 303, chosen.text
        shown = _status(merchant, payment["id"])
        assert shown["status"] == "authorizing"
        assert shown["authorization_flow"]["actions"]["next"]["type"] == "redirect", shown
