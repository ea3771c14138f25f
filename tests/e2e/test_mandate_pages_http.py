"""The mandate pages over plain HTTP (no browser): the hosted page and the mock bank's consent
page as forms, and every kind of bad input answered with an HTML page of the right status that
changes nothing (401 token, 403 tampered form or bank not offered, 404 unknown mandate, 409
mandate already decided, 400 bad return_uri)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from e2e_helpers import assert_hosted_page, page_field
from mandate_helpers import GB_REDIRECT, MANDATES, create_mandate, mandate_body

from support.api import MerchantClient, Operator
from support.server import RunningServer

RETURN_URI = "https://shop.example/mandate?plan=gold"
HPP = "/hpp/mandates"


@pytest.fixture
def http(server: RunningServer) -> Iterator[httpx.Client]:
    """The payer's browser, without JavaScript and without following redirects."""
    client = httpx.Client(base_url=server.base_url, timeout=30, follow_redirects=False)
    yield client
    client.close()


@pytest.fixture
def merchant(operator: Operator) -> MerchantClient:
    return operator.new_merchant("Mandate Pages Shop")


def _created(merchant: MerchantClient) -> dict[str, Any]:
    return create_mandate(merchant, mandate_body(merchant, provider_id=None))


def _params(mandate: dict[str, Any], **overrides: str) -> dict[str, str]:
    return {
        "mandate_id": mandate["id"],
        "resource_token": mandate["resource_token"],
        "return_uri": RETURN_URI,
        **overrides,
    }


def _status(merchant: MerchantClient, mandate_id: str) -> str:
    answer = merchant.get(f"{MANDATES}/{mandate_id}")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["status"])


def _choose(http: httpx.Client, mandate: dict[str, Any], bank: str, **overrides: str) -> Any:
    page = http.get(HPP, params=_params(mandate))
    assert_hosted_page(page, 200)
    form = {
        "resource_token": mandate["resource_token"],
        "return_uri": RETURN_URI,
        "csrf": page_field(page, "csrf"),
        "provider_id": bank,
        **overrides,
    }
    return http.post(f"{HPP}/{mandate['id']}/provider", data=form)


def _at_bank(http: httpx.Client, mandate: dict[str, Any]) -> httpx.Response:
    chosen = _choose(http, mandate, GB_REDIRECT)
    assert chosen.status_code == 303, chosen.text
    location = urlsplit(chosen.headers["location"])
    assert location.path == f"/mock-bank/login/{mandate['id']}", location
    # What the login page's script does: post the fragment's token to the same path.
    token = parse_qs(location.fragment)["token"][0]
    consent = http.post(location.path, data={"token": token})
    assert_hosted_page(consent, 200, "Set up a payment mandate")
    return consent


def _decide(http: httpx.Client, consent: httpx.Response, **fields: str) -> httpx.Response:
    form = {name: page_field(consent, name) for name in ("mandate_id", "token", "csrf")}
    return http.post("/mock-bank/vrp-consent", data={**form, **fields})


def test_the_payer_authorises_through_the_forms(
    http: httpx.Client, merchant: MerchantClient
) -> None:
    mandate = _created(merchant)
    page = http.get(HPP, params=_params(mandate))
    assert_hosted_page(
        page, 200, "Mandate Pages Shop", "Mock UK Payments", "50.00 GBP", "Each month"
    )
    assert "Mock German Bank" not in page.text  # only banks that take mandates
    consent = _at_bank(http, mandate)
    assert _status(merchant, mandate["id"]) == "authorizing"
    done = _decide(http, consent, decision="authorise")
    assert done.status_code == 303, done.text
    location = done.headers["location"]
    assert location.startswith("https://shop.example/mandate?")
    assert parse_qs(urlsplit(location).query) == {"plan": ["gold"], "mandate_id": [mandate["id"]]}
    assert _status(merchant, mandate["id"]) == "authorized"
    # The same decision again (a double click) answers the same; the hosted page is closed.
    assert _decide(http, consent, decision="authorise").headers["location"] == location
    assert_hosted_page(http.get(HPP, params=_params(mandate)), 409, "already been decided")
    assert_hosted_page(_decide(http, consent, decision="reject"), 409, "already been decided")
    assert _status(merchant, mandate["id"]) == "authorized"


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"csrf": "f" * 64}, 403),
        ({"decision": "approve-everything"}, 403),
        ({"token": "not-a-token"}, 401),
        ({"mandate_id": str(uuid.uuid4())}, 404),
    ],
)
def test_the_consent_page_refuses_bad_forms(
    http: httpx.Client, merchant: MerchantClient, change: dict[str, str], status: int
) -> None:
    mandate = _created(merchant)
    consent = _at_bank(http, mandate)
    assert_hosted_page(_decide(http, consent, **{"decision": "authorise", **change}), status)
    assert _status(merchant, mandate["id"]) == "authorizing"


def test_the_hosted_page_refuses_bad_input(http: httpx.Client, merchant: MerchantClient) -> None:
    mandate = _created(merchant)
    assert_hosted_page(http.get(HPP, params=_params(mandate, resource_token="x")), 401)
    assert_hosted_page(http.get(HPP, params=_params(mandate, mandate_id=str(uuid.uuid4()))), 404)
    assert_hosted_page(http.get(HPP, params=_params(mandate, return_uri="/relative")), 400)
    # A valid token names its own mandate only.
    another = _created(merchant)
    assert_hosted_page(http.get(HPP, params=_params(mandate, mandate_id=another["id"])), 401)
    # A payment's resource token is not a mandate's.
    other = merchant.signed_post(
        "/v3/payments",
        {
            "amount_in_minor": 100,
            "currency": "GBP",
            "payment_method": {
                "type": "bank_transfer",
                "provider_selection": {"type": "user_selected"},
                "beneficiary": {
                    "type": "merchant_account",
                    "merchant_account_id": merchant.accounts["GBP"]["id"],
                },
            },
        },
    ).json()
    token = other["resource_token"]
    assert_hosted_page(http.get(HPP, params=_params(mandate, resource_token=token)), 401)
    assert_hosted_page(_choose(http, mandate, "mock-payments-de-redirect"), 403, "cannot be chosen")
    assert_hosted_page(_choose(http, mandate, GB_REDIRECT, csrf="0" * 64), 403)
    assert _status(merchant, mandate["id"]) == "authorization_required"
