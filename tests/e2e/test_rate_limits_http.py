"""Per-client rate limits against a real `bankrail serve` with small limits: a client that
spends its budget gets 429 problem+json with a `Retry-After` it can rely on, other clients are
unaffected, and the refused request had no effect (a payout refused with 429 holds no funds,
and its Idempotency-Key still works once the client honours Retry-After). `/connect/token` is
limited per calling address, before the secret is checked. The default limits are generous.
"""

from __future__ import annotations

import math
import secrets
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from e2e_helpers import assert_problem, bearer, fresh_token, wait_for
from payout_helpers import GB_IBAN, external_beneficiary, payout_body

from support.api import MerchantClient, Operator
from support.server import RunningServer, own_server

pytestmark = pytest.mark.slow  # a server of its own; waits out Retry-After

RATE = 0.5  # requests per second per client, after the burst
BURST = 4
TOKEN_RATE = 0.05  # token requests per second per address, after the burst
TOKEN_BURST = 6


@pytest.fixture(scope="module")
def limited(pg_server: str) -> Iterator[RunningServer]:
    """A sandbox server with small limits."""
    env = {
        "BANKRAIL_RATE_LIMIT_PER_SECOND": str(RATE),
        "BANKRAIL_RATE_LIMIT_BURST": str(BURST),
        "BANKRAIL_TOKEN_RATE_LIMIT_PER_SECOND": str(TOKEN_RATE),
        "BANKRAIL_TOKEN_RATE_LIMIT_BURST": str(TOKEN_BURST),
    }
    with own_server(pg_server, env) as running:
        yield running


@pytest.fixture
def limited_operator(limited: RunningServer) -> Iterator[Operator]:
    """The operator API of the limited server (operator calls are not client-limited)."""
    client = Operator(limited.base_url, limited.admin_token)
    yield client
    client.close()


def _assert_rate_limited(answer: httpx.Response, rate: float) -> int:
    """A 429 problem whose Retry-After is a whole number of seconds the rate can justify."""
    body = assert_problem(answer, 429, "Rate Limit Exceeded")
    retry_after = int(answer.headers["retry-after"])
    assert 1 <= retry_after <= math.ceil(1 / rate), retry_after
    assert f"retry after {retry_after} second" in body["detail"]
    return retry_after


def _spend_budget(call: Callable[[], httpx.Response], limit: int) -> list[httpx.Response]:
    """Call until the first 429 (at most `limit` + 5 calls)."""
    answers = []
    for _ in range(limit + 5):
        answers.append(call())
        if answers[-1].status_code == 429:
            break
    return answers


def _once_allowed(call: Callable[[], httpx.Response]) -> httpx.Response:
    """Repeat `call` until it is not rate limited (refused calls spend nothing)."""

    def attempt() -> httpx.Response | None:
        answer = call()
        return None if answer.status_code == 429 else answer

    return wait_for(attempt, timeout=30, what="the rate limit to let a request through")


def _account(merchant: MerchantClient) -> dict[str, Any]:
    answer = _once_allowed(
        lambda: merchant.get(f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}")
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_a_client_over_its_limit_gets_429_and_another_client_does_not(
    limited_operator: Operator,
) -> None:
    greedy = limited_operator.new_merchant("Greedy Ltd")
    other = limited_operator.new_merchant("Other Ltd")
    greedy.token()
    other.token()
    second_token = fresh_token(greedy)["access_token"]  # tokens are not client-limited
    assert second_token != greedy.token()
    answers = _spend_budget(lambda: greedy.get("/v3/merchant-accounts"), BURST)
    statuses = [a.status_code for a in answers]
    assert statuses[:BURST] == [200] * BURST, statuses
    assert statuses[-1] == 429, statuses
    _assert_rate_limited(answers[-1], RATE)
    # The budget follows the client, not the token: its other token is limited too...
    relimited = greedy.http.get("/v3/merchant-accounts", headers=bearer(second_token))
    _assert_rate_limited(relimited, RATE)
    # ...while another merchant is served at once.
    assert other.get("/v3/merchant-accounts").status_code == 200
    # Honouring Retry-After is enough to be served again.
    assert _once_allowed(lambda: greedy.get("/v3/merchant-accounts")).status_code == 200


def test_a_refused_payout_does_nothing_and_its_key_still_works(
    limited_operator: Operator,
) -> None:
    merchant = limited_operator.new_merchant("Limited Payouts Ltd")
    assert limited_operator.top_up(merchant.accounts["GBP"], 10_000).status_code == 201
    assert _account(merchant)["available_balance_in_minor"] == 10_000
    body = payout_body(merchant, "GBP", 1_000, external_beneficiary(GB_IBAN))
    key = str(uuid.uuid4())
    _spend_budget(lambda: merchant.get("/v3/merchant-accounts"), BURST)
    refused = merchant.signed_post("/v3/payouts", body, idempotency_key=key)
    _assert_rate_limited(refused, RATE)

    account = _account(merchant)
    assert account["available_balance_in_minor"] == 10_000  # nothing was held
    assert account["current_balance_in_minor"] == 10_000
    activity = _once_allowed(
        lambda: merchant.get(
            f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}/transactions", type="payout"
        )
    )
    assert activity.status_code == 200, activity.text
    assert activity.json()["items"] == []

    accepted = _once_allowed(lambda: merchant.signed_post("/v3/payouts", body, idempotency_key=key))
    assert accepted.status_code == 202, accepted.text
    assert _account(merchant)["available_balance_in_minor"] == 9_000


def test_connect_token_is_limited_per_address_before_the_secret_is_checked(
    limited_operator: Operator, limited: RunningServer
) -> None:
    merchant = limited_operator.new_merchant("Token Limits Ltd")
    form = {
        "grant_type": "client_credentials",
        "client_id": merchant.client_id,
        "client_secret": merchant.client_secret,
    }
    # The server trusts X-Forwarded-For from its loopback proxy, so each address here is a
    # different caller of its own.
    guesser = {"X-Forwarded-For": "203.0.113.7"}
    with httpx.Client(base_url=limited.base_url, timeout=30) as http:
        answers = _spend_budget(
            lambda: http.post(
                "/connect/token",
                data={**form, "client_secret": secrets.token_urlsafe(16)},
                headers=guesser,
            ),
            TOKEN_BURST,
        )
        statuses = [a.status_code for a in answers]
        assert statuses[:TOKEN_BURST] == [statuses[0]] * TOKEN_BURST, statuses
        assert statuses[0] in (400, 401)  # wrong secrets
        assert statuses[-1] == 429, statuses
        _assert_rate_limited(answers[-1], TOKEN_RATE)
        # Once limited, even the right secret is refused from that address...
        right = http.post("/connect/token", data=form, headers=guesser)
        _assert_rate_limited(right, TOKEN_RATE)
        assert "access_token" not in right.text
        # ...while the same client from another address gets its token.
        elsewhere = http.post(
            "/connect/token", data=form, headers={"X-Forwarded-For": "203.0.113.8"}
        )
        assert elsewhere.status_code == 200, elsewhere.text
        assert elsewhere.json()["access_token"]


def test_the_default_limits_are_generous(operator: Operator) -> None:
    merchant = operator.new_merchant("Busy But Fine Ltd")
    with httpx.Client(base_url=str(operator.http.base_url), timeout=30) as http:
        tokens = [
            http.post(
                "/connect/token",
                data={
                    "grant_type": "client_credentials",
                    "client_id": merchant.client_id,
                    "client_secret": merchant.client_secret,
                },
            )
            for _ in range(20)
        ]
    assert [t.status_code for t in tokens] == [200] * 20
    statuses = [merchant.get("/v3/merchant-accounts").status_code for _ in range(100)]
    assert statuses == [200] * 100
