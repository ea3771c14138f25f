"""`/openapi.json` is a document a generator can use: it validates, declares who may call each
operation and the headers it takes, lists the webhooks, and `openapi-python-client` makes a
client from it that works against a real server."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate
from payout_helpers import SORT_CODE, external_beneficiary, funded_merchant

from bankrail.events.schemas import WEBHOOKS
from support.api import Operator
from support.server import RunningServer

HTTP_METHODS = {"get", "post", "put", "patch", "delete"}
# Operations open to anyone (the token endpoint authenticates by its body; the provider
# return carries the bank's answer; v2 provider search takes a client_id query).
OPEN = {
    "/connect/token",
    "/v3/payments-provider-return",
    "/payments-provider-return",
    "/v2/single-immediate-payments-providers",
    "/.well-known/jwks",
    "/healthz",
    "/readyz",
}


@pytest.fixture(scope="module")
def spec(server: RunningServer) -> dict[str, Any]:
    answer = httpx.get(f"{server.base_url}/openapi.json")
    assert answer.status_code == 200, answer.text
    parsed: dict[str, Any] = answer.json()
    return parsed


def _operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield path, method, operation


def _headers(operation: dict[str, Any]) -> dict[str, bool]:
    return {
        p["name"]: p["required"] for p in operation.get("parameters", []) if p["in"] == "header"
    }


def test_the_document_is_valid_openapi_3_1(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.1")
    validate(spec)


def test_every_operation_that_needs_a_token_declares_its_bearer_scheme(
    spec: dict[str, Any],
) -> None:
    schemes = spec["components"]["securitySchemes"]
    assert all(s == {**s, "type": "http", "scheme": "bearer"} for s in schemes.values())
    for path, method, operation in _operations(spec):
        declared = [name for requirement in operation.get("security", []) for name in requirement]
        assert all(name in schemes for name in declared), (path, declared)
        if path in OPEN:
            assert declared == [], (method, path)
        elif path == "/metrics":  # the operator token is required in production mode only
            assert operation["security"] == [{}, {"operatorToken": []}]
        elif path.startswith(("/admin/", "/sandbox/")):
            assert declared == ["operatorToken"], (method, path)
        elif path.startswith("/mock-bank/"):
            assert declared == ["mockBankToken"], (method, path)
        else:
            assert "merchantToken" in declared, (method, path)


def test_signed_operations_declare_their_signature_and_idempotency_key(
    spec: dict[str, Any],
) -> None:
    paths = spec["paths"]
    assert _headers(paths["/v1/payouts"]["post"]) == {"X-SVC-Signature": True}
    for path in ("/v3/payouts", "/v3/payments", "/payments"):
        assert _headers(paths[path]["post"]) == {"Svc-Signature": True, "Idempotency-Key": True}
    # Payment actions take the merchant's token (signed, with a key) or the resource token.
    for path in (
        "/v3/payments/{payment_id}/authorization-flow",
        "/v3/payments/{payment_id}/actions/cancel",
    ):
        assert _headers(paths[path]["post"]) == {"Svc-Signature": False, "Idempotency-Key": False}
    for path, method, operation in _operations(spec):
        if method == "get":
            assert "Svc-Signature" not in _headers(operation), path
        if (
            method == "post"
            and path.startswith("/v3/")
            and "merchantToken" in str(operation.get("security"))
        ):
            if path.endswith("/search"):
                continue  # provider search is not signed
            assert "Svc-Signature" in _headers(operation), path


def test_every_webhook_is_declared_with_its_payload(spec: dict[str, Any]) -> None:
    assert set(spec["webhooks"]) == set(WEBHOOKS)
    schemas = spec["components"]["schemas"]
    for name, item in spec["webhooks"].items():
        body = item["post"]["requestBody"]["content"]["application/json"]["schema"]
        model = schemas[body["$ref"].rsplit("/", 1)[1]]
        discriminator = "event_type" if "event_type" in model["properties"] else "type"
        assert model["properties"][discriminator]["const"] == name.removeprefix("v1."), name
        assert set(_headers(item["post"])) == {"Svc-Signature", "X-SVC-Webhook-Timestamp"}


def _enums(node: Any) -> Iterator[list[Any]]:
    if isinstance(node, dict):
        if isinstance(node.get("enum"), list):
            yield node["enum"]
        for child in node.values():
            yield from _enums(child)
    elif isinstance(node, list):
        for child in node:
            yield from _enums(child)


def test_no_enum_repeats_a_value_in_another_case(spec: dict[str, Any]) -> None:
    enums = list(_enums(spec))
    assert enums
    for values in enums:
        folded = [v.casefold() if isinstance(v, str) else v for v in values]
        assert len(folded) == len(set(folded)), values
    v1_type = next(
        p for p in spec["paths"]["/v1/transactions"]["get"]["parameters"] if p["name"] == "type"
    )
    assert "Payout" in json.dumps(v1_type)
    assert "payout" not in json.dumps(v1_type).replace("Payout", "")


def test_v1_transactions_still_accepts_both_spellings_of_type(
    operator: Operator, server: RunningServer
) -> None:
    merchant = funded_merchant(operator, eur=500)
    for spelling in ("Topup", "topup", "TOPUP"):
        answer = merchant.get("/v1/transactions", type=spelling)
        if spelling == "TOPUP":
            assert answer.status_code == 400, answer.text
            continue
        assert answer.status_code == 200, answer.text
        assert [r["type"].lower() for r in answer.json()["results"]] == ["topup"], spelling


@pytest.fixture(scope="module")
def generated(spec: dict[str, Any]) -> Iterator[ModuleType]:
    """A client package generated from the served document, imported."""
    with tempfile.TemporaryDirectory(prefix="bankrail-client-") as tmp:
        root = Path(tmp)
        (root / "openapi.json").write_text(json.dumps(spec))
        (root / "config.yaml").write_text("post_hooks: []\n")
        package = f"bankrail_api_{uuid.uuid4().hex[:8]}"
        generator = Path(sys.executable).parent / "openapi-python-client"
        done = subprocess.run(
            [
                str(generator),
                "generate",
                "--path",
                str(root / "openapi.json"),
                "--output-path",
                str(root / package),
                "--meta",
                "none",
                "--config",
                str(root / "config.yaml"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "NO_COLOR": "1"},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        sys.path.insert(0, str(root))
        try:
            yield importlib.import_module(package)
        finally:
            sys.path.remove(str(root))
            for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
                del sys.modules[name]


def test_a_generated_client_reads_accounts_and_a_payout(
    generated: ModuleType, operator: Operator, server: RunningServer
) -> None:
    merchant = funded_merchant(operator, gbp=5_000)
    accepted = merchant.signed_post(
        "/v3/payouts",
        {
            "merchant_account_id": merchant.accounts["GBP"]["id"],
            "amount_in_minor": 1_200,
            "currency": "GBP",
            "beneficiary": external_beneficiary(SORT_CODE),
        },
    )
    assert accepted.status_code == 202, accepted.text
    payout_id = accepted.json()["id"]
    package = generated.__name__
    accounts_api = importlib.import_module(
        f"{package}.api.merchant_accounts.list_merchant_accounts_v3_merchant_accounts_get"
    )
    payout_api = importlib.import_module(
        f"{package}.api.payouts_v3.get_v3_payout_v3_payouts_payout_id_get"
    )
    with generated.AuthenticatedClient(base_url=server.base_url, token=merchant.token()) as client:
        accounts = accounts_api.sync(client=client)
        assert sorted(a.currency for a in accounts.items) == ["EUR", "GBP"]
        gbp = next(a for a in accounts.items if a.currency == "GBP")
        assert gbp.id == merchant.accounts["GBP"]["id"]
        payout = payout_api.sync(client=client, payout_id=uuid.UUID(payout_id))
        assert payout.id == payout_id
        assert payout.amount_in_minor == 1_200
        assert payout.merchant_account_id == merchant.accounts["GBP"]["id"]
        missing = payout_api.sync_detailed(client=client, payout_id=uuid.uuid4())
        assert missing.status_code == 404
