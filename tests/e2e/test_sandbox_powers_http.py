"""Sandbox powers in production (`core.powers`; docs/operations.md "Sandbox powers"), over
HTTP against real `bankrail serve` processes in production mode.

Without BANKRAIL_MOCK_PROVIDERS=on no payer decision of a mock provider is reachable by
anyone: the merchant's token, the payment's resource token and the pages alike. The attack
that minted balance (a payment preselecting the embedded provider, the flow started, its
form filled in with any username) leaves the balance at zero, so its payout fails. Payments
and mandates are still created and read; the provider search finds none, starting a flow is a
409 problem saying no provider is available, and the hosted pages say the same. A reference's
outcome tokens choose nothing. The staging setting turns the mock providers and outcome tokens
back on (never the sandbox routes), and turning it off again closes what a payment started
under it left open.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import httpx
import pytest
from e2e_helpers import account_by_currency, assert_problem, bearer, wait_for, wait_record_status
from mandate_helpers import MANDATES, create_mandate, mandate_body
from pay_in_helpers import EMBEDDED_FIRST_FORM, embedded_forms, payment_body
from payout_helpers import DE_IBAN, create_payout, external_beneficiary, payout_body
from test_console_http import Console

from support.api import MerchantClient, Operator, operator_of
from support.server import STAGING, RunningServer, own_server

# Each module-scoped server is a `bankrail serve` of this module's own.
pytestmark = pytest.mark.slow

EMBEDDED = "mock-payments-de-embedded"
RETURN_URI = "https://shop.example/back"
NO_PROVIDER = "No payment provider is available"
ATTACK_AMOUNT = 500_000_000


def _merchant(operator: Operator, name: str) -> MerchantClient:
    """A merchant whose return URI is allow-listed, as production mode requires."""
    merchant = operator.new_merchant(name)
    allowed = operator.put(
        f"/admin/merchants/{merchant.merchant_id}/return-uris", {"uris": [RETURN_URI]}
    )
    assert allowed.status_code == 200, allowed.text
    return merchant


def _pay_in(merchant: MerchantClient, amount: int = ATTACK_AMOUNT) -> dict[str, Any]:
    """A EUR payment preselecting the embedded provider (asserting the 201)."""
    answer = merchant.signed_post(
        "/v3/payments", payment_body(merchant, "EUR", amount, provider_id=EMBEDDED)
    )
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def _start(merchant: MerchantClient, payment_id: str) -> httpx.Response:
    return merchant.signed_post(
        f"/v3/payments/{payment_id}/authorization-flow", {"redirect": {"return_uri": RETURN_URI}}
    )


def _fill_in_form(http: httpx.Client, payment_id: str, token: str) -> httpx.Response:
    """The embedded provider's first form with the payment's resource token (unsigned, as
    the hosted page)."""
    return http.post(
        f"/v3/payments/{payment_id}/authorization-flow/actions/form",
        json=EMBEDDED_FIRST_FORM,
        headers=bearer(token),
    )


def _fill_in_every_form(http: httpx.Client, payment_id: str, token: str) -> None:
    """The embedded provider's three forms, the SMS code choosing success."""
    for body in embedded_forms("test_executed"):
        answer = http.post(
            f"/v3/payments/{payment_id}/authorization-flow/actions/form",
            json=body,
            headers=bearer(token),
        )
        assert answer.status_code == 200, answer.text


def _form_as_merchant(merchant: MerchantClient, payment_id: str) -> httpx.Response:
    return merchant.signed_post(
        f"/v3/payments/{payment_id}/authorization-flow/actions/form",
        EMBEDDED_FIRST_FORM,
    )


def _no_provider(answer: httpx.Response) -> None:
    body = assert_problem(answer, 409)
    assert NO_PROVIDER in body["detail"], body


def _available(merchant: MerchantClient, currency: str = "EUR") -> int:
    return int(account_by_currency(merchant, currency)["available_balance_in_minor"])


def _status(merchant: MerchantClient, path: str) -> str:
    answer = merchant.get(path)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["status"])


# --- production without mock providers -------------------------------------------------------


def test_the_embedded_form_cannot_mint_balance(prod_operator: Operator) -> None:
    merchant = _merchant(prod_operator, "Prod Minting Ltd")
    created = _pay_in(merchant)
    payment_id = created["id"]

    _no_provider(_start(merchant, payment_id))
    _no_provider(_form_as_merchant(merchant, payment_id))
    _no_provider(_fill_in_form(merchant.http, payment_id, created["resource_token"]))

    assert _status(merchant, f"/v3/payments/{payment_id}") == "authorization_required"
    assert _available(merchant) == 0
    payout_id = create_payout(
        merchant, payout_body(merchant, "EUR", 400_000_000, external_beneficiary(DE_IBAN))
    )
    payout = wait_record_status(merchant, f"/v3/payouts/{payout_id}", {"executed", "failed"})
    assert payout["status"] == "failed"
    assert payout["failure_reason"] == "insufficient_funds"
    assert _available(merchant) == 0


def test_no_provider_is_found_or_can_be_chosen(
    production: RunningServer, prod_operator: Operator
) -> None:
    merchant = _merchant(prod_operator, "Prod Providers Ltd")
    for path in ("/v3/payments-providers/search", "/v3/payment-providers/search"):
        found = merchant.http.post(
            path, json={"release_channel": "alpha"}, headers=bearer(merchant.token())
        )
        assert found.status_code == 200, found.text
        assert found.json() == {"items": []}
    legacy = merchant.http.get(
        "/v2/single-immediate-payments-providers",
        params={"client_id": merchant.client_id, "release_channel": "alpha"},
    )
    assert legacy.status_code == 200, legacy.text
    assert legacy.json() == {"results": []}
    assert_problem(merchant.get(f"/v3/payments-providers/{EMBEDDED}"), 404)

    chosen = merchant.signed_post(
        "/v3/payments", payment_body(merchant, "GBP", 1_000)
    )  # user_selected: created and read as ever
    assert chosen.status_code == 201, chosen.text
    payment_id = chosen.json()["id"]
    assert _status(merchant, f"/v3/payments/{payment_id}") == "authorization_required"
    _no_provider(_start(merchant, payment_id))
    _no_provider(
        merchant.signed_post(
            f"/v3/payments/{payment_id}/authorization-flow/actions/provider-selection",
            {"provider_id": "mock-payments-gb-redirect"},
        )
    )
    deposit = merchant.signed_post(
        "/v1/users/deposits",
        {
            "user_id": "u1",
            "deposit": {"deposit_id": "d-1", "amount_in_minor": 1_000, "currency": "GBP"},
            "auth_flow": {"type": "redirect", "return_uri": RETURN_URI},
        },
        idempotency_key=None,
    )
    _no_provider(deposit)


def _hosted_page(
    merchant: MerchantClient, path: str, id_param: str, created: dict[str, Any]
) -> httpx.Response:
    """The hosted page at `path` for a created payment or mandate, returning to RETURN_URI."""
    return merchant.http.get(
        path,
        params={
            id_param: created["id"],
            "resource_token": created["resource_token"],
            "return_uri": RETURN_URI,
        },
    )


def test_the_hosted_pages_say_no_bank_is_available(prod_operator: Operator) -> None:
    merchant = _merchant(prod_operator, "Prod Pages Ltd")
    created = _pay_in(merchant, 1_000)
    page = _hosted_page(merchant, "/hpp/payments", "payment_id", created)
    assert page.status_code == 409, page.text
    assert "No bank is available" in page.text
    assert NO_PROVIDER in page.text
    assert f'href="{RETURN_URI}?payment_id={created["id"]}"' in page.text

    mandate = create_mandate(merchant, mandate_body(merchant))
    mandate_page = _hosted_page(merchant, "/hpp/mandates", "mandate_id", mandate)
    assert mandate_page.status_code == 409, mandate_page.text
    assert "No bank is available" in mandate_page.text


def test_a_mandate_cannot_be_authorised(production: RunningServer, prod_operator: Operator) -> None:
    merchant = _merchant(prod_operator, "Prod Mandates Ltd")
    mandate_id = create_mandate(merchant, mandate_body(merchant))["id"]
    assert _status(merchant, f"{MANDATES}/{mandate_id}") == "authorization_required"
    _no_provider(
        merchant.signed_post(
            f"{MANDATES}/{mandate_id}/authorization-flow",
            {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}},
        )
    )
    consent = merchant.http.post(
        f"/mock-bank/api/vrp-consents/{mandate_id}/action",
        json={"action": "Authorise", "remitter_balance_in_minor": 10**12},
        headers=bearer("any-token"),
    )
    assert_problem(consent, 404)
    assert _status(merchant, f"{MANDATES}/{mandate_id}") == "authorization_required"


def test_the_sandbox_panel_is_not_in_the_console(production: RunningServer) -> None:
    console = Console(production.base_url)
    try:
        signed_in = console.login_operator(production.admin_token)
        assert signed_in.status_code == 303, signed_in.text
        page = console.get("/console/operator")
        assert page.status_code == 200, page.text
        assert "/console/operator/sandbox/" not in page.text
        token = console.csrf("/console/operator")
        refused = console.post("/console/operator/sandbox/clock", {"seconds": "60"}, csrf=token)
        assert refused.status_code == 404, refused.text
    finally:
        console.close()


# --- staging, then production again on the same database ------------------------------------


def _settle_through_the_form(merchant: MerchantClient, amount: int) -> None:
    created = _pay_in(merchant, amount)
    started = _start(merchant, created["id"])
    assert started.status_code == 200, started.text
    assert started.json()["authorization_flow"]["actions"]["next"]["type"] == "form"
    _fill_in_every_form(merchant.http, created["id"], created["resource_token"])
    wait_record_status(merchant, f"/v3/payments/{created['id']}", {"payment_settled"})


def _payout_with(merchant: MerchantClient, reference: str) -> dict[str, Any]:
    beneficiary = external_beneficiary(DE_IBAN, reference=reference)
    payout_id = create_payout(merchant, payout_body(merchant, "EUR", 100, beneficiary))
    return wait_record_status(merchant, f"/v3/payouts/{payout_id}", {"executed", "failed"})


def test_staging_turns_mock_providers_on_and_production_closes_them_again(
    pg_server: str,
) -> None:
    with own_server(pg_server, STAGING) as server, operator_of(server) as operator:
        merchant = _merchant(operator, "Staging Ltd")
        found = merchant.http.post(
            "/v3/payments-providers/search", json={}, headers=bearer(merchant.token())
        )
        assert EMBEDDED in {p["id"] for p in found.json()["items"]}
        _settle_through_the_form(merchant, 5_000)
        assert _available(merchant) == 5_000
        assert _payout_with(merchant, "fail:scheme_error")["status"] == "failed"
        assert_problem(operator.post("/sandbox/clock/advance", {"seconds": 1}), 404)
        assert "BANKRAIL_MOCK_PROVIDERS=on" in server.log_path.read_text()  # the risk, said

        # A payment left at the embedded form while staging...
        left_open = _pay_in(merchant, 7_000)
        assert _start(merchant, left_open["id"]).status_code == 200

        server.stop()
        del server.env["BANKRAIL_MOCK_PROVIDERS"]
        server.start(timeout=120)

        # ...cannot be decided once the mock providers are off, by anyone.
        _no_provider(_form_as_merchant(merchant, left_open["id"]))
        _no_provider(_fill_in_form(merchant.http, left_open["id"], left_open["resource_token"]))
        assert _status(merchant, f"/v3/payments/{left_open['id']}") == "authorizing"
        assert _available(merchant) == 5_000  # the failed payout gave its 100 back
        # And a reference is only a reference.
        assert _payout_with(merchant, "fail:scheme_error delay:600")["status"] == "executed"
        assert _available(merchant) == 5_000 - 100


def test_a_refunds_outcome_token_chooses_nothing_in_production(pg_server: str) -> None:
    with own_server(pg_server, STAGING) as server, operator_of(server) as operator:
        merchant = _merchant(operator, "Refunds Ltd")
        _settle_through_the_form(merchant, 3_000)
        payment_id = merchant.get("/v3/payments").json()["items"][0]["id"]
        server.stop()
        del server.env["BANKRAIL_MOCK_PROVIDERS"]
        server.start(timeout=120)
        answer = merchant.signed_post(
            f"/v3/payments/{payment_id}/refunds",
            {"amount_in_minor": 1_000, "reference": "fail:scheme_error"},
        )
        assert answer.status_code == 201, answer.text
        path = f"/v3/payments/{payment_id}/refunds/{answer.json()['id']}"
        assert wait_record_status(merchant, path, {"executed", "failed"})["status"] == "executed"
        wait_for(lambda: _available(merchant) == 2_000 or None, what="the refund's debit")


def test_the_trigger_cli_cannot_choose_outcomes_in_production(
    production: RunningServer, prod_operator: Operator
) -> None:
    merchant = _merchant(prod_operator, "Prod Trigger Ltd")
    # The return URI `bankrail trigger` sends, allowed so that only the missing provider stops it.
    allowed = ["https://merchant.example/return"]
    path = f"/admin/merchants/{merchant.merchant_id}/return-uris"
    assert prod_operator.put(path, {"uris": allowed}).status_code == 200
    command = [sys.executable, "-m", "bankrail", "trigger", "payment_settled"]
    options = ["--url", production.base_url, "--merchant-id", merchant.merchant_id]
    done = subprocess.run(
        [*command, *options, "--admin-token", production.admin_token, "--timeout", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    assert NO_PROVIDER in done.stderr
    made = merchant.get("/v3/payments").json()["items"]
    assert {p["status"] for p in made} <= {"authorization_required"}, made
    assert _available(merchant, "GBP") == 0
