"""Revocation on one host holds on every host within a second (docs/operations.md, "Console
users and revocation"): two `bankrail serve` hosts on one database, each having used (and so
cached) a merchant's signing key and its client's access token; the key, then the client,
revoked through host a. Host a refuses them at once; host b is polled until it refuses them
too, which must happen within one second of the revocation's answer, and stay so."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import httpx
import pytest
from e2e_helpers import bearer
from pay_in_helpers import payment_body

from support.api import MerchantClient, Operator
from support.databases import drop_database, fresh_database, run
from support.fleet import hosts
from support.server import RunningServer

pytestmark = pytest.mark.slow  # two servers of their own

WITHIN_SECONDS = 1.0


@pytest.fixture
def two_hosts(pg_server: str) -> Iterator[list[RunningServer]]:
    """Two API hosts on one fresh database of the session's PostgreSQL."""
    dsn = str(run(fresh_database(pg_server, migrated=False)))
    try:
        with hosts(dsn, 2, {}) as started:
            yield started
    finally:
        run(drop_database(pg_server, dsn))


def _refused_within(check: Callable[[], httpx.Response], since: float) -> float:
    """Poll `check` until it answers 401; the seconds from `since` to that answer. Then it
    must keep answering 401."""
    while True:
        answer = check()
        if answer.status_code == 401:
            elapsed = time.monotonic() - since
            break
        assert answer.status_code in (200, 201), answer.text
        assert time.monotonic() - since < 5, "never refused"
    for _ in range(3):
        assert check().status_code == 401
    return elapsed


def _signed_payment(merchant: MerchantClient) -> Callable[[], httpx.Response]:
    return lambda: merchant.signed_post("/v3/payments", payment_body(merchant))


def test_a_revoked_key_and_client_are_refused_on_every_host_within_a_second(
    two_hosts: list[RunningServer],
) -> None:
    a, b = two_hosts
    operator = Operator(a.base_url, a.admin_token)
    try:
        merchant = operator.new_merchant("Two Hosts Ltd")
        on_b = replace(merchant, base_url=b.base_url)
        try:
            token = merchant.token()
            for host in (merchant, on_b):  # each host caches the key and the client
                assert _signed_payment(host)().status_code == 201
                assert host.get("/v3/merchant-accounts").status_code == 200

            keys = f"/admin/merchants/{merchant.merchant_id}/signing-keys"
            assert operator.http.delete(f"{keys}/{merchant.kid}").status_code == 204
            revoked_at = time.monotonic()
            assert _signed_payment(merchant)().status_code == 401  # at once on host a
            assert _refused_within(_signed_payment(on_b), revoked_at) < WITHIN_SECONDS

            clients = f"/admin/merchants/{merchant.merchant_id}/clients"
            assert operator.http.delete(f"{clients}/{merchant.client_id}").status_code == 204
            revoked_at = time.monotonic()
            headers = bearer(token)
            assert merchant.http.get("/v3/merchant-accounts", headers=headers).status_code == 401
            on_b_accounts = lambda: on_b.http.get("/v3/merchant-accounts", headers=headers)  # noqa: E731
            assert _refused_within(on_b_accounts, revoked_at) < WITHIN_SECONDS
        finally:
            on_b.http.close()
    finally:
        operator.close()
