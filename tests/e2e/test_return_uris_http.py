"""Allowed return URIs over HTTP against `bankrail serve`: the operator sets them per merchant
(`PUT /admin/merchants/{id}/return-uris` or the console's settings form), and in production
mode the hosted payment and mandate pages, the payment and mandate authorisation flows and the
legacy deposit API refuse a `return_uri` they do not cover (400: problem+json naming the
field, or an HTML page that links nowhere), so the service cannot be used as an open redirect.
Sandbox mode stores the list and keeps accepting any absolute http(s) `return_uri`.

The allow-list guards the payer's way back from a bank, so the production server here offers
the mock providers (BANKRAIL_MOCK_PROVIDERS=on, a staging deployment): without them no flow
starts at all (tests/e2e/test_sandbox_powers_http.py).
"""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from e2e_helpers import assert_invalid, assert_problem, bearer
from mandate_helpers import GB_REDIRECT, MANDATES, create_mandate
from pay_in_helpers import payment_body
from test_console_http import Console

from support.api import MerchantClient, Operator
from support.server import STAGING, RunningServer, own_server

ALLOWED = "https://shop.example/cb"
EVIL = "https://evil.example/phish"
HPP = "/hpp/payments"

REFUSED_RETURN_URIS = [
    EVIL,
    "https://shop.example/cbevil",
    "https://shop.example/",
    "https://shop.example.evil.com/cb",
    "https://shop.example@evil.example/cb",
    "https://evil.example\\@shop.example/cb",
    "http://shop.example/cb",
    "https://shop.example:8443/cb",
    "https://shop.example/cb/../admin",
    "https://shop.example/cb/%2e%2e/admin",
]
ACCEPTED_RETURN_URIS = [
    ALLOWED,
    "https://shop.example/cb/done?order=7",
    "https://SHOP.example:443/cb/",
]


@pytest.fixture(scope="module")
def production(pg_server: str) -> Iterator[RunningServer]:
    """A production-mode server for this module, with the mock providers on (the
    conftest's `prod_operator` is its operator API)."""
    with own_server(pg_server, STAGING) as running:
        yield running


@pytest.fixture
def payer(production: RunningServer) -> Iterator[httpx.Client]:
    """The payer's browser on the production server, not following redirects."""
    client = httpx.Client(base_url=production.base_url, timeout=30, follow_redirects=False)
    yield client
    client.close()


def _allow(operator: Operator, merchant: MerchantClient, *uris: str) -> httpx.Response:
    return operator.put(
        f"/admin/merchants/{merchant.merchant_id}/return-uris", {"uris": list(uris)}
    )


def _allowed_merchant(operator: Operator, name: str = "Return Shop Ltd") -> MerchantClient:
    merchant = operator.new_merchant(name, currencies=("GBP",))
    answer = _allow(operator, merchant, ALLOWED)
    assert answer.status_code == 200, answer.text
    return merchant


def _payment(merchant: MerchantClient) -> dict[str, Any]:
    answer = merchant.signed_post("/v3/payments", payment_body(merchant))
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def _flow(
    merchant: MerchantClient, payment_id: str, return_uri: str | None, token: str | None = None
) -> httpx.Response:
    body: dict[str, Any] = {"provider_selection": {}}
    if return_uri is not None:
        body["redirect"] = {"return_uri": return_uri}
    return merchant.signed_post(f"/v3/payments/{payment_id}/authorization-flow", body, token=token)


def _status(merchant: MerchantClient, payment_id: str) -> str:
    answer = merchant.get(f"/v3/payments/{payment_id}")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["status"])


def _hpp_params(payment: dict[str, Any], return_uri: str) -> dict[str, str]:
    return {
        "payment_id": payment["id"],
        "resource_token": payment["resource_token"],
        "return_uri": return_uri,
    }


def _assert_refused_page(answer: httpx.Response, return_uri: str) -> None:
    """A 400 HTML page that names the problem and neither links nor redirects anywhere."""
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    assert "location" not in answer.headers
    text = html.unescape(answer.text)
    assert "This payment link is not valid" in text
    assert "not one this merchant has registered" in text
    assert return_uri not in text
    assert "evil" not in text
    assert "http-equiv" not in text
    assert not re.search(r'href="https?:', answer.text), answer.text


# --- the operator call -------------------------------------------------------------------------


def test_the_operator_sets_and_replaces_the_allowed_return_uris(prod_operator: Operator) -> None:
    merchant = prod_operator.new_merchant("Return Settings Ltd", currencies=("GBP",))
    path = f"/admin/merchants/{merchant.merchant_id}/return-uris"
    answer = prod_operator.put(
        path, {"uris": [f"  {ALLOWED}  ", "https://shop.example:8443/", ALLOWED]}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"uris": [ALLOWED, "https://shop.example:8443/"]}
    assert prod_operator.put(path, {"uris": []}).json() == {"uris": []}
    assert prod_operator.put(path, {"uris": [ALLOWED]}).json() == {"uris": [ALLOWED]}


@pytest.mark.parametrize(
    "uri",
    [
        "http://shop.example/cb",
        "https://shop.example/cb?order=1",
        "https://shop.example/cb#top",
        "https://user@shop.example/cb",
        "https://shop.example/a/../cb",
        "/cb",
        "",
    ],
)
def test_an_allowed_return_uri_must_be_absolute_https_without_query(
    prod_operator: Operator, payer: httpx.Client, uri: str
) -> None:
    merchant = _allowed_merchant(prod_operator, "Return Bad Entry Ltd")
    answer = _allow(prod_operator, merchant, "https://other.example/", uri)
    body = assert_invalid(answer, "uris[1]")
    assert list(body["errors"]) == ["uris[1]"]
    # Nothing was stored: the earlier list still decides.
    payment = _payment(merchant)
    assert _flow(merchant, payment["id"], ALLOWED).status_code == 200


def test_the_return_uris_call_checks_its_body_merchant_and_token(
    production: RunningServer, prod_operator: Operator
) -> None:
    merchant = prod_operator.new_merchant("Return Body Ltd", currencies=("GBP",))
    path = f"/admin/merchants/{merchant.merchant_id}/return-uris"
    assert_invalid(prod_operator.put(path, {}), "uris")
    assert_invalid(prod_operator.put(path, {"uris": ALLOWED}), "uris")
    assert_invalid(prod_operator.put(path, {"uris": [ALLOWED], "extra": 1}), "extra")
    many = [f"https://shop.example/{n}" for n in range(51)]
    assert_invalid(prod_operator.put(path, {"uris": many}), "uris")
    unknown = prod_operator.put(f"/admin/merchants/{uuid.uuid4()}/return-uris", {"uris": []})
    assert_problem(unknown, 404)
    with httpx.Client(base_url=production.base_url, timeout=30) as http:
        assert_problem(http.put(path, json={"uris": [EVIL]}), 401)
        assert_problem(http.put(path, json={"uris": [EVIL]}, headers=bearer("nope")), 401)
        merchant_token = bearer(merchant.token())
        assert_problem(http.put(path, json={"uris": [EVIL]}, headers=merchant_token), 401)


# --- the authorisation flow --------------------------------------------------------------------


@pytest.mark.parametrize("return_uri", REFUSED_RETURN_URIS)
def test_production_refuses_a_return_uri_not_allowed(
    prod_operator: Operator, return_uri: str
) -> None:
    merchant = _allowed_merchant(prod_operator)
    payment = _payment(merchant)
    body = assert_invalid(_flow(merchant, payment["id"], return_uri), "redirect.return_uri")
    assert list(body["errors"]) == ["redirect.return_uri"]
    assert _status(merchant, payment["id"]) == "authorization_required"


@pytest.mark.parametrize("return_uri", ACCEPTED_RETURN_URIS)
def test_production_accepts_an_allowed_return_uri(prod_operator: Operator, return_uri: str) -> None:
    merchant = _allowed_merchant(prod_operator)
    payment = _payment(merchant)
    answer = _flow(merchant, payment["id"], return_uri)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "authorizing"


def test_the_allow_list_is_per_merchant_and_empty_allows_nothing(
    prod_operator: Operator,
) -> None:
    listed = _allowed_merchant(prod_operator, "Return Listed Ltd")
    unlisted = prod_operator.new_merchant("Return Unlisted Ltd", currencies=("GBP",))
    payment = _payment(unlisted)
    # Another merchant's list does not help, and with none every return_uri is refused.
    assert_invalid(_flow(unlisted, payment["id"], ALLOWED), "redirect.return_uri")
    # The payer's resource token is held to the same rule.
    as_payer = _flow(unlisted, payment["id"], ALLOWED, token=payment["resource_token"])
    assert_invalid(as_payer, "redirect.return_uri")
    assert _status(unlisted, payment["id"]) == "authorization_required"
    # A flow without a return_uri sends the payer nowhere, so it needs none.
    assert _flow(unlisted, payment["id"], None).status_code == 200
    assert _flow(listed, _payment(listed)["id"], ALLOWED).status_code == 200


def test_the_legacy_deposit_api_refuses_a_return_uri_not_allowed(
    prod_operator: Operator,
) -> None:
    merchant = _allowed_merchant(prod_operator, "Return Legacy Ltd")

    def deposit(deposit_id: str, return_uri: str) -> httpx.Response:
        body = {
            "user_id": "u1",
            "deposit": {"deposit_id": deposit_id, "amount_in_minor": 1_000, "currency": "GBP"},
            "auth_flow": {"type": "redirect", "return_uri": return_uri},
        }
        return merchant.signed_post("/v1/users/deposits", body, idempotency_key=None)

    refused = assert_invalid(deposit("d-evil", EVIL), "auth_flow.return_uri")
    assert list(refused["errors"]) == ["auth_flow.return_uri"]
    assert merchant.get("/v3/merchant-accounts").status_code == 200
    accepted = deposit("d-good", f"{ALLOWED}/deposit")
    assert accepted.status_code == 201, accepted.text


# --- the hosted payment page -------------------------------------------------------------------


def test_the_hosted_page_refuses_a_return_uri_not_allowed(
    prod_operator: Operator, payer: httpx.Client
) -> None:
    merchant = _allowed_merchant(prod_operator, "Return Hosted Ltd")
    payment = _payment(merchant)
    for return_uri in REFUSED_RETURN_URIS:
        page = payer.get(HPP, params=_hpp_params(payment, return_uri))
        _assert_refused_page(page, return_uri)
    # The same link with an allowed return_uri shows the page, whose cancel link goes there.
    page = payer.get(HPP, params=_hpp_params(payment, f"{ALLOWED}/done"))
    assert page.status_code == 200, page.text
    assert f'href="{ALLOWED}/done?payment_id={payment["id"]}"' in page.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    # Choosing a bank with a forged return_uri is refused and changes nothing.
    form = {
        "resource_token": payment["resource_token"],
        "return_uri": EVIL,
        "csrf": csrf.group(1),
        "provider_id": "mock-payments-gb-redirect",
    }
    chosen = payer.post(f"{HPP}/{payment['id']}/provider", data=form)
    _assert_refused_page(chosen, EVIL)
    assert _status(merchant, payment["id"]) == "authorization_required"
    # The result page, which links back (and forwards the payer once settled), too.
    result = payer.get(
        f"{HPP}/{payment['id']}/result",
        params={"resource_token": payment["resource_token"], "return_uri": EVIL},
    )
    _assert_refused_page(result, EVIL)
    result = payer.get(
        f"{HPP}/{payment['id']}/result",
        params={"resource_token": payment["resource_token"], "return_uri": ALLOWED},
    )
    assert result.status_code == 200, result.text
    assert f'href="{ALLOWED}?payment_id={payment["id"]}"' in result.text


# --- mandates ----------------------------------------------------------------------------------


def _mandate_flow(merchant: MerchantClient, mandate_id: str, return_uri: str) -> httpx.Response:
    body = {"provider_selection": {}, "redirect": {"return_uri": return_uri}}
    return merchant.signed_post(f"{MANDATES}/{mandate_id}/authorization-flow", body)


def _mandate_status(merchant: MerchantClient, mandate_id: str) -> str:
    answer = merchant.get(f"{MANDATES}/{mandate_id}")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["status"])


@pytest.mark.parametrize("return_uri", REFUSED_RETURN_URIS)
def test_production_refuses_a_mandate_return_uri_not_allowed(
    prod_operator: Operator, return_uri: str
) -> None:
    merchant = _allowed_merchant(prod_operator, "Return Mandate Ltd")
    mandate = create_mandate(merchant)
    answer = _mandate_flow(merchant, mandate["id"], return_uri)
    body = assert_invalid(answer, "redirect.return_uri")
    assert list(body["errors"]) == ["redirect.return_uri"]
    assert _mandate_status(merchant, mandate["id"]) == "authorization_required"


@pytest.mark.parametrize("return_uri", ACCEPTED_RETURN_URIS)
def test_production_accepts_an_allowed_mandate_return_uri(
    prod_operator: Operator, return_uri: str
) -> None:
    merchant = _allowed_merchant(prod_operator, "Return Mandate Ltd")
    mandate = create_mandate(merchant)
    answer = _mandate_flow(merchant, mandate["id"], return_uri)
    assert answer.status_code == 200, answer.text
    assert _mandate_status(merchant, mandate["id"]) == "authorizing"


def test_the_hosted_mandate_page_refuses_a_return_uri_not_allowed(
    prod_operator: Operator, payer: httpx.Client
) -> None:
    merchant = _allowed_merchant(prod_operator, "Return Mandate Page Ltd")
    mandate = create_mandate(merchant)

    def params(return_uri: str) -> dict[str, str]:
        return {
            "mandate_id": mandate["id"],
            "resource_token": mandate["resource_token"],
            "return_uri": return_uri,
        }

    for return_uri in REFUSED_RETURN_URIS:
        _assert_refused_page(payer.get("/hpp/mandates", params=params(return_uri)), return_uri)
    # An allowed return_uri shows the page, whose cancel link goes there.
    page = payer.get("/hpp/mandates", params=params(f"{ALLOWED}/done"))
    assert page.status_code == 200, page.text
    assert f'href="{ALLOWED}/done?mandate_id={mandate["id"]}"' in page.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    # Choosing the bank with a forged return_uri is refused and changes nothing.
    form = {
        "resource_token": mandate["resource_token"],
        "return_uri": EVIL,
        "csrf": csrf.group(1),
        "provider_id": GB_REDIRECT,
    }
    _assert_refused_page(payer.post(f"/hpp/mandates/{mandate['id']}/provider", data=form), EVIL)
    assert _mandate_status(merchant, mandate["id"]) == "authorization_required"


# --- the console -------------------------------------------------------------------------------


def test_the_operator_sets_the_allow_list_in_the_console_and_production_enforces_it(
    production: RunningServer, prod_operator: Operator
) -> None:
    merchant = prod_operator.new_merchant("Return Console Ltd", currencies=("GBP",))
    console = Console(production.base_url)
    try:
        assert console.login_operator(production.admin_token).status_code == 303
        settings = f"/console/settings?merchant_id={merchant.merchant_id}"
        token = console.csrf(settings)
        saved = console.post(
            f"/console/settings/return-uris?merchant_id={merchant.merchant_id}",
            {"return_uris": f"{ALLOWED}\r\n\r\nhttps://shop.example:8443/other\r\n"},
            csrf=token,
        )
        assert saved.status_code == 303, saved.text
        assert saved.headers["location"] == settings
        page = console.get(settings)
        assert "Allowed return URIs saved: 2 URIs." in html.unescape(page.text)
        assert f"{ALLOWED}\nhttps://shop.example:8443/other</textarea>" in page.text
    finally:
        console.close()
    payment = _payment(merchant)
    assert_invalid(_flow(merchant, payment["id"], EVIL), "redirect.return_uri")
    assert _flow(merchant, payment["id"], "https://shop.example:8443/other/x").status_code == 200


# --- sandbox mode ------------------------------------------------------------------------------


def test_the_sandbox_accepts_any_return_uri_even_with_an_allow_list(
    server: RunningServer, operator: Operator
) -> None:
    merchant = _allowed_merchant(operator, "Return Sandbox Ltd")
    payment = _payment(merchant)
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        page = http.get(HPP, params=_hpp_params(payment, EVIL))
    assert page.status_code == 200, page.text
    assert f'href="{EVIL}?payment_id={payment["id"]}"' in page.text
    answer = _flow(merchant, payment["id"], "http://localhost:3000/back")
    assert answer.status_code == 200, answer.text


def test_the_console_return_uri_form_is_the_operators_checks_its_lines_and_csrf(
    server: RunningServer, operator: Operator
) -> None:
    merchant = operator.new_merchant("Return Form Ltd", currencies=("GBP",))
    own = Console(server.base_url)
    console = Console(server.base_url)
    try:
        # The merchant sees its list but cannot change it.
        assert own.login_merchant(merchant).status_code == 303
        page = own.get("/console/settings")
        assert page.status_code == 200
        assert "Allowed return URIs" in page.text
        assert 'name="return_uris"' not in page.text
        answer = own.post(
            "/console/settings/return-uris",
            {"return_uris": EVIL},
            csrf=own.csrf("/console/settings"),
        )
        assert answer.status_code == 403, answer.text
        # The operator's form: a bad line is named, a missing CSRF token refused.
        assert console.login_operator(server.admin_token).status_code == 303
        settings = f"/console/settings?merchant_id={merchant.merchant_id}"
        action = f"/console/settings/return-uris?merchant_id={merchant.merchant_id}"
        token = console.csrf(settings)
        bad = console.post(action, {"return_uris": f"{ALLOWED}\nhttp://shop.example/x"}, csrf=token)
        assert bad.status_code == 400, bad.text
        assert "line 2 must be an absolute https URI" in html.unescape(bad.text)
        assert f"{ALLOWED}\nhttp://shop.example/x</textarea>" in bad.text
        assert console.post(action, {"return_uris": ALLOWED}, csrf=None).status_code == 403
        assert console.post(action, {"return_uris": ALLOWED}, csrf="forged").status_code == 403
        # Nothing was stored by any of these.
        assert "None yet." in own.get("/console/settings").text
        assert console.post(action, {"return_uris": ALLOWED}, csrf=token).status_code == 303
        shown = own.get("/console/settings").text
        assert f"<li><code>{ALLOWED}</code></li>" in shown
    finally:
        own.close()
        console.close()


# --- a journey or hosted page asked for at creation (fidelity P3, P4) --------------------------


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (
            {"authorization_flow": {"provider_selection": {}, "redirect": {"return_uri": EVIL}}},
            "authorization_flow.redirect.return_uri",
        ),
        ({"hosted_page": {"return_uri": EVIL}}, "hosted_page.return_uri"),
    ],
    ids=["authorization-flow", "hosted-page"],
)
def test_a_creation_names_only_allowed_return_uris_in_production(
    prod_operator: Operator, extra: dict[str, Any], field: str
) -> None:
    merchant = _allowed_merchant(prod_operator, "Creation Return Ltd")
    refused = merchant.signed_post("/v3/payments", payment_body(merchant, **extra))
    assert_invalid(refused, field)
    listed = merchant.get("/v3/payments")
    assert listed.status_code == 200, listed.text
    assert listed.json()["items"] == []  # nothing was created
    allowed = {
        name: {**value, "redirect": {"return_uri": ALLOWED}}
        if name == "authorization_flow"
        else {"return_uri": ALLOWED}
        for name, value in extra.items()
    }
    answer = merchant.signed_post("/v3/payments", payment_body(merchant, **allowed))
    assert answer.status_code == 201, answer.text
