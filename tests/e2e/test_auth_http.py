"""`/connect/token` and bearer-token checks, over HTTP against a running server (docs/api.md)."""

from __future__ import annotations

import httpx
import pytest
from e2e_helpers import assert_problem, bearer, fresh_token

from support.api import MerchantClient, Operator
from support.server import RunningServer


def _grant(merchant: MerchantClient, **overrides: str) -> dict[str, str]:
    return {
        "grant_type": "client_credentials",
        "client_id": merchant.client_id,
        "client_secret": merchant.client_secret,
        **overrides,
    }


def _assert_token_answer(answer: httpx.Response) -> dict[str, object]:
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    body = answer.json()
    assert set(body) == {"access_token", "expires_in", "token_type", "scope"}
    assert isinstance(body["access_token"], str)
    assert body["access_token"]
    assert body["expires_in"] == 3600
    assert body["token_type"] == "Bearer"
    assert body["scope"] == "payments"
    return body


def _assert_oauth_error(answer: httpx.Response, error: str) -> None:
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.json()["error"] == error


def test_form_encoded_token_request_grants_a_working_token(operator: Operator) -> None:
    merchant = operator.new_merchant()
    body = _assert_token_answer(merchant.http.post("/connect/token", data=_grant(merchant)))
    listed = merchant.http.get("/v3/merchant-accounts", headers=bearer(str(body["access_token"])))
    assert listed.status_code == 200


def test_json_token_request_grants_a_working_token(operator: Operator) -> None:
    merchant = operator.new_merchant()
    body = _assert_token_answer(merchant.http.post("/connect/token", json=_grant(merchant)))
    listed = merchant.http.get("/v1/balances", headers=bearer(str(body["access_token"])))
    assert listed.status_code == 200


def test_explicit_payments_scope_is_granted(operator: Operator) -> None:
    merchant = operator.new_merchant()
    answer = merchant.http.post("/connect/token", data=_grant(merchant, scope="payments"))
    _assert_token_answer(answer)


@pytest.mark.parametrize("as_json", [False, True], ids=["form", "json"])
def test_wrong_secret_is_invalid_client(operator: Operator, as_json: bool) -> None:
    merchant = operator.new_merchant()
    fields = _grant(merchant, client_secret=merchant.client_secret + "x")
    answer = (
        merchant.http.post("/connect/token", json=fields)
        if as_json
        else merchant.http.post("/connect/token", data=fields)
    )
    _assert_oauth_error(answer, "invalid_client")
    assert "access_token" not in answer.json()


@pytest.mark.parametrize("scope", [None, 5, True, ["payments"], {"payments": True}])
def test_json_scope_that_is_not_a_string_is_invalid_request(
    operator: Operator, scope: object
) -> None:
    """Absent, `scope` means every scope of the client; JSON null is not absent."""
    merchant = operator.new_merchant()
    answer = merchant.http.post("/connect/token", json={**_grant(merchant), "scope": scope})
    _assert_oauth_error(answer, "invalid_request")
    assert "access_token" not in answer.json()
    assert "scope" in answer.json()["error_description"]


def test_unknown_client_is_invalid_client(operator: Operator) -> None:
    merchant = operator.new_merchant()
    answer = merchant.http.post(
        "/connect/token", data=_grant(merchant, client_id="sandbox-doesnotexist")
    )
    _assert_oauth_error(answer, "invalid_client")


def test_scope_not_granted_to_client_is_invalid_scope(operator: Operator) -> None:
    merchant = operator.new_merchant()
    for scope in ("recurring_payments:sweeping", "payments recurring_payments:sweeping"):
        answer = merchant.http.post("/connect/token", data=_grant(merchant, scope=scope))
        _assert_oauth_error(answer, "invalid_scope")


@pytest.mark.parametrize("grant_type", ["password", "authorization_code", "refresh_token"])
def test_other_grant_types_are_unsupported(operator: Operator, grant_type: str) -> None:
    merchant = operator.new_merchant()
    answer = merchant.http.post("/connect/token", data=_grant(merchant, grant_type=grant_type))
    _assert_oauth_error(answer, "unsupported_grant_type")


def test_client_without_scopes_gets_a_token_but_403_invalid_audience(operator: Operator) -> None:
    merchant = operator.new_merchant(scopes=[])
    answer = merchant.http.post("/connect/token", data=_grant(merchant))
    assert answer.status_code == 200, answer.text
    token = answer.json()["access_token"]
    for path in ("/v3/merchant-accounts", "/v1/balances"):
        denied = merchant.http.get(path, headers=bearer(token))
        problem = assert_problem(denied, 403, "Forbidden")
        assert "InvalidAudience" in problem["detail"]
        assert problem["type"].endswith("/errors#forbidden")


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer not-a-jwt"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {
            "Authorization": "Bearer eyJhbGciOiJIUzI1NiJ9."
            "eyJzdWIiOiJ4IiwiZXhwIjo5OTk5OTk5OTk5fQ.c2lnbmF0dXJl"
        },
    ],
    ids=["none", "empty", "garbage", "basic", "forged-jwt"],
)
def test_missing_or_bad_token_is_401_unauthenticated(
    server: RunningServer, headers: dict[str, str]
) -> None:
    answer = httpx.get(f"{server.base_url}/v3/merchant-accounts", headers=headers)
    problem = assert_problem(answer, 401, "Unauthenticated")
    assert problem["type"].endswith("/errors#unauthenticated")


def test_tampered_token_is_401(operator: Operator) -> None:
    merchant = operator.new_merchant()
    token = fresh_token(merchant)["access_token"]
    head, payload, signature = token.split(".")
    tampered = f"{head}.{payload}.{signature[:-4]}{'AAAA' if signature[-4:] != 'AAAA' else 'BBBB'}"
    answer = merchant.http.get("/v3/merchant-accounts", headers=bearer(tampered))
    assert_problem(answer, 401, "Unauthenticated")


def test_operator_token_is_not_a_merchant_token(operator: Operator, server: RunningServer) -> None:
    answer = httpx.get(
        f"{server.base_url}/v3/merchant-accounts", headers=bearer(server.admin_token)
    )
    assert_problem(answer, 401, "Unauthenticated")


def test_token_expires_after_an_hour_of_service_time(operator: Operator) -> None:
    merchant = operator.new_merchant()
    token = fresh_token(merchant)["access_token"]
    assert merchant.http.get("/v3/merchant-accounts", headers=bearer(token)).status_code == 200

    advanced = operator.post("/sandbox/clock/advance", {"seconds": 3500})
    assert advanced.status_code == 200, advanced.text
    still = merchant.http.get("/v3/merchant-accounts", headers=bearer(token))
    assert still.status_code == 200, "a token is valid for its whole hour"

    advanced = operator.post("/sandbox/clock/advance", {"seconds": 101})
    assert advanced.status_code == 200, advanced.text
    expired = merchant.http.get("/v3/merchant-accounts", headers=bearer(token))
    problem = assert_problem(expired, 401, "Unauthenticated")
    assert "expired" in problem["detail"].lower()

    renewed = fresh_token(merchant)["access_token"]
    assert merchant.http.get("/v3/merchant-accounts", headers=bearer(renewed)).status_code == 200
