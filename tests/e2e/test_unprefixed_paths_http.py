"""Every `/v3/...` route also answers at the same path without `/v3` (fidelity.md A: the Java
and Rust SDKs call `/payments`, `/payouts`, `/merchant-accounts`... against a base URL that
ends in `/v3/`), by the same handler: the same answers, the signature over the path as sent."""

from __future__ import annotations

from typing import Any

import httpx
from e2e_helpers import assert_invalid, assert_problem, wait_record_status
from payout_helpers import SORT_CODE, external_beneficiary, funded_merchant

from support.api import Operator
from support.server import RunningServer

HTTP_METHODS = {"get", "post", "put", "patch", "delete"}


def test_every_v3_operation_is_documented_without_the_prefix_too(server: RunningServer) -> None:
    spec: dict[str, Any] = httpx.get(f"{server.base_url}/openapi.json", timeout=30).json()
    paths = spec["paths"]
    v3 = [path for path in paths if path.startswith("/v3/")]
    assert "/v3/payouts/{payout_id}" in v3
    missing = [
        f"{method.upper()} {path}"
        for path in v3
        for method in set(paths[path]) & HTTP_METHODS
        if method not in paths.get(path.removeprefix("/v3"), {})
    ]
    assert not missing, missing


def test_a_payout_is_created_and_read_without_the_prefix(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=5_000)
    body = {
        "merchant_account_id": merchant.accounts["GBP"]["id"],
        "amount_in_minor": 1_000,
        "currency": "GBP",
        "beneficiary": external_beneficiary(SORT_CODE),
    }
    # Signed over `/payouts`, the path as sent, as an SDK with a `/v3/` base URL signs it.
    accepted = merchant.signed_post("/payouts", body)
    assert accepted.status_code == 202, accepted.text
    payout_id = accepted.json()["id"]
    # Once it has ended, so that both reads see the same state.
    wait_record_status(merchant, f"/payouts/{payout_id}", {"executed", "failed"})
    short, long = merchant.get(f"/payouts/{payout_id}"), merchant.get(f"/v3/payouts/{payout_id}")
    assert short.status_code == long.status_code == 200, short.text
    assert short.json() == long.json()
    assert short.json()["amount_in_minor"] == 1_000


def test_reads_and_errors_are_the_same_under_both_paths(
    operator: Operator, server: RunningServer
) -> None:
    merchant = funded_merchant(operator, gbp=100)
    accounts = merchant.get("/merchant-accounts")
    assert accounts.status_code == 200, accounts.text
    assert accounts.json() == merchant.get("/v3/merchant-accounts").json()
    assert_invalid(merchant.get("/payouts/not-a-uuid"), "payout_id")
    assert_problem(httpx.get(f"{server.base_url}/payouts", timeout=30), 401)
    # A path that is not an operation stays a 404, with or without the prefix.
    assert_problem(merchant.get("/v3/v3/payouts"), 404)
