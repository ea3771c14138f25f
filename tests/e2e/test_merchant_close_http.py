"""A production merchant ends by being closed (`POST /admin/merchants/{id}/close`): its clients,
keys and console users stop working and its history stays. Removing it
(`DELETE /admin/merchants/{id}`) is refused while it has ledger history, and the sandbox reset
does not exist in production."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_helpers import assert_problem
from pay_in_helpers import RETURN_URI, authorised_pay_in, settled_payment

from support.api import MerchantClient, Operator
from support.server import STAGING, RunningServer, own_server

USER = {"id": "close-user-1", "name": "Ada Payer", "email": "ada@example.com"}


@pytest.fixture(scope="module")
def production(pg_server: str) -> Iterator[RunningServer]:
    """A production-mode server with the mock providers on (a staging deployment), so that
    money can move; the conftest's `prod_operator` is its operator API."""
    with own_server(pg_server, STAGING) as running:
        yield running


def _merchant_with_history(operator: Operator) -> MerchantClient:
    """A merchant with one settled pay-in (ledger history)."""
    merchant = operator.new_merchant()
    allowed = operator.put(
        f"/admin/merchants/{merchant.merchant_id}/return-uris", {"uris": [RETURN_URI]}
    )
    assert allowed.status_code == 200, allowed.text
    settled_payment(merchant, authorised_pay_in(merchant, 2_500, USER))
    return merchant


def test_closing_revokes_every_credential_and_keeps_the_history(prod_operator: Operator) -> None:
    merchant = _merchant_with_history(prod_operator)
    user = prod_operator.post(
        f"/admin/merchants/{merchant.merchant_id}/console-users", {"email": "ops@shop.example"}
    )
    assert user.status_code == 201, user.text
    token = merchant.token()

    closed = prod_operator.post(f"/admin/merchants/{merchant.merchant_id}/close", {})

    assert closed.status_code == 200, closed.text
    assert closed.json()["id"] == merchant.merchant_id
    assert closed.json()["closed_at"]
    refused = merchant.http.get(
        "/v3/merchant-accounts", headers={"Authorization": f"Bearer {token}"}
    )
    assert refused.status_code == 401
    no_token = merchant.http.post(
        "/connect/token",
        data={
            "grant_type": "client_credentials",
            "client_id": merchant.client_id,
            "client_secret": merchant.client_secret,
        },
    )
    assert no_token.status_code in (400, 401)
    for path, body in (
        (f"/admin/merchants/{merchant.merchant_id}/clients", {}),
        (f"/admin/merchants/{merchant.merchant_id}/console-users", {"email": "new@shop.example"}),
    ):
        assert_problem(prod_operator.post(path, body), 409)
    again = prod_operator.post(f"/admin/merchants/{merchant.merchant_id}/close", {})
    assert again.json()["closed_at"] == closed.json()["closed_at"]
    assert merchant.merchant_id in {m["id"] for m in prod_operator.get("/admin/merchants").json()}
    assert prod_operator.get("/admin/ledger/check").json()["violations"] == []


def test_deleting_is_refused_while_ledger_history_exists(prod_operator: Operator) -> None:
    merchant = _merchant_with_history(prod_operator)

    refused = prod_operator.http.delete(f"/admin/merchants/{merchant.merchant_id}")

    problem = assert_problem(refused, 409)
    assert f"/admin/merchants/{merchant.merchant_id}/close" in problem["detail"]
    assert (
        merchant.get(f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}").json()[
            "current_balance_in_minor"
        ]
        == 2_500
    )  # nothing was removed


def test_a_merchant_without_history_can_be_deleted(prod_operator: Operator) -> None:
    merchant = prod_operator.new_merchant()
    assert prod_operator.http.delete(f"/admin/merchants/{merchant.merchant_id}").status_code == 204
    assert merchant.merchant_id not in {
        m["id"] for m in prod_operator.get("/admin/merchants").json()
    }


def test_there_is_no_sandbox_reset_in_production(prod_operator: Operator) -> None:
    merchant = prod_operator.new_merchant()
    answer = prod_operator.post(f"/sandbox/merchants/{merchant.merchant_id}/reset", {})
    assert_problem(answer, 404)
