"""The operator API over HTTP (docs/operations.md): merchants, clients, keys, webhooks, accounts."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from e2e_helpers import (
    assert_invalid,
    assert_problem,
    bearer,
    fresh_token,
    identifier,
    is_uuid,
    service_now,
)
from schwifty import IBAN

from bankrail.security import signing
from support.api import Operator
from support.server import RunningServer


def _merchant(operator: Operator, name: str = "Operator Test Ltd") -> dict[str, Any]:
    answer = operator.post("/admin/merchants", {"name": name})
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _p521_pem() -> str:
    return signing.public_key_pem(signing.generate_private_key().public_key())


def _public_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


# merchants and clients


def test_create_merchant_answers_201_with_id_and_name(operator: Operator) -> None:
    answer = operator.post("/admin/merchants", {"name": "Acme Payments Ltd"})
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert set(body) == {"id", "name"}
    assert is_uuid(body["id"])
    assert body["name"] == "Acme Payments Ltd"
    listed = operator.get("/admin/merchants").json()
    assert {"id": body["id"], "name": "Acme Payments Ltd"} in listed


def test_new_merchant_has_no_accounts(operator: Operator) -> None:
    merchant = operator.new_merchant(currencies=())
    token = fresh_token(merchant)["access_token"]
    listed = merchant.http.get("/v3/merchant-accounts", headers=bearer(token))
    assert listed.status_code == 200
    assert listed.json() == {"items": []}


def test_client_credentials_are_issued_and_work(operator: Operator, server: RunningServer) -> None:
    merchant = _merchant(operator)
    answer = operator.post(f"/admin/merchants/{merchant['id']}/clients", {})
    assert answer.status_code == 201, answer.text
    client = answer.json()
    assert isinstance(client["client_id"], str)
    assert client["client_id"]
    assert isinstance(client["client_secret"], str)
    assert len(client["client_secret"]) >= 20
    token = httpx.post(
        f"{server.base_url}/connect/token",
        data={
            "grant_type": "client_credentials",
            "client_id": client["client_id"],
            "client_secret": client["client_secret"],
        },
    )
    assert token.status_code == 200, token.text
    assert token.json()["scope"] == "payments"


def test_two_clients_of_one_merchant_get_distinct_credentials(operator: Operator) -> None:
    merchant = _merchant(operator)
    first = operator.post(f"/admin/merchants/{merchant['id']}/clients", {}).json()
    second = operator.post(f"/admin/merchants/{merchant['id']}/clients", {}).json()
    assert first["client_id"] != second["client_id"]
    assert first["client_secret"] != second["client_secret"]


def test_client_scopes_must_be_a_list_of_strings(operator: Operator) -> None:
    merchant = _merchant(operator)
    answer = operator.post(f"/admin/merchants/{merchant['id']}/clients", {"scopes": "payments"})
    assert_invalid(answer, "scopes")


# signing keys


def test_signing_key_registration_generates_a_kid(operator: Operator) -> None:
    merchant = _merchant(operator)
    answer = operator.post(
        f"/admin/merchants/{merchant['id']}/signing-keys", {"public_key_pem": _p521_pem()}
    )
    assert answer.status_code == 201, answer.text
    assert set(answer.json()) == {"kid"}
    assert answer.json()["kid"]


def test_signing_key_registration_keeps_a_given_kid(operator: Operator) -> None:
    merchant = _merchant(operator)
    pem = _p521_pem()
    path = f"/admin/merchants/{merchant['id']}/signing-keys"
    answer = operator.post(path, {"public_key_pem": pem, "kid": "my-key-2026"})
    assert answer.status_code == 201, answer.text
    assert answer.json() == {"kid": "my-key-2026"}
    again = operator.post(path, {"public_key_pem": pem, "kid": "my-key-2026"})
    assert again.status_code == 201, "registering the same key again is harmless"
    assert again.json() == {"kid": "my-key-2026"}


def test_same_kid_with_another_key_is_409(operator: Operator) -> None:
    merchant = _merchant(operator)
    path = f"/admin/merchants/{merchant['id']}/signing-keys"
    assert operator.post(path, {"public_key_pem": _p521_pem(), "kid": "k1"}).status_code == 201
    clash = operator.post(path, {"public_key_pem": _p521_pem(), "kid": "k1"})
    problem = assert_problem(clash, 409, "Conflict")
    assert problem["type"].endswith("/errors#conflict")


def test_the_same_kid_may_be_used_by_two_merchants(operator: Operator) -> None:
    for name in ("First", "Second"):
        merchant = _merchant(operator, name)
        answer = operator.post(
            f"/admin/merchants/{merchant['id']}/signing-keys",
            {"public_key_pem": _p521_pem(), "kid": "shared-kid"},
        )
        assert answer.status_code == 201, answer.text


@pytest.mark.parametrize(
    "pem",
    [
        "not a pem",
        "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
        _public_pem(ec.generate_private_key(ec.SECP256R1())),
        _public_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        signing.private_key_pem(signing.generate_private_key()),
    ],
    ids=["garbage", "bad-base64", "p256", "rsa", "private-key"],
)
def test_unusable_public_key_is_400(operator: Operator, pem: str) -> None:
    merchant = _merchant(operator)
    answer = operator.post(
        f"/admin/merchants/{merchant['id']}/signing-keys", {"public_key_pem": pem}
    )
    assert_invalid(answer, "public_key_pem")


# webhooks


def test_webhook_uris_are_set_and_cleared_with_null(operator: Operator) -> None:
    merchant = _merchant(operator)
    path = f"/admin/merchants/{merchant['id']}/webhooks"
    both = {"payments_uri": "http://127.0.0.1:9/payments", "payouts_uri": "https://x.test/po"}
    answer = operator.put(path, both)
    assert answer.status_code == 200, answer.text
    assert answer.json() == both

    only_payments = operator.put(path, {"payments_uri": "http://127.0.0.1:9/p2"})
    assert only_payments.status_code == 200
    assert only_payments.json() == {
        "payments_uri": "http://127.0.0.1:9/p2",
        "payouts_uri": "https://x.test/po",
    }, "a field left out keeps its value"

    cleared = operator.put(path, {"payments_uri": None})
    assert cleared.status_code == 200
    assert cleared.json() == {"payments_uri": None, "payouts_uri": "https://x.test/po"}


@pytest.mark.parametrize(
    "uri",
    [
        "ftp://example.com/hook",
        "example.com/hook",
        "mailto:ops@example.com",
        "http://",
        "http://[::1/hook",  # not even parsable: a 400, not a 500
    ],
)
def test_webhook_uri_must_be_absolute_http(operator: Operator, uri: str) -> None:
    merchant = _merchant(operator)
    answer = operator.put(f"/admin/merchants/{merchant['id']}/webhooks", {"payments_uri": uri})
    assert_invalid(answer, "payments_uri")


# merchant accounts


def test_gbp_account_has_sort_code_account_number_and_iban(operator: Operator) -> None:
    merchant = _merchant(operator, "Pounds Ltd")
    answer = operator.post(
        f"/admin/merchants/{merchant['id']}/merchant-accounts", {"currency": "GBP"}
    )
    assert answer.status_code == 201, answer.text
    account = answer.json()
    assert is_uuid(account["id"])
    assert account["currency"] == "GBP"
    assert account["account_holder_name"] == "Pounds Ltd"
    assert account["current_balance_in_minor"] == 0
    assert account["available_balance_in_minor"] == 0
    assert [i["type"] for i in account["account_identifiers"]] == [
        "sort_code_account_number",
        "iban",
    ]
    scan = identifier(account, "sort_code_account_number")
    assert len(scan["sort_code"]) == 6
    assert scan["sort_code"].isdigit()
    assert len(scan["account_number"]) == 8
    assert scan["account_number"].isdigit()
    iban = IBAN(identifier(account, "iban")["iban"])  # raises when the checksum is wrong
    assert iban.country_code == "GB"
    assert str(iban) == identifier(account, "iban")["iban"], "IBAN in compact form"
    assert iban.bban[4:] == scan["sort_code"] + scan["account_number"]


def test_eur_account_has_only_an_iban(operator: Operator) -> None:
    merchant = _merchant(operator)
    answer = operator.post(
        f"/admin/merchants/{merchant['id']}/merchant-accounts",
        {"currency": "EUR", "account_holder_name": "Euro Holder GmbH"},
    )
    assert answer.status_code == 201, answer.text
    account = answer.json()
    assert account["currency"] == "EUR"
    assert account["account_holder_name"] == "Euro Holder GmbH"
    assert [i["type"] for i in account["account_identifiers"]] == ["iban"]
    iban = IBAN(identifier(account, "iban")["iban"])
    assert iban.country_code != "GB", "EUR accounts are reached over SEPA"


def test_created_account_reads_the_same_through_the_merchant_api(operator: Operator) -> None:
    merchant = operator.new_merchant()
    token = fresh_token(merchant)["access_token"]
    for created in merchant.accounts.values():
        read = merchant.http.get(f"/v3/merchant-accounts/{created['id']}", headers=bearer(token))
        assert read.status_code == 200
        assert read.json() == created


def test_every_account_gets_its_own_identifiers(operator: Operator) -> None:
    merchant = _merchant(operator)
    path = f"/admin/merchants/{merchant['id']}/merchant-accounts"
    accounts = [operator.post(path, {"currency": "GBP"}).json() for _ in range(3)]
    ibans = {identifier(a, "iban")["iban"] for a in accounts}
    assert len(ibans) == 3


@pytest.mark.parametrize("currency", ["USD", "gbp", "", 826, None])
def test_account_currency_must_be_gbp_or_eur(operator: Operator, currency: object) -> None:
    merchant = _merchant(operator)
    answer = operator.post(
        f"/admin/merchants/{merchant['id']}/merchant-accounts", {"currency": currency}
    )
    assert_invalid(answer, "currency")


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("POST", "clients", {}),
        ("POST", "clients", {"scopes": ["payments"]}),
        ("POST", "signing-keys", {"public_key_pem": _p521_pem()}),
        ("POST", "signing-keys", {"public_key_pem": _p521_pem(), "kid": "kid-1"}),
        ("PUT", "webhooks", {"payments_uri": "http://127.0.0.1:9/x"}),
        ("PUT", "webhooks", {"payouts_uri": None}),
        ("POST", "merchant-accounts", {"currency": "GBP"}),
        # With a holder name given the merchant's name is not looked up: the account row
        # itself met the missing merchant (a foreign-key violation answered 500).
        ("POST", "merchant-accounts", {"currency": "GBP", "account_holder_name": "Jane"}),
        ("POST", "merchant-accounts", {"currency": "EUR", "account_holder_name": "Jane"}),
    ],
)
def test_unknown_merchant_is_404(
    operator: Operator, method: str, suffix: str, body: dict[str, Any]
) -> None:
    answer = operator.http.request(method, f"/admin/merchants/{uuid.uuid4()}/{suffix}", json=body)
    problem = assert_problem(answer, 404, "Not Found")
    assert problem["type"].endswith("/errors#not-found")


def test_non_uuid_merchant_id_is_a_client_error(operator: Operator) -> None:
    answer = operator.post("/admin/merchants/not-a-uuid/merchant-accounts", {"currency": "GBP"})
    assert answer.status_code in (400, 404)
    assert_problem(answer, answer.status_code)


# balance thresholds


def test_balance_threshold_is_set_and_cleared(operator: Operator) -> None:
    merchant = operator.new_merchant(currencies=("GBP",))
    account_id = merchant.accounts["GBP"]["id"]
    path = f"/admin/merchant-accounts/{account_id}/balance-threshold"
    answer = operator.put(path, {"threshold_in_minor": 50_000})
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] == account_id
    assert answer.json()["balance_threshold_in_minor"] == 50_000

    zero = operator.put(path, {"threshold_in_minor": 0})
    assert zero.status_code == 200

    cleared = operator.put(path, {"threshold_in_minor": None})
    assert cleared.status_code == 200
    assert cleared.json()["balance_threshold_in_minor"] is None


@pytest.mark.parametrize("threshold", [-1, "100", 1.5, 2**63])
def test_balance_threshold_must_be_a_non_negative_integer(
    operator: Operator, threshold: object
) -> None:
    merchant = operator.new_merchant(currencies=("GBP",))
    path = f"/admin/merchant-accounts/{merchant.accounts['GBP']['id']}/balance-threshold"
    assert_invalid(operator.put(path, {"threshold_in_minor": threshold}), "threshold_in_minor")


def test_balance_threshold_of_unknown_account_is_404(operator: Operator) -> None:
    answer = operator.put(
        f"/admin/merchant-accounts/{uuid.uuid4()}/balance-threshold", {"threshold_in_minor": 1}
    )
    assert_problem(answer, 404, "Not Found")


# screening list and ledger


def test_screening_list_is_replaced(operator: Operator) -> None:
    answer = operator.post("/admin/screening-list", {"names": ["Sanctioned Person", "Bad Co"]})
    assert answer.status_code == 200, answer.text
    assert sorted(answer.json()["names"]) == ["Bad Co", "Sanctioned Person"]
    read = operator.get("/admin/screening-list")
    assert read.status_code == 200
    assert sorted(read.json()["names"]) == ["Bad Co", "Sanctioned Person"]
    emptied = operator.post("/admin/screening-list", {"names": []})
    assert emptied.status_code == 200
    assert operator.get("/admin/screening-list").json()["names"] == []


def test_screening_list_names_must_be_strings(operator: Operator) -> None:
    assert_invalid(operator.post("/admin/screening-list", {"names": "Bad Co"}), "names")


def test_ledger_check_is_clean(operator: Operator) -> None:
    merchant = operator.new_merchant()
    assert operator.top_up(merchant.accounts["EUR"], 999).status_code == 201
    answer = operator.get("/admin/ledger/check")
    assert answer.status_code == 200
    assert answer.json() == {"ok": True, "violations": []}


# operator authentication


def _operator_calls(operator: Operator) -> list[tuple[str, str, dict[str, Any] | None]]:
    merchant = operator.new_merchant(currencies=("GBP",))
    account = merchant.accounts["GBP"]
    iban = identifier(account, "iban")["iban"]
    mid = merchant.merchant_id
    return [
        ("POST", "/admin/merchants", {"name": "Intruder Ltd"}),
        ("GET", "/admin/merchants", None),
        ("POST", f"/admin/merchants/{mid}/clients", {}),
        ("POST", f"/admin/merchants/{mid}/signing-keys", {"public_key_pem": _p521_pem()}),
        ("PUT", f"/admin/merchants/{mid}/webhooks", {"payments_uri": "http://127.0.0.1:9/x"}),
        ("POST", f"/admin/merchants/{mid}/merchant-accounts", {"currency": "EUR"}),
        (
            "PUT",
            f"/admin/merchant-accounts/{account['id']}/balance-threshold",
            {"threshold_in_minor": 1},
        ),
        ("POST", "/admin/screening-list", {"names": ["Intruder"]}),
        ("GET", "/admin/screening-list", None),
        ("GET", "/admin/ledger/check", None),
        (
            "POST",
            "/sandbox/bank-transfers",
            {
                "iban": iban,
                "amount_in_minor": 1_000_000,
                "currency": "GBP",
                "remitter_name": "Intruder",
                "reference": "free money",
            },
        ),
        ("POST", "/sandbox/clock/advance", {"seconds": 86_400}),
        ("GET", "/sandbox/clock", None),
    ]


def test_operator_routes_need_the_operator_token(operator: Operator, server: RunningServer) -> None:
    merchant = operator.new_merchant(currencies=())
    merchant_token = fresh_token(merchant)["access_token"]
    clock_before = service_now(operator)
    wrong = [
        {},
        bearer("admin-wrong-token"),
        bearer(merchant_token),
        {"Authorization": server.admin_token},
        {"Authorization": f"Basic {server.admin_token}"},
    ]
    for method, path, body in _operator_calls(operator):
        for headers in wrong:
            answer = httpx.request(method, f"{server.base_url}{path}", json=body, headers=headers)
            assert_problem(answer, 401, "Unauthenticated")
    moved = service_now(operator) - clock_before
    assert moved < timedelta(hours=1), "a refused clock advance must not move the clock"
    names = [m["name"] for m in operator.get("/admin/merchants").json()]
    assert "Intruder Ltd" not in names
    assert operator.get("/admin/ledger/check").json()["ok"] is True


def test_every_documented_operator_route_refuses_a_merchant_token(
    operator: Operator, server: RunningServer
) -> None:
    merchant = operator.new_merchant(currencies=())
    merchant_token = fresh_token(merchant)["access_token"]
    spec = httpx.get(f"{server.base_url}/openapi.json").json()
    checked = 0
    for path, item in spec["paths"].items():
        if not path.startswith(("/admin/", "/sandbox/")):
            continue
        concrete = re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)
        for method in item:
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            for headers in ({}, bearer(merchant_token)):
                answer = httpx.request(
                    method.upper(),
                    f"{server.base_url}{concrete}",
                    json={} if method in ("post", "put", "patch") else None,
                    headers=headers,
                )
                assert answer.status_code == 401, (method, path, answer.text)
                assert_problem(answer, 401, "Unauthenticated")
            checked += 1
    assert checked >= 12
