"""The developer console (`/console`) over plain HTTP against `bankrail serve`: sign-in, the
session cookie, CSRF, per-merchant visibility, the operator's view, and every form's errors.
The browser walk-through is in tests/browser/test_console_browser.py."""

from __future__ import annotations

import base64
import html
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from e2e_helpers import (
    account_by_currency,
    identifier,
    service_now,
    wait_for,
    wait_record_status,
)
from mandate_helpers import authorised_mandate, mandate_body, mandate_payment
from pay_in_helpers import authorised_pay_in, settled_payment

from bankrail.security import signing
from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver
from support.server import RunningServer

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
NONCE = re.compile(r'name="idempotency_key" value="([^"]+)"')
GB_IBAN = "GB29NWBK60161331926819"


class Console:
    """One browser's worth of console session: a cookie jar and the forms' CSRF tokens."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(
            base_url=base_url,
            timeout=30,
            follow_redirects=False,
            event_hooks={"response": [self._as_on_loopback]},
        )

    def _as_on_loopback(self, _response: httpx.Response) -> None:
        """Keep sending `Secure` cookies (production mode sets them) over plain http, as a
        browser does for http://127.0.0.1, where every server under test listens: the jar
        (http.cookiejar) would only send them over https."""
        for cookie in self.http.cookies.jar:
            cookie.secure = False

    def close(self) -> None:
        self.http.close()

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.http.get(path, params=params) if params else self.http.get(path)

    def csrf(self, path: str = "/console/login") -> str:
        """The CSRF token of the forms on `path`."""
        page = self.get(path)
        assert page.status_code == 200, page.text
        found = CSRF.search(page.text)
        assert found, page.text
        return found.group(1)

    def post(self, path: str, data: dict[str, str], *, csrf: str | None) -> httpx.Response:
        """Submit a form with this CSRF token (None: without one)."""
        fields = dict(data)
        if csrf is not None:
            fields["csrf_token"] = csrf
        return self.http.post(path, data=fields)

    def login_merchant(self, merchant: MerchantClient, secret: str | None = None) -> httpx.Response:
        token = self.csrf("/console/login")
        return self.http.post(
            "/console/login",
            data={
                "csrf_token": token,
                "kind": "merchant",
                "client_id": merchant.client_id,
                "client_secret": secret if secret is not None else merchant.client_secret,
            },
        )

    def login_operator(self, admin_token: str) -> httpx.Response:
        token = self.csrf("/console/login")
        return self.http.post(
            "/console/login",
            data={"csrf_token": token, "kind": "operator", "admin_token": admin_token},
        )


@pytest.fixture
def console(server: RunningServer) -> Iterator[Console]:
    made = Console(server.base_url)
    yield made
    made.close()


@pytest.fixture
def other_console(server: RunningServer) -> Iterator[Console]:
    made = Console(server.base_url)
    yield made
    made.close()


def _signed_in(console: Console, merchant: MerchantClient) -> Console:
    answer = console.login_merchant(merchant)
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/console"
    return console


def _text(page: httpx.Response) -> str:
    """The page's text with tags stripped and entities decoded (for content checks)."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.text)))


def _webhook_inputs(page: httpx.Response) -> tuple[str, str]:
    def value(name: str) -> str:
        found = re.search(rf'name="{name}" type="url" value="([^"]*)"', page.text)
        assert found, page.text
        return html.unescape(found.group(1))

    return value("payments_uri"), value("payouts_uri")


def _payout(merchant: MerchantClient, amount: int = 500, name: str = "Jane Doe") -> str:
    body = {
        "merchant_account_id": merchant.accounts["GBP"]["id"],
        "amount_in_minor": amount,
        "currency": "GBP",
        "beneficiary": {
            "type": "external_account",
            "reference": "console test",
            "account_holder_name": name,
            "account_identifier": {"type": "iban", "iban": GB_IBAN},
        },
    }
    answer = merchant.signed_post("/v3/payouts", body)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


def _payment(merchant: MerchantClient, amount: int = 1234) -> str:
    body = {
        "amount_in_minor": amount,
        "currency": "GBP",
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": {"type": "user_selected"},
            "beneficiary": {
                "type": "merchant_account",
                "merchant_account_id": merchant.accounts["GBP"]["id"],
            },
        },
        "user": {"id": "console-payer", "name": "Pat Payer"},
    }
    answer = merchant.signed_post("/v3/payments", body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def _deliveries(operator: Operator, merchant: MerchantClient) -> list[dict[str, Any]]:
    answer = operator.get("/admin/webhook-deliveries", merchant_id=merchant.merchant_id)
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


def _session_cookie(console: Console) -> str:
    value = console.http.cookies.get("bankrail_console", path="/console")
    assert value, console.http.cookies
    return str(value)


# --- signing in ---------------------------------------------------------------------------------


def test_login_page_is_accessible_html_with_an_anonymous_session(console: Console) -> None:
    page = console.get("/console/login")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<html lang="en">' in page.text
    assert 'name="viewport"' in page.text
    for field in ("client_id", "client_secret", "admin_token"):
        assert f'<label for="{field}">' in page.text
        assert f'id="{field}"' in page.text
    assert page.headers["cache-control"] == "no-store"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    cookie = page.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=lax" in cookie
    assert "path=/console" in cookie
    assert "secure" not in cookie  # the public URL is plain http


def test_merchant_signs_in_and_sees_its_accounts_and_balances(
    console: Console, operator: Operator
) -> None:
    merchant = operator.new_merchant("Console Balances Ltd")
    assert operator.top_up(merchant.accounts["GBP"], 123_456).status_code == 201
    answer = console.login_merchant(merchant)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console"
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=lax" in cookie
    assert "path=/console" in cookie
    assert "max-age=28800" in cookie
    page = console.get("/console")
    assert page.status_code == 200, page.text
    text = _text(page)
    assert "Signed in to Console Balances Ltd." in text  # the one-time flash message
    assert "1,234.56 GBP" in text
    assert "0.00 EUR" in text
    for account in merchant.accounts.values():
        assert identifier(account, "iban")["iban"] in text
    # a server-rendered chart per account, with its accessible name and description
    assert page.text.count('<svg class="balance-chart"') == 2
    assert page.text.count("<title id=") == 2
    assert page.text.count("<desc id=") == 2
    assert "1 balance change from" in text
    # the flash is shown once only
    assert "Signed in to" not in _text(console.get("/console"))


def test_wrong_credentials_answer_401_with_the_login_page_again(
    console: Console, operator: Operator, server: RunningServer
) -> None:
    merchant = operator.new_merchant("Console Wrong Secret Ltd")
    answer = console.login_merchant(merchant, secret="not-the-secret")
    assert answer.status_code == 401
    assert answer.headers["content-type"].startswith("text/html")
    assert "Sign-in failed" in answer.text
    # It says where the credentials come from, in plain text: no Markdown backticks, and no
    # command that is not on the PATH after ./dev serve.
    assert "printed when ./dev serve starts" in answer.text
    assert "`" not in _text(answer)
    assert "bankrail init" not in answer.text
    assert f'value="{merchant.client_id}"' in answer.text  # the client id is kept
    assert 'aria-invalid="true"' in answer.text
    assert console.get("/console").status_code == 303
    # an unknown client id is the same 401
    unknown = MerchantClient(
        base_url=server.base_url,
        merchant_id=merchant.merchant_id,
        client_id="sandbox-unknown",
        client_secret="x",
        kid="k",
        private_key_pem="",
        accounts={},
    )
    assert console.login_merchant(unknown).status_code == 401
    unknown.http.close()
    # and a wrong operator token
    wrong = console.login_operator("admin-wrong")
    assert wrong.status_code == 401
    assert "not the operator token" in wrong.text
    assert console.get("/console").status_code == 303


def test_login_without_its_csrf_token_is_403(console: Console, operator: Operator) -> None:
    merchant = operator.new_merchant("Console Login CSRF Ltd")
    console.get("/console/login")
    answer = console.http.post(
        "/console/login",
        data={
            "kind": "merchant",
            "client_id": merchant.client_id,
            "client_secret": merchant.client_secret,
        },
    )
    assert answer.status_code == 403
    assert "Nothing was changed" in _text(answer)
    assert console.get("/console").status_code == 303


def test_login_returns_to_the_page_asked_for_and_never_elsewhere(
    console: Console, operator: Operator
) -> None:
    merchant = operator.new_merchant("Console Next Ltd")
    first = console.get("/console/payouts", status="failed")
    assert first.status_code == 303
    location = first.headers["location"]
    assert location == "/console/login?next=%2Fconsole%2Fpayouts%3Fstatus%3Dfailed"
    page = console.get(location)
    assert 'name="next" value="/console/payouts?status=failed"' in page.text
    token = CSRF.search(page.text)
    assert token
    fields = {
        "csrf_token": token.group(1),
        "kind": "merchant",
        "client_id": merchant.client_id,
        "client_secret": merchant.client_secret,
    }
    answer = console.http.post(
        "/console/login", data={**fields, "next": "/console/payouts?status=failed"}
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/payouts?status=failed"
    assert console.get("/console/login").status_code == 303  # already signed in
    for target in ("//evil.example/", "https://evil.example/console", "/console/../errors"):
        fresh = Console(str(console.http.base_url))
        fresh_token = fresh.csrf("/console/login")
        answer = fresh.http.post(
            "/console/login", data={**fields, "csrf_token": fresh_token, "next": target}
        )
        fresh.close()
        assert answer.status_code == 303
        assert answer.headers["location"] == "/console", target


@pytest.mark.parametrize(
    "path",
    [
        "/console",
        "/console/payments",
        f"/console/payments/{uuid.uuid4()}",
        "/console/payouts",
        f"/console/payouts/{uuid.uuid4()}",
        "/console/webhooks",
        f"/console/webhooks/{uuid.uuid4()}",
        "/console/settings",
        "/console/operator",
    ],
)
def test_pages_need_a_session(console: Console, path: str) -> None:
    answer = console.get(path)
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/console/login?next=%2Fconsole")


@pytest.mark.parametrize(
    "path",
    [
        "/console/settings/webhooks",
        f"/console/payments/{uuid.uuid4()}/refunds",
        f"/console/webhooks/{uuid.uuid4()}/replay",
        "/console/operator/sandbox/bank-transfer",
        "/console/operator/sandbox/clock",
    ],
)
def test_forms_need_a_session(console: Console, path: str) -> None:
    answer = console.http.post(path, data={"payments_uri": "http://127.0.0.1:1/x"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/login"


def test_a_tampered_or_forged_session_cookie_is_not_accepted(
    console: Console, operator: Operator
) -> None:
    victim = operator.new_merchant("Console Victim Ltd")
    attacker = operator.new_merchant("Console Attacker Ltd")
    _signed_in(console, attacker)
    value = _session_cookie(console)
    body, mac = value.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    assert payload["role"] == "merchant"
    for forged_payload in (
        {**payload, "mid": victim.merchant_id},
        {**payload, "role": "operator"},
        {**payload, "exp": payload["exp"] + 10**6},
    ):
        forged = base64.urlsafe_b64encode(json.dumps(forged_payload).encode()).decode()
        fresh = httpx.Client(base_url=str(console.http.base_url), follow_redirects=False)
        fresh.cookies.set("bankrail_console", f"{forged.rstrip('=')}.{mac}", path="/console")
        assert fresh.get("/console").status_code == 303
        assert fresh.get("/console/operator").status_code == 303
        fresh.close()
    unsigned = httpx.Client(base_url=str(console.http.base_url), follow_redirects=False)
    unsigned.cookies.set("bankrail_console", body, path="/console")
    assert unsigned.get("/console").status_code == 303
    unsigned.close()


def test_logout_invalidates_the_session_even_for_a_copied_cookie(
    console: Console, operator: Operator, server: RunningServer
) -> None:
    merchant = operator.new_merchant("Console Logout Ltd")
    _signed_in(console, merchant)
    copied = _session_cookie(console)
    token = console.csrf("/console")
    # signing out needs the CSRF token too
    refused = console.http.post("/console/logout", data={})
    assert refused.status_code == 403
    assert console.get("/console").status_code == 200
    answer = console.http.post("/console/logout", data={"csrf_token": token})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/login"
    cleared = [
        h for h in answer.headers.get_list("set-cookie") if h.startswith("bankrail_console=")
    ]
    assert cleared
    assert "max-age=0" in cleared[0].lower() or "expires=thu, 01 jan 1970" in cleared[0].lower()
    assert console.get("/console").status_code == 303
    replayed = httpx.Client(base_url=server.base_url, follow_redirects=False)
    replayed.cookies.set("bankrail_console", copied, path="/console")
    assert replayed.get("/console").status_code == 303
    assert replayed.get("/console/settings").status_code == 303
    replayed.close()
    login = console.get("/console/login")
    assert "You are signed out." in _text(login)


# --- CSRF ----------------------------------------------------------------------------------------


def test_settings_form_without_or_with_a_wrong_csrf_token_is_403_and_changes_nothing(
    console: Console, other_console: Console, operator: Operator
) -> None:
    merchant = operator.new_merchant("Console CSRF Ltd")
    _signed_in(console, merchant)
    _signed_in(other_console, operator.new_merchant("Console CSRF Other Ltd"))
    foreign_token = other_console.csrf("/console/settings")
    own_token = console.csrf("/console/settings")
    data = {"payments_uri": "http://127.0.0.1:9/evil", "payouts_uri": "http://127.0.0.1:9/evil"}
    for token in (None, "", "forged-token", foreign_token, own_token[:-2] + "AA"):
        answer = console.post("/console/settings/webhooks", data, csrf=token)
        assert answer.status_code == 403, token
        assert answer.headers["content-type"].startswith("text/html")
        assert "Nothing was changed" in _text(answer)
    page = console.get("/console/settings")
    assert _webhook_inputs(page) == ("", "")
    # the same form with the right token works
    answer = console.post("/console/settings/webhooks", data, csrf=own_token)
    assert answer.status_code == 303
    assert _webhook_inputs(console.get("/console/settings")) == (
        "http://127.0.0.1:9/evil",
        "http://127.0.0.1:9/evil",
    )


def test_replay_without_csrf_token_is_403_and_sends_nothing(
    console: Console, operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = operator.new_merchant("Console Replay CSRF Ltd")
    operator.put(f"/admin/merchants/{merchant.merchant_id}/webhooks", {"payouts_uri": receiver.url})
    assert operator.top_up(merchant.accounts["GBP"], 100).status_code == 201
    receiver.wait_for(lambda got: len(got) == 1)
    # The receiver has the webhook before the worker records the attempt: wait for that too.
    delivery = wait_for(
        lambda: next(
            (d for d in _deliveries(operator, merchant) if d["status"] == "delivered"), None
        ),
        what="the delivery recorded as delivered",
    )
    _signed_in(console, merchant)
    answer = console.post(f"/console/webhooks/{delivery['id']}/replay", {}, csrf=None)
    assert answer.status_code == 403
    assert _deliveries(operator, merchant)[0]["attempt_count"] == 1
    # with the token, the same event is sent again
    token = console.csrf(f"/console/webhooks/{delivery['id']}")
    answer = console.post(f"/console/webhooks/{delivery['id']}/replay", {}, csrf=token)
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/console/webhooks/{delivery['id']}"
    got = receiver.wait_for(lambda got: len(got) == 2)
    assert got[0].json()["event_id"] == got[1].json()["event_id"]
    page = console.get(answer.headers["location"])
    assert "Replay queued" in _text(page)


# --- visibility ----------------------------------------------------------------------------------


def test_a_merchant_cannot_see_another_merchants_objects(
    console: Console, operator: Operator
) -> None:
    mine = operator.new_merchant("Console Mine Ltd")
    theirs = operator.new_merchant("Console Theirs Ltd")
    for merchant in (mine, theirs):
        assert operator.top_up(merchant.accounts["GBP"], 10_000).status_code == 201
    my_payout, their_payout = _payout(mine), _payout(theirs)
    my_payment, their_payment = _payment(mine), _payment(theirs)
    my_delivery = _deliveries(operator, mine)[0]["id"]
    their_delivery = _deliveries(operator, theirs)[0]["id"]
    _signed_in(console, mine)

    for path in (
        f"/console/payouts/{my_payout}",
        f"/console/payments/{my_payment}",
        f"/console/webhooks/{my_delivery}",
    ):
        assert console.get(path).status_code == 200, path
    for path in (
        f"/console/payouts/{their_payout}",
        f"/console/payments/{their_payment}",
        f"/console/webhooks/{their_delivery}",
        "/console/payouts/not-a-uuid",
    ):
        answer = console.get(path)
        assert answer.status_code == 404, path
        assert answer.headers["content-type"].startswith("text/html")
        assert "Not found" in answer.text
    token = console.csrf("/console/webhooks")
    answer = console.post(f"/console/webhooks/{their_delivery}/replay", {}, csrf=token)
    assert answer.status_code == 404
    assert _deliveries(operator, theirs)[0]["status"] == "skipped"  # untouched
    # lists show only the merchant's own objects; ?merchant_id= is ignored for merchants
    for path, own, other in (
        ("/console/payouts", my_payout, their_payout),
        ("/console/payments", my_payment, their_payment),
        ("/console/webhooks", my_delivery, their_delivery),
    ):
        page = console.get(path, merchant_id=theirs.merchant_id)
        assert page.status_code == 200
        assert own in page.text
        assert other not in page.text
    overview = _text(console.get("/console", merchant_id=theirs.merchant_id))
    assert identifier(theirs.accounts["GBP"], "iban")["iban"] not in overview
    # and a merchant is not the operator
    answer = console.get("/console/operator")
    assert answer.status_code == 403
    assert "Only the operator" in answer.text
    token = console.csrf("/console")
    answer = console.post(
        "/console/operator/thresholds",
        {"account_id": mine.accounts["GBP"]["id"], "threshold": "1.00"},
        csrf=token,
    )
    assert answer.status_code == 403
    assert account_by_currency(mine, "GBP")["balance_threshold_in_minor"] is None


def test_operator_sees_every_merchant_and_can_pick_one(
    console: Console, operator: Operator, server: RunningServer
) -> None:
    first = operator.new_merchant("Console Operator Alpha Ltd")
    second = operator.new_merchant("Console Operator Beta Ltd")
    for merchant in (first, second):
        assert operator.top_up(merchant.accounts["EUR"], 2_500).status_code == 201
    answer = console.login_operator(server.admin_token)
    assert answer.status_code == 303
    overview = console.get("/console")
    assert overview.status_code == 200
    text = _text(overview)
    assert "All merchants" in text
    for merchant in (first, second):
        assert f'<option value="{merchant.merchant_id}"' in overview.text
        assert merchant.merchant_id in text
    # every merchant's deliveries are listed until one is picked
    everything = console.get("/console/webhooks").text
    first_delivery = _deliveries(operator, first)[0]["id"]
    second_delivery = _deliveries(operator, second)[0]["id"]
    assert first_delivery in everything
    assert second_delivery in everything
    picked = console.get("/console/webhooks", merchant_id=first.merchant_id).text
    assert first_delivery in picked
    assert second_delivery not in picked
    page = console.get("/console", merchant_id=second.merchant_id)
    assert "25.00 EUR" in _text(page)
    assert identifier(second.accounts["EUR"], "iban")["iban"] in _text(page)
    # details of any merchant's objects, and links keep the chosen merchant
    assert console.get(f"/console/webhooks/{first_delivery}").status_code == 200
    assert f"/console/payments?merchant_id={second.merchant_id}" in page.text
    # the operator can change a merchant's settings
    settings_path = f"/console/settings?merchant_id={second.merchant_id}"
    token = console.csrf(settings_path)
    answer = console.post(
        f"/console/settings/webhooks?merchant_id={second.merchant_id}",
        {"payments_uri": "https://hooks.example/pay", "payouts_uri": ""},
        csrf=token,
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == settings_path
    assert _webhook_inputs(console.get(settings_path)) == ("https://hooks.example/pay", "")
    # an unknown or malformed merchant id
    assert console.get("/console", merchant_id=str(uuid.uuid4())).status_code == 404
    assert console.get("/console", merchant_id="nope").status_code == 400


# --- pages and forms -----------------------------------------------------------------------------


def test_payment_and_payout_pages_show_lists_filters_and_lifecycles(
    console: Console, operator: Operator
) -> None:
    merchant = operator.new_merchant("Console Lifecycle Ltd")
    assert operator.top_up(merchant.accounts["GBP"], 50_000).status_code == 201
    payout_id = _payout(merchant, amount=1_500, name="Timeline Tess")
    payment_id = _payment(merchant, amount=2_345)

    def executed() -> bool:
        return bool(merchant.get(f"/v3/payouts/{payout_id}").json()["status"] == "executed")

    wait_for(executed, timeout=20, what="payout executed")
    _signed_in(console, merchant)

    payouts = console.get("/console/payouts")
    assert payouts.status_code == 200
    assert payout_id in payouts.text
    assert "15.00 GBP" in _text(payouts)
    assert "Timeline Tess" in payouts.text
    assert payout_id in console.get("/console/payouts", status="executed", api="v3").text
    assert payout_id not in console.get("/console/payouts", status="failed").text
    assert payout_id not in console.get("/console/payouts", api="v1").text
    detail = _text(console.get(f"/console/payouts/{payout_id}"))
    for step in ("Created", "Authorized", "Submitted to the scheme", "Executed"):
        assert step in detail
    assert "not yet" not in detail
    assert "faster_payments_service" in detail

    payments = console.get("/console/payments")
    assert payment_id in payments.text
    assert "23.45 GBP" in _text(payments)
    assert payment_id in console.get("/console/payments", status="authorization_required").text
    assert payment_id not in console.get("/console/payments", status="payment_settled").text
    today = service_now(operator).date().isoformat()
    assert payment_id in console.get("/console/payments", **{"from": today, "to": today}).text
    assert (
        payment_id
        not in console.get("/console/payments", **{"from": "2000-01-01", "to": "2000-01-02"}).text
    )
    detail_page = console.get(f"/console/payments/{payment_id}")
    assert "Status history" in detail_page.text
    assert "authorization required" in _text(detail_page)
    assert "<time datetime=" in detail_page.text

    bad = console.get("/console/payments", status="nonsense", **{"from": "yesterday"})
    assert bad.status_code == 400
    assert "There is a problem" in bad.text
    assert "must be a date such as" in bad.text
    assert "must be one of" in bad.text
    reversed_range = console.get("/console/payouts", **{"from": "2030-01-02", "to": "2030-01-01"})
    assert reversed_range.status_code == 400
    assert console.get("/console/webhooks", cursor="garbage").status_code == 400


def test_lists_page_through_the_listing_and_show_the_operator_each_merchant(
    console: Console, other_console: Console, operator: Operator, server: RunningServer
) -> None:
    merchant = operator.new_merchant("Console Paging Ltd")
    assert operator.top_up(merchant.accounts["GBP"], 10_000).status_code == 201
    created = [_payment(merchant, amount=100 + n) for n in range(51)]
    payout_id = _payout(merchant, amount=300, name="Paging Payee")
    _signed_in(console, merchant)
    links = re.compile(r'href="/console/payments/([0-9a-f-]{36})"')
    first = console.get("/console/payments")
    assert first.status_code == 200
    assert links.findall(first.text) == created[::-1][:50]  # newest first, 50 a page
    older = re.search(r'href="(/console/payments\?cursor=[^"]+)">Older items', first.text)
    assert older, first.text
    second = console.get(html.unescape(older.group(1)))
    assert links.findall(second.text) == [created[0]]
    assert "Older items" not in second.text

    assert other_console.login_operator(server.admin_token).status_code == 303
    everyone = _text(other_console.get("/console/payments"))
    assert f"{created[-1]} Console Paging Ltd 1.50 GBP" in everyone
    payouts = _text(other_console.get("/console/payouts", api="v3"))
    assert f"{payout_id} Console Paging Ltd v3 3.00 GBP" in payouts


def _refunds(merchant: MerchantClient, payment_id: str) -> list[dict[str, Any]]:
    answer = merchant.get(f"/v3/payments/{payment_id}/refunds")
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


def test_refund_form_refunds_a_settled_payment_once_and_shows_its_errors(
    console: Console, other_console: Console, operator: Operator
) -> None:
    merchant = operator.new_merchant("Console Refunds Ltd")
    payer = {"id": "console-refund-payer", "name": "Pat Payer"}
    payment_id = settled_payment(merchant, authorised_pay_in(merchant, 2_000, payer))["id"]
    _signed_in(console, merchant)
    page_path = f"/console/payments/{payment_id}"
    form_path = f"{page_path}/refunds"
    page = console.get(page_path)
    assert page.status_code == 200
    assert "No refunds." in page.text
    assert "Up to 20.00 GBP is left to refund" in _text(page)
    token = CSRF.search(page.text)
    nonce = NONCE.search(page.text)
    assert token, page.text
    assert nonce, page.text
    fields = {"amount": "5.00", "reference": "console refund", "idempotency_key": nonce.group(1)}

    for csrf in (None, "forged-token"):
        refused = console.post(form_path, fields, csrf=csrf)
        assert refused.status_code == 403, refused.text
        assert "Form expired" in refused.text
    assert _refunds(merchant, payment_id) == []

    done = console.post(form_path, fields, csrf=token.group(1))
    assert done.status_code == 303, done.text
    assert done.headers["location"] == page_path
    shown = console.get(page_path)
    assert "Refund of 5.00 GBP accepted" in _text(shown)
    again = console.post(form_path, fields, csrf=token.group(1))  # a double submission
    assert again.status_code == 303, again.text
    assert "it was not made twice" in _text(console.get(page_path))
    [refund] = _refunds(merchant, payment_id)
    assert (refund["amount_in_minor"], refund["reference"]) == (500, "console refund")
    wait_record_status(merchant, f"/v3/payments/{payment_id}/refunds/{refund['id']}", {"executed"})
    shown = console.get(page_path)
    text = _text(shown)
    for shown_text in (refund["id"], "console refund", "executed"):
        assert shown_text in text
    assert 'data-testid="refunded-amount" data-minor="500"' in shown.text
    assert "Up to 15.00 GBP is left to refund" in text

    too_much = console.post(
        form_path, {**fields, "amount": "15.01", "idempotency_key": "k2"}, csrf=token.group(1)
    )
    assert too_much.status_code == 400, too_much.text
    assert "There is a problem" in too_much.text
    assert "must be at most 15.00 GBP, what is left to refund" in _text(too_much)
    assert 'id="refund-amount" name="amount"' in too_much.text
    assert 'aria-invalid="true"' in too_much.text
    bad = console.post(form_path, {"amount": "1.001", "reference": ""}, csrf=token.group(1))
    assert bad.status_code == 400
    assert "must be a positive amount in GBP" in _text(bad)
    assert "Reference: is required" in _text(bad)
    assert len(_refunds(merchant, payment_id)) == 1

    pending_id = _payment(merchant, amount=700)
    pending_page = console.get(f"/console/payments/{pending_id}")
    assert "Only a settled payment can be refunded" in _text(pending_page)
    assert 'action="/console/payments/' not in pending_page.text
    not_settled = console.post(
        f"/console/payments/{pending_id}/refunds",
        {"amount": "1.00", "reference": "too early"},
        csrf=token.group(1),
    )
    assert not_settled.status_code == 409, not_settled.text
    assert "There is a problem" in not_settled.text
    assert "this one is authorization_required" in _text(not_settled)
    assert _refunds(merchant, pending_id) == []

    stranger = operator.new_merchant("Console Refund Stranger Ltd")
    _signed_in(other_console, stranger)
    theirs = other_console.post(
        form_path, {"amount": "1.00", "reference": "not mine"}, csrf=other_console.csrf("/console")
    )
    assert theirs.status_code == 404
    assert len(_refunds(merchant, payment_id)) == 1
    check = operator.get("/admin/ledger/check")
    assert check.json() == {"ok": True, "violations": []}


def test_settings_show_field_errors_and_register_signing_keys(
    console: Console, operator: Operator
) -> None:
    merchant = operator.new_merchant("Console Settings Ltd")
    _signed_in(console, merchant)
    token = console.csrf("/console/settings")
    page = console.get("/console/settings")
    assert merchant.kid in page.text  # the key registered by the operator API
    bad = console.post(
        "/console/settings/webhooks",
        {"payments_uri": "not a uri", "payouts_uri": "ftp://example.com/x"},
        csrf=token,
    )
    assert bad.status_code == 400
    assert bad.text.count("must be an absolute http(s) URI") >= 2
    assert 'value="not a uri"' in bad.text  # what was typed is kept
    assert _webhook_inputs(console.get("/console/settings")) == ("", "")

    invalid_pem = console.post(
        "/console/settings/signing-keys", {"public_key_pem": "hello", "kid": ""}, csrf=token
    )
    assert invalid_pem.status_code == 400
    assert "This is not a usable key" in invalid_pem.text
    empty = console.post("/console/settings/signing-keys", {"public_key_pem": ""}, csrf=token)
    assert empty.status_code == 400

    pem = signing.public_key_pem(signing.generate_private_key().public_key())
    added = console.post(
        "/console/settings/signing-keys",
        {"public_key_pem": pem, "kid": "console-key-1"},
        csrf=token,
    )
    assert added.status_code == 303
    shown = console.get("/console/settings")
    assert "Key registered with kid console-key-1." in _text(shown)
    assert "<code>console-key-1</code>" in shown.text
    other_pem = signing.public_key_pem(signing.generate_private_key().public_key())
    conflict = console.post(
        "/console/settings/signing-keys",
        {"public_key_pem": other_pem, "kid": "console-key-1"},
        csrf=token,
    )
    assert conflict.status_code == 409
    assert "already registered with a different key" in conflict.text
    # an uploaded PEM file works too, with a generated kid
    uploaded = console.http.post(
        "/console/settings/signing-keys",
        data={"csrf_token": token, "kid": ""},
        files={"public_key_file": ("key.pem", other_pem.encode(), "application/x-pem-file")},
    )
    assert uploaded.status_code == 303
    shown = console.get("/console/settings")
    found = re.search(r"Key registered with kid ([0-9a-f-]{36})\.", _text(shown))
    assert found, shown.text
    assert f"<code>{found.group(1)}</code>" in shown.text


def test_operator_panel_sets_thresholds_screening_and_drives_the_sandbox(
    console: Console, operator: Operator, server: RunningServer
) -> None:
    merchant = operator.new_merchant("Console Sandbox Ltd")
    account = merchant.accounts["GBP"]
    assert console.login_operator(server.admin_token).status_code == 303
    panel_path = f"/console/operator?merchant_id={merchant.merchant_id}"
    panel = console.get(panel_path)
    assert panel.status_code == 200
    token = CSRF.search(panel.text)
    nonce = NONCE.search(panel.text)
    assert token
    assert nonce
    csrf = token.group(1)
    scoped = f"?merchant_id={merchant.merchant_id}"

    # a sandbox transfer credits at once, and the same form sent twice credits once
    transfer = {
        "account_id": account["id"],
        "amount": "12.34",
        "remitter_name": "Console Payer",
        "reference": "console",
        "idempotency_key": nonce.group(1),
    }
    for _ in range(2):
        answer = console.post(
            "/console/operator/sandbox/bank-transfer" + scoped, transfer, csrf=csrf
        )
        assert answer.status_code == 303
    assert account_by_currency(merchant, "GBP")["current_balance_in_minor"] == 1_234
    assert "was not credited twice" in _text(console.get(panel_path))
    bad = console.post(
        "/console/operator/sandbox/bank-transfer" + scoped,
        {**transfer, "amount": "1.234", "idempotency_key": str(uuid.uuid4())},
        csrf=csrf,
    )
    assert bad.status_code == 400
    assert "at most 2 decimal places" in bad.text
    other = operator.new_merchant("Console Sandbox Other Ltd")
    foreign = console.post(
        "/console/operator/sandbox/bank-transfer" + scoped,
        {**transfer, "account_id": other.accounts["GBP"]["id"], "idempotency_key": "k2"},
        csrf=csrf,
    )
    assert foreign.status_code == 404  # not an account of the chosen merchant

    # thresholds: set, shown, and evaluated at once (12.34 <= 20.00 is below the threshold)
    answer = console.post(
        "/console/operator/thresholds" + scoped,
        {"account_id": account["id"], "threshold": "20.00"},
        csrf=csrf,
    )
    assert answer.status_code == 303
    assert account_by_currency(merchant, "GBP")["balance_threshold_in_minor"] == 2_000
    assert "below threshold" in _text(console.get(panel_path))
    bad = console.post(
        "/console/operator/thresholds" + scoped,
        {"account_id": account["id"], "threshold": "-5"},
        csrf=csrf,
    )
    assert bad.status_code == 400
    answer = console.post(
        "/console/operator/thresholds" + scoped,
        {"account_id": account["id"], "threshold": ""},
        csrf=csrf,
    )
    assert answer.status_code == 303
    assert account_by_currency(merchant, "GBP")["balance_threshold_in_minor"] is None

    # the screening list
    answer = console.post(
        "/console/operator/screening-list",
        {"names": "Console Villain\n\n  Other Villain "},
        csrf=csrf,
    )
    assert answer.status_code == 303
    names = operator.get("/admin/screening-list").json()["names"]
    assert names == ["Console Villain", "Other Villain"]
    assert operator.post("/admin/screening-list", {"names": []}).status_code == 200

    # the clock moves forward by what was asked
    before = service_now(operator)
    answer = console.post(
        "/console/operator/sandbox/clock", {"amount": "2", "unit": "seconds"}, csrf=csrf
    )
    assert answer.status_code == 303
    assert (service_now(operator) - before).total_seconds() >= 2
    bad = console.post("/console/operator/sandbox/clock", {"amount": "-1"}, csrf=csrf)
    assert bad.status_code == 400
    assert "must be a number" in bad.text
    assert console.get(panel_path).status_code == 200  # still signed in


def test_unknown_console_pages_are_a_404_page(console: Console, operator: Operator) -> None:
    _signed_in(console, operator.new_merchant("Console 404 Ltd"))
    answer = console.get("/console/no-such-page")
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("text/html")
    assert "There is no console page at this address." in answer.text
    assert console.get("/console/").status_code in (303, 307)


def test_mandates_page_shows_limits_what_is_left_and_the_payments(
    console: Console, operator: Operator
) -> None:
    merchant = operator.new_merchant("Gym Ltd")
    other = operator.new_merchant("Other Ltd")
    limits = {"year": {"maximum_amount": 10_000, "period_alignment": "consent"}}
    mandate_id, _ = authorised_mandate(merchant, mandate_body(merchant, periodic_limits=limits))
    theirs, _ = authorised_mandate(other)
    answer = merchant.signed_post("/v3/payments", mandate_payment(mandate_id, 2_500))
    assert answer.status_code == 201, answer.text
    payment_id = answer.json()["id"]
    wait_for(
        lambda: merchant.get(f"/v3/payments/{payment_id}").json()["status"] == "payment_settled",
        what="the mandate payment settled",
    )

    _signed_in(console, merchant)
    page = console.get("/console/mandates")
    assert page.status_code == 200, page.text
    text = _text(page)
    assert mandate_id in text
    assert "authorized" in text
    assert "year (consent): 75.00 GBP left of 100.00 GBP" in text
    assert f'href="/console/payments/{payment_id}"' in page.text
    assert theirs not in text  # another merchant's mandate is not shown


def test_payment_page_shows_an_external_account_payment_and_a_failed_attempt(
    console: Console, operator: Operator
) -> None:
    merchant = operator.new_merchant("External payee shop")
    method: dict[str, Any] = {
        "type": "bank_transfer",
        "provider_selection": {"type": "user_selected"},
        "beneficiary": {
            "type": "external_account",
            "account_holder_name": "Ben Eficiary",
            "account_identifier": {"type": "nrb", "nrb": "12345678901234567890123456"},
            "reference": "some reference",
        },
    }
    external = merchant.signed_post(
        "/v3/payments", {"amount_in_minor": 500, "currency": "PLN", "payment_method": method}
    )
    assert external.status_code == 201, external.text
    method = {
        **method,
        "provider_selection": {"type": "preselected", "provider_id": "mock-payments-gb-redirect"},
        "beneficiary": {
            "type": "merchant_account",
            "merchant_account_id": merchant.accounts["GBP"]["id"],
        },
        "retry": {},
    }
    retried = merchant.signed_post(
        "/v3/payments", {"amount_in_minor": 500, "currency": "GBP", "payment_method": method}
    )
    assert retried.status_code == 201, retried.text
    payment_id = retried.json()["id"]
    flow = merchant.signed_post(
        f"/v3/payments/{payment_id}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": "https://shop.example/back"}},
    )
    assert flow.status_code == 200, flow.text
    uri = flow.json()["authorization_flow"]["actions"]["next"]["uri"]
    token = re.search(r"token=([^&#]+)", uri)
    assert token is not None
    rejected = merchant.http.post(
        f"/mock-bank/api/single-immediate-payments/{payment_id}/action",
        json={"action": "RejectAuthorisation"},
        headers={"Authorization": f"Bearer {token.group(1)}"},
    )
    assert rejected.status_code == 202, rejected.text

    _signed_in(console, merchant)
    page = _text(console.get(f"/console/payments/{external.json()['id']}"))
    assert "none: paid to an external account" in page
    page = _text(console.get(f"/console/payments/{payment_id}"))
    assert "attempt failed" in page
    assert "Failure reason authorization failed" in page
