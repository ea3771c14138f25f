"""Production mode (`BANKRAIL_MODE=production`) against a real `bankrail serve`: it refuses to
start without a strong operator token, and refuses to make (and print) a demo merchant; the
sandbox routes, the service clock control, the mock bank and a Swagger UI page do not exist;
webhook URIs must be https on the public internet (no loopback, private, link-local or
metadata addresses, whether written as an IP or as a name that resolves to one), through the
admin API and the console form alike; the console's cookies are `Secure`; /metrics needs the
operator token; and the process log is JSON lines, each with a `trace_id`, with one access line
per request carrying the response's `Svc-Trace-Id`, and never a client secret, access token or
operator token, however a request carried it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_helpers import assert_invalid, assert_problem, bearer, fresh_token, wait_for
from payout_helpers import SORT_CODE, create_payout, external_beneficiary, payout_body
from test_console_http import Console
from test_console_scopes_http import sign_in_console_user

from support.api import MerchantClient, Operator
from support.databases import with_database
from support.server import PRODUCTION, RunningServer, free_port

WEAK_TOKEN_MESSAGE = "error: production mode needs a strong BANKRAIL_ADMIN_TOKEN"


def _log_documents(server: RunningServer) -> list[dict[str, Any]]:
    """Every line of the server's log, each parsed as one JSON object."""
    lines = server.log_path.read_text().splitlines()
    documents = []
    for line in lines:
        try:
            document = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON log line: {line!r}") from None
        assert isinstance(document, dict), line
        documents.append(document)
    return documents


# --- the operator token ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "token",
    [
        "",  # none at all
        "0123456789" * 4,  # 40 characters, but a pattern of 10
        "0123456789ab" * 3,  # 36 characters, 12 different ones, but a pattern of 12
        secrets.token_urlsafe(16),  # random, but only ~22 characters
    ],
    ids=["missing", "patterned", "repeated-unit", "too-short-random"],
)
def test_serve_refuses_a_weak_operator_token_with_exit_code_2(pg_server: str, token: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="bankrail-weak-"))
    server = RunningServer(
        data_dir=base / "data",
        port=free_port(),
        admin_token=token,
        # A database that does not exist: serve must stop before it would try to connect.
        env={**PRODUCTION, "DATABASE_URL": with_database(pg_server, "bankrail_never_created")},
    )
    try:
        with pytest.raises(RuntimeError, match="bankrail serve exited"):
            server.start(timeout=60)
        assert server.process is not None
        assert server.process.returncode == 2, server.log_path.read_text()
        log = server.log_path.read_text()
        assert WEAK_TOKEN_MESSAGE in log
        assert "secrets.token_urlsafe(32)" in log  # says how to make a good one
        if token:
            assert token not in log
    finally:
        if server.process is not None and server.process.poll() is None:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("command", [["serve", "--demo"], ["init"]], ids=["serve-demo", "init"])
def test_the_demo_merchant_is_refused_before_anything_is_printed_or_written(
    pg_server: str, command: list[str]
) -> None:
    base = Path(tempfile.mkdtemp(prefix="bankrail-prod-demo-"))
    data_dir = base / "data"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bankrail", *command, "--data-dir", str(data_dir)],
            env={
                **os.environ,
                **PRODUCTION,
                "BANKRAIL_ADMIN_TOKEN": secrets.token_urlsafe(32),
                "BANKRAIL_PORT": str(free_port()),
                # A database that does not exist: the refusal must come before any connection.
                "DATABASE_URL": with_database(pg_server, "bankrail_never_created"),
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        assert f"error: `bankrail {' '.join(command)}` is refused in production mode" in (
            done.stderr
        )
        assert not data_dir.exists()  # no demo-credentials.json, key or operator token file
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_strong_operator_token_is_accepted_and_required(production: RunningServer) -> None:
    with httpx.Client(base_url=production.base_url, timeout=30) as http:
        assert http.get("/admin/merchants", headers=bearer(production.admin_token)).is_success
        assert_problem(http.get("/admin/merchants"), 401)
        assert_problem(http.get("/admin/merchants", headers=bearer("admin")), 401)


# --- sandbox features are absent -------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/sandbox/clock/advance", {"seconds": 86400}),
        ("GET", "/sandbox/clock", None),
        (
            "POST",
            "/sandbox/bank-transfers",
            {"iban": "GB29NWBK60161331926819", "amount_in_minor": 100, "currency": "GBP"},
        ),
        ("GET", f"/mock-bank/login/{uuid.uuid4()}", None),
        ("POST", f"/mock-bank/login/{uuid.uuid4()}", None),
        ("POST", "/mock-bank/authorize", None),
        (
            "POST",
            f"/mock-bank/api/single-immediate-payments/{uuid.uuid4()}/action",
            {"action": "authorize"},
        ),
    ],
)
def test_sandbox_routes_clock_and_mock_bank_are_not_there(
    prod_operator: Operator, method: str, path: str, body: Any
) -> None:
    answer = prod_operator.http.request(method, path, json=body)
    assert_problem(answer, 404)


def test_the_api_description_has_no_sandbox_or_mock_bank_routes(production: RunningServer) -> None:
    paths = httpx.get(f"{production.base_url}/openapi.json", timeout=30).json()["paths"]
    assert "/v3/payouts" in paths
    assert not [p for p in paths if p.startswith(("/sandbox", "/mock-bank"))]


def test_the_api_reference_is_served_offline_in_production_too(
    production: RunningServer,
) -> None:
    # Unless the operator sets BANKRAIL_API_DOCS=off (tests/unit/test_app_api_docs.py); its
    # scripts are Bankrail's own, nothing comes from elsewhere.
    with httpx.Client(base_url=production.base_url, timeout=30) as http:
        page = http.get("/docs")
        assert page.status_code == 200
        assert http.get("/docs/assets/swagger-ui-bundle.js").status_code == 200
        assert "//cdn" not in page.text
        assert http.get("/openapi.json").status_code == 200


# --- webhook destinations --------------------------------------------------------------------


REFUSED_URIS = [
    "http://93.184.216.34/hooks",
    "https://127.0.0.1/hooks",
    "https://127.0.0.1:8443/hooks",
    "https://localhost/hooks",
    "https://localhost:9000/hooks",
    "https://10.1.2.3/hooks",
    "https://172.16.5.4/hooks",
    "https://192.168.1.10/hooks",
    "https://169.254.169.254/latest/meta-data",
    "https://[::1]/hooks",
    "https://[fe80::1]/hooks",
    "https://[::ffff:127.0.0.1]/hooks",
    # IPv6 transition forms that reach an IPv4 loopback or metadata address.
    "https://[::127.0.0.1]/",  # IPv4-compatible
    "https://[64:ff9b::7f00:1]/",  # NAT64
    "https://[64:ff9b::a9fe:a9fe]/",
    "https://[2002:7f00:1::]/",  # 6to4
    "https://[2002:a9fe:a9fe::]/",
    "https://2130706433/hooks",  # 127.0.0.1 spelled as one number
]


@pytest.mark.parametrize("uri", REFUSED_URIS)
@pytest.mark.parametrize("field", ["payments_uri", "payouts_uri"])
def test_webhook_uris_must_be_public_https(prod_operator: Operator, field: str, uri: str) -> None:
    merchant = prod_operator.post("/admin/merchants", {"name": "Prod Hooks Ltd"}).json()
    path = f"/admin/merchants/{merchant['id']}/webhooks"
    accepted = {"payments_uri": "https://93.184.216.34/hooks", "payouts_uri": None}
    assert prod_operator.put(path, accepted).status_code == 200
    body = assert_invalid(prod_operator.put(path, {field: uri}), field)
    assert list(body["errors"]) == [field]
    # Nothing was stored: a harmless change shows the earlier settings unchanged.
    kept = prod_operator.put(path, {"payouts_uri": "https://93.184.216.34/payouts"})
    assert kept.status_code == 200, kept.text
    assert kept.json() == {
        "payments_uri": "https://93.184.216.34/hooks",
        "payouts_uri": "https://93.184.216.34/payouts",
    }


def test_a_public_https_webhook_uri_is_accepted(prod_operator: Operator) -> None:
    merchant = prod_operator.post("/admin/merchants", {"name": "Prod Public Ltd"}).json()
    answer = prod_operator.put(
        f"/admin/merchants/{merchant['id']}/webhooks",
        {"payments_uri": "https://93.184.216.34/hooks", "payouts_uri": "https://8.8.8.8/p"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "payments_uri": "https://93.184.216.34/hooks",
        "payouts_uri": "https://8.8.8.8/p",
    }


# One detail for a name that does not resolve and one that resolves somewhere private: two
# would let whoever may set a webhook URI probe which names exist inside the operator's network.
NOT_A_PUBLIC_HOST = "must name a host that resolves only to public addresses"


@pytest.mark.parametrize("field", ["payments_uri", "payouts_uri"])
def test_an_internal_name_and_an_unresolvable_one_get_the_same_answer(
    prod_operator: Operator, field: str
) -> None:
    merchant = prod_operator.post("/admin/merchants", {"name": "Prod Probe Ltd"}).json()
    path = f"/admin/merchants/{merchant['id']}/webhooks"
    answers = [
        assert_invalid(prod_operator.put(path, {field: uri}), field)
        for uri in (
            "https://localhost/hooks",  # resolves, to loopback
            "https://no-such-host.invalid/hooks",  # does not resolve
        )
    ]
    internal, unresolvable = answers
    assert internal["errors"] == unresolvable["errors"] == {field: [NOT_A_PUBLIC_HOST]}
    assert internal["detail"] == unresolvable["detail"]


def test_the_console_settings_form_refuses_a_private_webhook_uri(
    production: RunningServer, prod_operator: Operator
) -> None:
    merchant = prod_operator.new_merchant("Prod Console Ltd")
    console = Console(production.base_url)
    try:
        assert sign_in_console_user(prod_operator, console, merchant).status_code == 303
        token = console.csrf("/console/settings")
        refused = console.post(
            "/console/settings/webhooks",
            {"payments_uri": "https://169.254.169.254/x", "payouts_uri": "https://localhost/y"},
            csrf=token,
        )
        assert refused.status_code == 400, refused.text
        assert "must not point to a private or local address" in refused.text
        assert NOT_A_PUBLIC_HOST in refused.text
        unresolvable = console.post(
            "/console/settings/webhooks",
            {"payments_uri": "https://no-such-host.invalid/x", "payouts_uri": ""},
            csrf=token,
        )
        assert unresolvable.status_code == 400, unresolvable.text
        assert NOT_A_PUBLIC_HOST in unresolvable.text  # the same words as for localhost
        accepted = console.post(
            "/console/settings/webhooks",
            {"payments_uri": "https://93.184.216.34/x", "payouts_uri": ""},
            csrf=token,
        )
        assert accepted.status_code == 303, accepted.text
    finally:
        console.close()


def test_the_console_cookies_are_secure_http_only_and_same_site(
    production: RunningServer, prod_operator: Operator
) -> None:
    merchant = prod_operator.new_merchant("Prod Cookie Ltd")
    console = Console(production.base_url)
    try:
        anonymous = console.get("/console/login")
        signed_in = sign_in_console_user(prod_operator, console, merchant)
        assert signed_in.status_code == 303, signed_in.text
        assert console.get("/console").status_code == 200  # the jar sent the session back
        cookies = [
            *anonymous.headers.get_list("set-cookie"),
            *signed_in.headers.get_list("set-cookie"),
        ]
    finally:
        console.close()
    names = {cookie.split("=", 1)[0] for cookie in cookies}
    assert names == {"bankrail_console", "bankrail_console_flash"}
    for cookie in cookies:
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
        assert {"secure", "httponly", "samesite", "path"} <= attributes, cookie
        assert "samesite=lax" in cookie.lower(), cookie


def test_the_console_sign_out_deletes_its_cookie_with_secure_too(
    production: RunningServer, prod_operator: Operator
) -> None:
    """The deletion cookie of `/console/logout` carries the attributes the session cookie was
    set with (Secure by the same production-mode rule), or a browser may keep the session."""
    merchant = prod_operator.new_merchant("Prod Logout Ltd")
    console = Console(production.base_url)
    try:
        assert sign_in_console_user(prod_operator, console, merchant).status_code == 303
        signed_out = console.post("/console/logout", {}, csrf=console.csrf("/console"))
        assert signed_out.status_code == 303, signed_out.text
        assert signed_out.headers["location"] == "/console/login"
        cookies = signed_out.headers.get_list("set-cookie")
    finally:
        console.close()
    by_name = {cookie.split("=", 1)[0]: cookie for cookie in cookies}
    assert set(by_name) == {"bankrail_console", "bankrail_console_flash"}, cookies
    deleted = by_name["bankrail_console"].lower()
    assert "max-age=0" in deleted or "expires=thu, 01 jan 1970" in deleted, deleted
    for cookie in cookies:
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
        assert {"secure", "httponly", "samesite", "path"} <= attributes, cookie
        assert "path=/console" in cookie.lower(), cookie


# --- metrics ---------------------------------------------------------------------------------


def test_metrics_need_the_operator_token(production: RunningServer) -> None:
    with httpx.Client(base_url=production.base_url, timeout=30) as http:
        assert_problem(http.get("/metrics"), 401)
        assert_problem(http.get("/metrics", headers=bearer("not-the-operator-token")), 401)
        answer = http.get("/metrics", headers=bearer(production.admin_token))
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    assert "bankrail_http_requests_total{" in answer.text


# --- logs ------------------------------------------------------------------------------------


def test_the_log_is_json_lines_with_trace_ids_and_no_credentials(
    production: RunningServer, prod_operator: Operator
) -> None:
    merchant: MerchantClient = prod_operator.new_merchant("Prod Logging Ltd")
    access_token = fresh_token(merchant)["access_token"]
    guessed_secret = "guess-" + secrets.token_urlsafe(24)
    credentials = {
        "grant_type": "client_credentials",
        "client_id": merchant.client_id,
        "client_secret": merchant.client_secret,
    }
    # Unfunded, so accepted by the router and rejected later; the GET below is the fast lane's.
    payout_id = create_payout(
        merchant, payout_body(merchant, "GBP", 100, external_beneficiary(SORT_CODE))
    )
    console = Console(production.base_url)
    answers: list[httpx.Response] = []
    try:
        http = merchant.http
        answers += [
            http.post("/connect/token", data=credentials),
            http.post("/connect/token", json=credentials),
            http.post("/connect/token", params=credentials),  # secrets in the query string
            http.post("/connect/token", data={**credentials, "client_secret": guessed_secret}),
            http.get("/v3/merchant-accounts", headers=bearer(access_token)),
            http.get("/v3/merchant-accounts", params={"access_token": access_token}),
            http.get(f"/v3/payouts/{uuid.uuid4()}", headers=bearer(access_token)),
            http.get(f"/v3/payouts/{payout_id}", headers=bearer(access_token)),
            http.get("/admin/merchants", params={"token": production.admin_token}),
            prod_operator.get("/admin/merchants"),
            console.login_merchant(merchant),
            console.get("/console"),
            http.get("/no/such/route"),
        ]
    finally:
        console.close()
    statuses = [a.status_code for a in answers]
    assert statuses[0] == statuses[1] == 200, answers[1].text
    assert statuses[3] in (400, 401)
    assert answers[3].json()["error"] == "invalid_client"
    assert statuses[4] == 200
    assert statuses[7] == 200
    assert 200 <= statuses[9] < 300
    traces = {a.headers["svc-trace-id"]: a for a in answers}

    def access_lines() -> dict[str, dict[str, Any]] | None:
        found = {
            d["trace_id"]: d
            for d in _log_documents(production)
            if d.get("logger") == "bankrail.access" and d.get("trace_id") in traces
        }
        return found if len(found) == len(traces) else None

    lines = wait_for(access_lines, timeout=20, what="an access line for every request")
    for trace_id, answer in traces.items():
        line = lines[trace_id]
        assert line["method"] == answer.request.method
        assert line["path"] == answer.request.url.path  # never the query string
        assert line["status"] == answer.status_code
        assert line["level"] == "info"
        assert isinstance(line["duration_ms"], int | float)

    documents = _log_documents(production)
    assert documents
    for document in documents:
        assert "trace_id" in document, document
        assert {"ts", "level", "logger", "message", "pid"} <= set(document), document
    text = production.log_path.read_text()
    for secret in (
        merchant.client_secret,
        guessed_secret,
        access_token,
        production.admin_token,
    ):
        assert secret not in text
    assert access_token.split(".")[1] not in text  # not even the JWT's claims


def test_a_token_in_the_path_is_redacted_in_every_field_of_the_log(
    production: RunningServer, prod_operator: Operator
) -> None:
    merchant: MerchantClient = prod_operator.new_merchant("Prod Path Token Ltd")
    access_token = fresh_token(merchant)["access_token"]
    answer = merchant.http.get(
        f"/v3/merchant-accounts/{access_token}", headers=bearer(access_token)
    )
    trace_id = answer.headers["svc-trace-id"]

    def access_line() -> dict[str, Any] | None:
        for document in _log_documents(production):
            if document.get("logger") == "bankrail.access" and document["trace_id"] == trace_id:
                return document
        return None

    line = wait_for(access_line, timeout=20, what="the request's access line")
    assert line["path"] == "/v3/merchant-accounts/[redacted]"
    assert line["status"] == answer.status_code
    for document in _log_documents(production):
        for name, value in document.items():
            assert access_token not in str(value), (name, document)
            assert access_token.split(".")[1] not in str(value), (name, document)
