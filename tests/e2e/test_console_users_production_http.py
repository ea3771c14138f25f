"""The console in production mode (docs/console.md, "Console users"): it signs in console
users the operator creates, never API client secrets; a console user registers and revokes
signing keys there; the operator's own sign-in and forms stay."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pay_in_helpers import payment_body
from test_console_http import Console
from test_console_scopes_http import register_key_in_console, sign_in_console_user

from support.api import MerchantClient, Operator
from support.server import RunningServer

pytestmark = pytest.mark.slow  # a production-mode server of its own


@pytest.fixture
def console(production: RunningServer) -> Iterator[Console]:
    made = Console(production.base_url)
    yield made
    made.close()


def _signature_status(merchant: MerchantClient) -> int:
    return merchant.signed_post("/v3/payments", payment_body(merchant)).status_code


def test_production_signs_in_console_users_not_client_secrets(
    console: Console, prod_operator: Operator
) -> None:
    merchant = prod_operator.new_merchant("Prod Users Ltd")
    page = console.get("/console/login")
    assert page.status_code == 200
    assert 'name="client_secret"' not in page.text
    assert 'name="email"' in page.text
    refused = console.login_merchant(merchant)
    assert refused.status_code == 403, refused.text
    assert "does not accept API client credentials" in refused.text
    assert console.get("/console").status_code == 303  # no session was started

    assert sign_in_console_user(prod_operator, console, merchant).status_code == 303
    assert console.get("/console/settings").status_code == 200


def test_a_console_user_registers_and_revokes_a_signing_key_in_production(
    console: Console, prod_operator: Operator
) -> None:
    merchant = prod_operator.new_merchant("Prod Keys Ltd")
    assert sign_in_console_user(prod_operator, console, merchant).status_code == 303
    csrf = console.csrf("/console/settings")
    added, signer = register_key_in_console(console, merchant, "prod-user-key", csrf)
    assert added.status_code == 303, added.text
    try:
        assert _signature_status(signer) != 401
        revoked = console.post(
            "/console/settings/signing-keys/revoke", {"kid": "prod-user-key"}, csrf=csrf
        )
        assert revoked.status_code == 303, revoked.text
        assert _signature_status(signer) == 401
    finally:
        signer.http.close()


def test_the_operator_still_signs_in_and_revokes_in_production(
    console: Console, prod_operator: Operator, production: RunningServer
) -> None:
    merchant = prod_operator.new_merchant("Prod Operator Ltd")
    assert console.login_operator(production.admin_token).status_code == 303
    path = f"/console/settings?merchant_id={merchant.merchant_id}"
    page = console.get(path)
    assert page.status_code == 200
    assert merchant.kid in page.text
    assert _signature_status(merchant) != 401
    revoked = console.post(
        f"/console/settings/signing-keys/revoke?merchant_id={merchant.merchant_id}",
        {"kid": merchant.kid},
        csrf=console.csrf(path),
    )
    assert revoked.status_code == 303, revoked.text
    assert _signature_status(merchant) == 401
