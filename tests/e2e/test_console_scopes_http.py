"""The console beside the API's scopes, console users and revocation, over HTTP against the
session's sandbox `bankrail serve` (docs/console.md, docs/operations.md "Console users and
revocation"): a console session may do only what its client's scopes allow on the API; the
operator creates console users whose set-password link works once; signing keys and clients
are revoked through the admin API and the console's forms, and what they authenticated
(signatures, tokens, secrets, console sessions) stops working at once."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from e2e_helpers import assert_invalid, assert_problem, bearer
from pay_in_helpers import authorised_pay_in, payment_body, settled_payment
from test_console_http import CSRF, NONCE, Console

from bankrail.security import signing
from support.api import MerchantClient, Operator
from support.server import RunningServer

SWEEPING = "recurring_payments:sweeping"


@pytest.fixture
def console(server: RunningServer) -> Iterator[Console]:
    made = Console(server.base_url)
    yield made
    made.close()


def _text(page: httpx.Response) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.text)))


def client_of(operator: Operator, merchant: MerchantClient, scopes: list[str]) -> MerchantClient:
    """Another API client of the same merchant, with these scopes (closed by the caller)."""
    made = operator.post(f"/admin/merchants/{merchant.merchant_id}/clients", {"scopes": scopes})
    assert made.status_code == 201, made.text
    body = made.json()
    return replace(merchant, client_id=body["client_id"], client_secret=body["client_secret"])


def _refunds(merchant: MerchantClient, payment_id: str) -> list[dict[str, Any]]:
    answer = merchant.get(f"/v3/payments/{payment_id}/refunds")
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


def register_key_in_console(
    console: Console, merchant: MerchantClient, kid: str, csrf: str | None
) -> tuple[httpx.Response, MerchantClient]:
    """Submit a new key `kid` on the console's settings form: the form's answer, and the
    merchant signing with that key (the caller closes its `http`)."""
    key = signing.generate_private_key()
    answer = console.post(
        "/console/settings/signing-keys",
        {"kid": kid, "public_key_pem": signing.public_key_pem(key.public_key())},
        csrf=csrf,
    )
    return answer, replace(merchant, kid=kid, private_key_pem=signing.private_key_pem(key))


def _new_payment(merchant: MerchantClient) -> httpx.Response:
    """A signed POST /v3/payments with the merchant's registered key."""
    return merchant.signed_post("/v3/payments", payment_body(merchant))


def _csrf_of(console: Console, path: str) -> str:
    page = console.get(path)
    assert page.status_code == 200, page.text
    found = CSRF.search(page.text)
    assert found, page.text
    return found.group(1)


def test_a_sweeping_only_client_can_do_in_the_console_only_what_its_scopes_allow(
    console: Console, operator: Operator
) -> None:
    merchant = operator.new_merchant("Scoped Console Ltd")
    payer = {"id": "scoped-console-payer", "name": "Sam Payer"}
    payment_id = settled_payment(merchant, authorised_pay_in(merchant, 2_000, payer))["id"]
    sweeper = client_of(operator, merchant, [SWEEPING])
    try:
        refused_on_api = sweeper.get(f"/v3/payments/{payment_id}")
        assert_problem(refused_on_api, 403)
        signed_in = console.login_merchant(sweeper)
        assert signed_in.status_code == 303, signed_in.text

        # What the sweeping scope allows on the API, the console shows.
        csrf = _csrf_of(console, "/console/mandates")
        for path in (
            "/console",
            "/console/payments",
            f"/console/payments/{payment_id}",
            "/console/payouts",
            "/console/webhooks",
            "/console/settings",
        ):
            page = console.get(path)
            assert page.status_code == 403, (path, page.text)
            assert f"scopes ({SWEEPING}) do not allow this" in _text(page)

        refund = console.post(
            f"/console/payments/{payment_id}/refunds",
            {"amount": "5.00", "reference": "stolen", "idempotency_key": str(uuid.uuid4())},
            csrf=csrf,
        )
        assert refund.status_code == 403, refund.text
        assert _refunds(merchant, payment_id) == []

        registered, forged = register_key_in_console(console, merchant, "sweeper-key", csrf)
        assert registered.status_code == 403, registered.text
        try:
            answer = _new_payment(forged)
            assert_problem(answer, 401)
            assert "no signing key with kid 'sweeper-key'" in answer.json()["detail"]
        finally:
            forged.http.close()

        for form, field, value in (
            ("/console/settings/signing-keys/revoke", "kid", merchant.kid),
            ("/console/settings/clients/revoke", "client_id", merchant.client_id),
            ("/console/settings/webhooks", "payments_uri", "https://attacker.example/hook"),
        ):
            assert console.post(form, {field: value}, csrf=csrf).status_code == 403, form
        assert _new_payment(merchant).status_code == 201
    finally:
        sweeper.http.close()


def test_the_operator_revokes_a_signing_key_and_a_client_through_the_admin_api(
    console: Console, operator: Operator, server: RunningServer
) -> None:
    merchant = operator.new_merchant("Revoked Over API Ltd")
    other = operator.new_merchant("Bystander Ltd")
    assert _new_payment(merchant).status_code == 201
    keys = f"/admin/merchants/{merchant.merchant_id}/signing-keys"

    with httpx.Client(base_url=server.base_url) as anonymous:
        assert_problem(anonymous.delete(f"{keys}/{merchant.kid}"), 401)
    assert_problem(
        operator.http.delete(f"/admin/merchants/{other.merchant_id}/signing-keys/{merchant.kid}"),
        404,
    )
    assert_problem(operator.http.delete(f"{keys}/no-such-kid"), 404)
    assert_invalid(operator.http.delete(f"/admin/merchants/not-a-uuid/signing-keys/{merchant.kid}"))

    revoked = operator.http.delete(f"{keys}/{merchant.kid}")
    assert revoked.status_code == 204, revoked.text
    assert revoked.content == b""
    refused = _new_payment(merchant)  # at once, on the host that revoked
    assert_problem(refused, 401)
    assert "no signing key with kid" in refused.json()["detail"]
    assert_problem(operator.http.delete(f"{keys}/{merchant.kid}"), 404)
    fresh_pem = signing.public_key_pem(signing.generate_private_key().public_key())
    again = operator.post(keys, {"kid": merchant.kid, "public_key_pem": fresh_pem})
    assert_problem(again, 409)

    token = merchant.token()
    assert merchant.get("/v3/merchant-accounts").status_code == 200
    assert console.login_merchant(merchant).status_code == 303
    assert console.get("/console/settings").status_code == 200
    clients = f"/admin/merchants/{merchant.merchant_id}/clients"
    assert_problem(
        operator.http.delete(f"/admin/merchants/{other.merchant_id}/clients/{merchant.client_id}"),
        404,
    )
    assert other.get("/v3/merchant-accounts").status_code == 200
    gone = operator.http.delete(f"{clients}/{merchant.client_id}")
    assert gone.status_code == 204, gone.text
    assert_problem(merchant.http.get("/v3/merchant-accounts", headers=bearer(token)), 401)
    denied = merchant.http.post(
        "/connect/token",
        data={
            "grant_type": "client_credentials",
            "client_id": merchant.client_id,
            "client_secret": merchant.client_secret,
        },
    )
    assert (denied.status_code, denied.json()["error"]) == (400, "invalid_client")
    after = console.get("/console/settings")
    assert after.status_code == 303
    assert after.headers["location"].startswith("/console/login")
    assert console.login_merchant(merchant).status_code == 401
    assert_problem(operator.http.delete(f"{clients}/{merchant.client_id}"), 404)
    assert other.get("/v3/merchant-accounts").status_code == 200


def test_the_console_revokes_keys_and_clients_with_its_csrf_protected_forms(
    console: Console, operator: Operator
) -> None:
    merchant = operator.new_merchant("Revoked In Console Ltd")
    spare = client_of(operator, merchant, ["payments"])
    try:
        spare_token = spare.token()
        assert console.login_merchant(merchant).status_code == 303
        page = console.get("/console/settings")
        assert page.status_code == 200
        for shown in (merchant.kid, merchant.client_id, spare.client_id):
            assert shown in page.text
        csrf = _csrf_of(console, "/console/settings")

        for forged in (None, "forged-token"):
            refused = console.post(
                "/console/settings/signing-keys/revoke", {"kid": merchant.kid}, csrf=forged
            )
            assert refused.status_code == 403, refused.text
            refused = console.post(
                "/console/settings/clients/revoke", {"client_id": spare.client_id}, csrf=forged
            )
            assert refused.status_code == 403, refused.text
        assert _new_payment(merchant).status_code == 201
        assert spare.get("/v3/merchant-accounts").status_code == 200

        done = console.post(
            "/console/settings/signing-keys/revoke", {"kid": merchant.kid}, csrf=csrf
        )
        assert done.status_code == 303, done.text
        assert f"Key {merchant.kid} revoked." in _text(console.get("/console/settings"))
        assert merchant.kid not in console.get("/console/settings").text
        assert_problem(_new_payment(merchant), 401)
        unknown = console.post(
            "/console/settings/signing-keys/revoke", {"kid": merchant.kid}, csrf=csrf
        )
        assert unknown.status_code == 404, unknown.text

        done = console.post(
            "/console/settings/clients/revoke", {"client_id": spare.client_id}, csrf=csrf
        )
        assert done.status_code == 303, done.text
        assert_problem(spare.http.get("/v3/merchant-accounts", headers=bearer(spare_token)), 401)

        # Revoking the session's own client ends the session too.
        own = console.post(
            "/console/settings/clients/revoke", {"client_id": merchant.client_id}, csrf=csrf
        )
        assert own.status_code == 303, own.text
        assert own.headers["location"] == "/console/login"
        assert console.get("/console/settings").status_code == 303
    finally:
        spare.http.close()


def create_console_user(
    operator: Operator, merchant_id: str, email: str, **extra: Any
) -> dict[str, Any]:
    """POST /admin/merchants/{id}/console-users, expecting 201."""
    made = operator.post(f"/admin/merchants/{merchant_id}/console-users", {"email": email, **extra})
    assert made.status_code == 201, made.text
    body: dict[str, Any] = made.json()
    return body


def set_password(console: Console, url: str, password: str) -> httpx.Response:
    """Follow a set-password link and submit the form with `password` twice."""
    path = httpx.URL(url).raw_path.decode()
    page = console.http.get(path)
    assert page.status_code == 200, page.text
    token = re.search(r'name="token" value="([^"]+)"', page.text)
    csrf = CSRF.search(page.text)
    assert token, page.text
    assert csrf, page.text
    return console.post(
        "/console/set-password",
        {
            "token": html.unescape(token.group(1)),
            "password": password,
            "password_confirm": password,
        },
        csrf=csrf.group(1),
    )


def login_user(console: Console, email: str, password: str) -> httpx.Response:
    """Sign in to the console as a console user."""
    csrf = console.csrf("/console/login")
    return console.post(
        "/console/login", {"kind": "user", "email": email, "password": password}, csrf=csrf
    )


def sign_in_console_user(
    operator: Operator, console: Console, merchant: MerchantClient, **extra: Any
) -> httpx.Response:
    """Create a console user of the merchant, set their password and sign them in (the
    answer of the sign-in)."""
    email = f"user-{uuid.uuid4().hex[:12]}@shop.example"
    user = create_console_user(operator, merchant.merchant_id, email, **extra)
    password = f"pw-{uuid.uuid4().hex}"
    assert set_password(console, user["set_password_url"], password).status_code == 303
    return login_user(console, email, password)


def test_console_users_set_their_password_once_and_act_with_their_scopes(
    console: Console, operator: Operator, server: RunningServer
) -> None:
    merchant = operator.new_merchant("Console Users Ltd")
    payer = {"id": "console-user-payer", "name": "Una Payer"}
    payment_id = settled_payment(merchant, authorised_pay_in(merchant, 2_000, payer))["id"]
    users = f"/admin/merchants/{merchant.merchant_id}/console-users"
    email = f"finance-{uuid.uuid4().hex[:8]}@shop.example"

    with httpx.Client(base_url=server.base_url) as anonymous:
        assert_problem(anonymous.post(users, json={"email": email}), 401)
    assert_invalid(operator.post(users, {"email": "not an email"}), "email")
    assert_problem(
        operator.post(f"/admin/merchants/{uuid.uuid4()}/console-users", {"email": email}), 404
    )
    user = create_console_user(operator, merchant.merchant_id, email)
    assert user["email"] == email
    assert user["merchant_id"] == merchant.merchant_id
    assert user["scopes"] == ["payments", "recurring_payments:commercial", SWEEPING]
    assert user["set_password_url"].startswith(f"{server.base_url}/console/set-password?token=")
    assert_problem(operator.post(users, {"email": email.upper()}), 409)

    assert login_user(console, email, "whatever-it-is-now").status_code == 401  # none set yet
    path = httpx.URL(user["set_password_url"]).raw_path.decode()
    page = console.http.get(path)
    csrf = CSRF.search(page.text)
    assert csrf
    token = httpx.URL(user["set_password_url"]).params["token"]
    short = console.post(
        "/console/set-password",
        {"token": token, "password": "short", "password_confirm": "short"},
        csrf=csrf.group(1),
    )
    assert short.status_code == 400
    assert "at least 12 characters" in _text(short)
    done = set_password(console, user["set_password_url"], "correct horse battery staple")
    assert done.status_code == 303, done.text
    assert done.headers["location"] == "/console/login"
    spent = console.http.get(path)
    assert spent.status_code == 400
    assert "used already or has expired" in _text(spent)
    reused = console.post(
        "/console/set-password",
        {
            "token": token,
            "password": "another long password",
            "password_confirm": "another long password",
        },
        csrf=csrf.group(1),
    )
    assert reused.status_code == 400

    assert login_user(console, email, "not the password at all").status_code == 401
    signed_in = login_user(console, email.upper(), "correct horse battery staple")
    assert signed_in.status_code == 303, signed_in.text
    page = console.get(f"/console/payments/{payment_id}")
    assert page.status_code == 200
    nonce = NONCE.search(page.text)
    csrf = CSRF.search(page.text)
    assert nonce
    assert csrf
    refunded = console.post(
        f"/console/payments/{payment_id}/refunds",
        {"amount": "5.00", "reference": "by console user", "idempotency_key": nonce.group(1)},
        csrf=csrf.group(1),
    )
    assert refunded.status_code == 303, refunded.text
    assert [r["amount_in_minor"] for r in _refunds(merchant, payment_id)] == [500]


def test_a_console_user_with_fewer_scopes_is_refused_what_they_do_not_allow(
    console: Console, operator: Operator
) -> None:
    merchant = operator.new_merchant("Narrow User Ltd")
    email = f"sweeps-{uuid.uuid4().hex[:8]}@shop.example"
    user = create_console_user(operator, merchant.merchant_id, email, scopes=[SWEEPING])
    assert user["scopes"] == [SWEEPING]
    assert (
        set_password(console, user["set_password_url"], "a long enough password").status_code == 303
    )
    assert login_user(console, email, "a long enough password").status_code == 303
    assert console.get("/console/mandates").status_code == 200
    settings = console.get("/console/settings")
    assert settings.status_code == 403
    assert f"scopes ({SWEEPING}) do not allow this" in _text(settings)
