"""The limit on wrong credentials, over HTTP against `bankrail serve` (docs/operations.md,
"Wrong credentials"): client secrets (`/connect/token`, console sign-in), access tokens (`/v1`,
`/v3`) and the operator token (`/admin`, `/sandbox`, console sign-in) count against one
limiter, per calling address and per claimed identity. The 101st wrong one within a minute is
429 with `Retry-After`, and so is a right one while blocked; a window later, it passes again
(the service clock is advanced, nothing sleeps). A missing credential and a bad request
signature are not counted.

The server trusts X-Forwarded-For from its loopback proxy, so each test speaks from addresses
of its own and blocks nobody else; the operator's own calls come from 127.0.0.1.
"""

from __future__ import annotations

import itertools
import re
import secrets
import uuid
from collections.abc import Callable, Iterator

import httpx
import jwt
import pytest
from e2e_helpers import assert_problem, bearer

from support.api import MerchantClient, Operator
from support.server import RunningServer

LIMIT = 100  # the default: more than 100 wrong credentials in a minute
WINDOW = 60
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')

_addresses = itertools.count(1)


def _address() -> str:
    """A calling address no other request of the session used."""
    n = next(_addresses)
    return f"10.36.{n // 256}.{n % 256}"


def _from(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


def _assert_blocked(answer: httpx.Response) -> None:
    """A 429 problem with a Retry-After of at most a window."""
    body = assert_problem(answer, 429, "Rate Limit Exceeded")
    assert "wrong credentials" in body["detail"], body
    assert 1 <= int(answer.headers["retry-after"]) <= WINDOW, answer.headers


def _spend(call: Callable[[int], httpx.Response], *wrong_statuses: int) -> None:
    """Present the limit's worth of wrong credentials; each is still answered as wrong."""
    statuses = [call(index).status_code for index in range(LIMIT)]
    assert set(statuses) <= set(wrong_statuses), statuses


def _advance_a_window(operator: Operator) -> None:
    answer = operator.post("/sandbox/clock/advance", {"seconds": WINDOW})
    assert answer.status_code == 200, answer.text


def _grant(merchant: MerchantClient, secret: str | None = None) -> dict[str, str]:
    return {
        "grant_type": "client_credentials",
        "client_id": merchant.client_id,
        "client_secret": secret if secret is not None else merchant.client_secret,
    }


class Console:
    """A browser at one address: the sign-in form with its session cookie and CSRF token."""

    def __init__(self, base_url: str, address: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=30, headers=_from(address))
        page = self.http.get("/console/login")
        assert page.status_code == 200, page.text
        found = CSRF.search(page.text)
        assert found, page.text
        self.csrf = found.group(1)

    def sign_in(self, **fields: str) -> httpx.Response:
        return self.http.post("/console/login", data={"csrf_token": self.csrf, **fields})


@pytest.fixture
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        yield client


@pytest.fixture
def console_at(server: RunningServer) -> Iterator[Callable[[str], Console]]:
    """Opens a console sign-in form at an address; closes them all after the test."""
    opened: list[Console] = []

    def open_at(address: str) -> Console:
        opened.append(Console(server.base_url, address))
        return opened[-1]

    yield open_at
    for console in opened:
        console.http.close()


def test_wrong_client_secrets_block_the_address_until_a_window_has_passed(
    operator: Operator, http: httpx.Client, console_at: Callable[[str], Console]
) -> None:
    merchant = operator.new_merchant("Guessed Ltd")
    guesser = _address()

    def guess(index: int) -> httpx.Response:
        # Each guess names another client, so that only the address adds up.
        wrong = {**_grant(merchant, secrets.token_urlsafe(16)), "client_id": f"guess-{index}"}
        return http.post("/connect/token", data=wrong, headers=_from(guesser))

    _spend(guess, 400)
    _assert_blocked(guess(LIMIT))
    # While blocked, the right secret from that address is refused as well...
    _assert_blocked(http.post("/connect/token", data=_grant(merchant), headers=_from(guesser)))
    # ...and so is its console sign-in; from elsewhere the client is served.
    console = console_at(guesser)
    refused = console.sign_in(
        kind="merchant", client_id=merchant.client_id, client_secret=merchant.client_secret
    )
    assert refused.status_code == 429, refused.text
    assert 1 <= int(refused.headers["retry-after"]) <= WINDOW
    assert "Rate Limit Exceeded" in refused.text
    elsewhere = http.post("/connect/token", data=_grant(merchant), headers=_from(_address()))
    assert elsewhere.status_code == 200, elsewhere.text

    _advance_a_window(operator)
    again = http.post("/connect/token", data=_grant(merchant), headers=_from(guesser))
    assert again.status_code == 200, again.text


def test_wrong_secrets_for_one_client_from_many_addresses_block_that_client(
    operator: Operator, http: httpx.Client, console_at: Callable[[str], Console]
) -> None:
    merchant = operator.new_merchant("Targeted Ltd")
    token = merchant.token()
    bystander = operator.new_merchant("Bystander Ltd")

    def guess(index: int) -> httpx.Response:
        # Half through the console's sign-in, half through /connect/token: one limiter.
        wrong = secrets.token_urlsafe(16)
        if index % 2:
            return console_at(_address()).sign_in(
                kind="merchant", client_id=merchant.client_id, client_secret=wrong
            )
        return http.post("/connect/token", data=_grant(merchant, wrong), headers=_from(_address()))

    _spend(guess, 400, 401)
    fresh = _address()
    _assert_blocked(http.post("/connect/token", data=_grant(merchant), headers=_from(fresh)))
    # A token issued before still works: it verifies, so it is no guess, and blocking it would
    # let anyone who knows a client id stop that merchant's API calls.
    served = http.get("/v3/merchant-accounts", headers={**bearer(token), **_from(fresh)})
    assert served.status_code == 200, served.text
    # Another client at the same address is served.
    answer = http.post("/connect/token", data=_grant(bystander), headers=_from(fresh))
    assert answer.status_code == 200, answer.text


def test_wrong_access_tokens_on_v1_and_v3_count_against_one_limit(
    operator: Operator, http: httpx.Client
) -> None:
    merchant = operator.new_merchant("Bearer Guessing Ltd")
    token = merchant.token()
    guesser = _address()

    def guess(index: int) -> httpx.Response:
        path = "/v1/balances" if index % 2 else "/v3/merchant-accounts"
        return http.get(path, headers={**bearer(secrets.token_urlsafe(32)), **_from(guesser)})

    _spend(guess, 401)
    _assert_blocked(guess(LIMIT))
    for path in ("/v1/balances", "/v3/merchant-accounts"):
        _assert_blocked(http.get(path, headers={**bearer(token), **_from(guesser)}))
        served = http.get(path, headers={**bearer(token), **_from(_address())})
        assert served.status_code == 200, served.text

    _advance_a_window(operator)
    again = http.get("/v3/merchant-accounts", headers={**bearer(token), **_from(guesser)})
    assert again.status_code == 200, again.text


def test_forged_tokens_block_their_address_and_lock_out_no_client_they_name(
    operator: Operator, http: httpx.Client
) -> None:
    # Whom a token that does not verify claims to be is unproven: forged tokens naming a
    # client, each from another address, lock that client out of nothing, while a forger's
    # own address is blocked like any guesser's.
    merchant = operator.new_merchant("Impersonated Ltd")
    token = merchant.token()
    forger_key = secrets.token_bytes(32)
    forger = _address()

    def forge(index: int, address: str | None = None) -> httpx.Response:
        forged = jwt.encode(
            {"iss": "bankrail", "typ": "access", "sub": merchant.client_id, "n": index},
            forger_key,
            algorithm="HS256",
        )
        at = _from(address or _address())
        return http.get("/v3/merchant-accounts", headers={**bearer(forged), **at})

    _spend(forge, 401)
    fresh = _address()
    served = http.get("/v3/merchant-accounts", headers={**bearer(token), **_from(fresh)})
    assert served.status_code == 200, served.text
    issued = http.post("/connect/token", data=_grant(merchant), headers=_from(fresh))
    assert issued.status_code == 200, issued.text

    _spend(lambda index: forge(index, forger), 401)
    _assert_blocked(forge(LIMIT, forger))
    _assert_blocked(http.get("/v3/merchant-accounts", headers={**bearer(token), **_from(forger)}))
    # The operator token, which the merchant API answers with a hint, is refused alike: a
    # blocked address learns nothing of which of its guesses was right.
    operator_token = operator.http.headers["Authorization"].removeprefix("Bearer ")
    at_forger = {**bearer(operator_token), **_from(forger)}
    _assert_blocked(http.get("/v3/merchant-accounts", headers=at_forger))


def test_missing_credentials_and_bad_signatures_are_not_counted(
    operator: Operator,
    http: httpx.Client,
    server: RunningServer,
    console_at: Callable[[str], Console],
) -> None:
    merchant = operator.new_merchant("Careless Ltd")
    token = merchant.token()
    caller = _address()
    at = _from(caller)
    for _ in range(LIMIT + 20):
        missing = http.get("/v3/merchant-accounts", headers=at)
        assert_problem(missing, 401, "Unauthenticated")
        not_bearer = http.get("/admin/merchants", headers={"Authorization": "Basic eDp5", **at})
        assert_problem(not_bearer, 401, "Unauthenticated")
    console = console_at(caller)
    for _ in range(LIMIT + 20):
        assert console.sign_in(kind="operator", admin_token="").status_code == 400
    # A right token with a signature over another body: 401 for the signature, not counted.
    for _ in range(LIMIT + 20):
        key = str(uuid.uuid4())
        signature = merchant.sign("POST", "/v3/payouts", b"{}", {"Idempotency-Key": key})
        answer = http.post(
            "/v3/payouts",
            content=b'{"amount_in_minor": 1}',
            headers={
                **bearer(token),
                **at,
                "Content-Type": "application/json",
                "Svc-Signature": signature,
                "Idempotency-Key": key,
            },
        )
        body = assert_problem(answer, 401, "Unauthenticated")
        assert "signature" in body["detail"], body
    served = http.get("/v3/merchant-accounts", headers={**bearer(token), **at})
    assert served.status_code == 200, served.text
    signed_in = console.sign_in(kind="operator", admin_token=server.admin_token)
    assert signed_in.status_code == 303, signed_in.text


def test_wrong_operator_tokens_on_admin_sandbox_and_console_count_against_one_limit(
    operator: Operator,
    http: httpx.Client,
    server: RunningServer,
    console_at: Callable[[str], Console],
) -> None:
    guesser = _address()
    console = console_at(guesser)

    def guess(index: int) -> httpx.Response:
        wrong = {**bearer(secrets.token_urlsafe(32)), **_from(guesser)}
        if index % 3 == 0:
            return http.get("/admin/merchants", headers=wrong)
        if index % 3 == 1:
            return http.get("/sandbox/clock", headers=wrong)
        answer = console.sign_in(kind="operator", admin_token=secrets.token_urlsafe(32))
        assert "this is not the operator token" in answer.text
        return answer

    _spend(guess, 401)
    right = {**bearer(server.admin_token), **_from(guesser)}
    _assert_blocked(http.get("/admin/merchants", headers=right))
    _assert_blocked(http.get("/sandbox/clock", headers=right))
    refused = console.sign_in(kind="operator", admin_token=server.admin_token)
    assert refused.status_code == 429, refused.text
    assert 1 <= int(refused.headers["retry-after"]) <= WINDOW
    # The operator token claims nobody: from its own address the operator is served.
    assert operator.get("/admin/merchants").status_code == 200

    _advance_a_window(operator)
    assert http.get("/admin/merchants", headers=right).status_code == 200
    assert console.sign_in(kind="operator", admin_token=server.admin_token).status_code == 303


def test_wrong_operator_tokens_through_the_console_sign_in_are_refused_past_the_limit(
    console_at: Callable[[str], Console],
) -> None:
    console = console_at(_address())
    statuses = [
        console.sign_in(kind="operator", admin_token=secrets.token_urlsafe(32)).status_code
        for _ in range(LIMIT + 1)
    ]
    assert statuses == [401] * LIMIT + [429], statuses


def test_addresses_of_one_ipv6_64_count_as_one(http: httpx.Client, server: RunningServer) -> None:
    prefix = f"2001:db8:36:{next(_addresses):x}"

    def guess(index: int) -> httpx.Response:
        wrong = {**bearer(secrets.token_urlsafe(32)), **_from(f"{prefix}::{index + 1:x}")}
        return http.get("/admin/merchants", headers=wrong)

    _spend(guess, 401)
    right = {**bearer(server.admin_token), **_from(f"{prefix}:1:2:3:4")}
    _assert_blocked(http.get("/admin/merchants", headers=right))
    elsewhere = {**bearer(server.admin_token), **_from(f"2001:db8:37:{next(_addresses):x}::1")}
    assert http.get("/admin/merchants", headers=elsewhere).status_code == 200


def test_wrong_console_passwords_for_one_user_from_many_addresses_block_that_user(
    operator: Operator, server: RunningServer, console_at: Callable[[str], Console]
) -> None:
    # Console users' passwords are one more kind of credential: guesses at one user's
    # password, each from another address, block that user (by email, case folded) and
    # nobody else.
    from test_console_http import Console as Browser
    from test_console_scopes_http import create_console_user, login_user, set_password

    merchant = operator.new_merchant("Console Guessing Ltd")
    email, other_email = (f"{who}-{uuid.uuid4().hex[:8]}@shop.example" for who in "ab")
    password = f"pw-{uuid.uuid4().hex}"
    browser = Browser(server.base_url)
    try:
        for address in (email, other_email):
            user = create_console_user(operator, merchant.merchant_id, address)
            assert set_password(browser, user["set_password_url"], password).status_code == 303

        def guess(index: int) -> httpx.Response:
            who = email.upper() if index % 2 else email
            return console_at(_address()).sign_in(kind="user", email=who, password=f"x{index}")

        _spend(guess, 401)
        refused = console_at(_address()).sign_in(kind="user", email=email, password=password)
        assert refused.status_code == 429, refused.text
        assert 1 <= int(refused.headers["retry-after"]) <= WINDOW
        # The other user of the same merchant signs in; so does the blocked one a window later.
        assert login_user(browser, other_email, password).status_code == 303
        _advance_a_window(operator)
        again = console_at(_address()).sign_in(kind="user", email=email, password=password)
        assert again.status_code == 303, again.text
    finally:
        browser.close()
