"""`/openapi.json` as served: the routes a client generator needs, with their errors
(docs/api.md)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from e2e_helpers import assert_problem

from support.server import RunningServer

DOCUMENTED = {
    "/connect/token": "post",
    "/v3/merchant-accounts": "get",
    "/v3/merchant-accounts/{merchant_account_id}": "get",
    "/v3/merchant-accounts/{merchant_account_id}/transactions": "get",
    "/v1/balances": "get",
    "/admin/merchants": "post",
    "/admin/merchants/{merchant_id}/clients": "post",
    "/admin/merchants/{merchant_id}/signing-keys": "post",
    "/admin/merchants/{merchant_id}/webhooks": "put",
    "/admin/merchants/{merchant_id}/merchant-accounts": "post",
    "/admin/merchant-accounts/{merchant_account_id}/balance-threshold": "put",
    "/admin/screening-list": "post",
    "/admin/ledger/check": "get",
    "/sandbox/bank-transfers": "post",
    "/sandbox/clock": "get",
    "/sandbox/clock/advance": "post",
}
AUTHENTICATED_PREFIXES = ("/v1/", "/v3/", "/admin/", "/sandbox/")
HTTP_METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.fixture(scope="module")
def spec(server: RunningServer) -> dict[str, Any]:
    answer = httpx.get(f"{server.base_url}/openapi.json")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/json")
    parsed: dict[str, Any] = json.loads(answer.content)
    return parsed


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
    ]


def _authenticated(path: str) -> bool:
    return path.startswith(AUTHENTICATED_PREFIXES) and path != "/v3/payments-provider-return"


def test_openapi_is_an_openapi_3_document(spec: dict[str, Any]) -> None:
    assert str(spec["openapi"]).startswith("3.")
    assert spec["info"]["title"]
    assert spec["info"]["version"]


def test_no_documentation_page_loads_scripts_from_elsewhere(server: RunningServer) -> None:
    # Bankrail fetches nothing at run time: the API reference's scripts are served by Bankrail
    # itself (from the fastapi-offline package), and FastAPI's ReDoc page, whose script
    # would come from a CDN, is not served.
    for path in ("/docs", "/docs/oauth2-redirect"):
        page = httpx.get(f"{server.base_url}{path}", timeout=30)
        assert page.status_code == 200, path
        assert not re.findall(r'(?:src|href)="(?:https?:)?//', page.text), path
    assert_problem(httpx.get(f"{server.base_url}/redoc", timeout=30), 404)


def test_openapi_documents_the_routes_users_call(spec: dict[str, Any]) -> None:
    missing = [
        f"{method.upper()} {path}"
        for path, method in DOCUMENTED.items()
        if method not in spec["paths"].get(path, {})
    ]
    assert not missing, missing


def test_token_endpoint_documents_form_and_json_bodies(spec: dict[str, Any]) -> None:
    operation = spec["paths"]["/connect/token"]["post"]
    content = operation["requestBody"]["content"]
    assert "application/x-www-form-urlencoded" in content
    assert "application/json" in content
    assert "200" in operation["responses"]
    assert "400" in operation["responses"]


def test_every_authenticated_route_documents_401(spec: dict[str, Any]) -> None:
    lacking = [
        f"{method.upper()} {path}"
        for path, method, operation in _operations(spec)
        if _authenticated(path) and "401" not in operation["responses"]
    ]
    assert not lacking, lacking


def test_every_route_taking_a_credential_documents_429_with_retry_after(
    spec: dict[str, Any],
) -> None:
    # Wrong credentials are limited per address and identity (docs/operations.md).
    lacking = []
    for path, method, operation in _operations(spec):
        if not (operation.get("security") or path == "/connect/token"):
            continue
        answer = operation["responses"].get("429", {})
        retry_after = answer.get("headers", {}).get("Retry-After", {})
        if "wrong credentials" not in answer.get("description", "") or not retry_after.get(
            "required"
        ):
            lacking.append(f"{method.upper()} {path}")
    assert not lacking, lacking
    assert spec["paths"]["/admin/merchants"]["post"]["security"] == [{"operatorToken": []}]


def test_merchant_routes_document_403_and_their_404s(spec: dict[str, Any]) -> None:
    for path in ("/v3/merchant-accounts", "/v1/balances"):
        assert "403" in spec["paths"][path]["get"]["responses"], path
    for path in (
        "/v3/merchant-accounts/{merchant_account_id}",
        "/v3/merchant-accounts/{merchant_account_id}/transactions",
    ):
        responses = spec["paths"][path]["get"]["responses"]
        assert {"400", "401", "403", "404"} <= set(responses), path


def test_routes_with_input_document_400(spec: dict[str, Any]) -> None:
    lacking = [
        f"{method.upper()} {path}"
        for path, method, operation in _operations(spec)
        if (operation.get("parameters") or operation.get("requestBody"))
        and "400" not in operation["responses"]
    ]
    assert not lacking, lacking


def test_routes_taking_an_idempotency_key_document_409_and_422(spec: dict[str, Any]) -> None:
    lacking = [
        f"{method.upper()} {path}"
        for path, method, operation in _operations(spec)
        if any(
            p.get("in") == "header" and p.get("name", "").lower() == "idempotency-key"
            for p in operation.get("parameters", [])
        )
        and not {"409", "422"} <= set(operation["responses"])
    ]
    assert not lacking, lacking


def test_error_responses_are_documented_as_problem_json(spec: dict[str, Any]) -> None:
    wrong: list[str] = []
    for path, method, operation in _operations(spec):
        if path == "/connect/token":
            continue  # RFC 6749 errors, the documented exception
        for status, response in operation["responses"].items():
            if not status.startswith(("4", "5")):
                continue
            content = response.get("content", {})
            schema = content.get("application/problem+json", {}).get("schema", {})
            if "Problem" not in json.dumps(schema) or "HTTPValidationError" in json.dumps(content):
                wrong.append(f"{method.upper()} {path} {status}")
    assert not wrong, wrong


def test_every_schema_has_its_own_name_for_generated_clients(spec: dict[str, Any]) -> None:
    # Two models of one name are documented under their module paths
    # (`bankrail__payouts__schemas__Verification`), which a generator turns into class names.
    names = list(spec["components"]["schemas"])
    assert [name for name in names if "__" in name] == []
    assert {"SortCodeAccountNumber", "PayoutVerification", "Verification"} <= set(names)
