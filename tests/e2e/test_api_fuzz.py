"""Schemathesis fuzzing of every operation in `/openapi.json`, with real credentials (issue 8.4).

The promise: whatever a client sends, the API answers without a server error, with a status
code, content type, headers and body its schema documents (and no body field it does not name,
so nothing undocumented leaks), and it rejects input its schema forbids. Each operation is fuzzed
in positive mode (schema-valid data) and, where it takes input, in negative mode (schema-invalid
data), as the caller it serves: the merchant's access token; the `Svc-Signature` /
`X-SVC-Signature` ES512 signature (tl_version 2, and the body-only form on `/v1/payouts`) over
the exact bytes sent, with a fresh Idempotency-Key; the payment's resource token; the mock bank
token; or the operator token.

Path parameters name real objects (a fresh payment in the right state for each payment action),
and each positive run starts with a request the route must accept (2xx), so the credentials and
signatures are proven to work and the fuzzing reaches the handlers and their success answers.
Inputs that found a bug are pinned and replayed on every run; a test marked with a known bug
fails as usual on anything else. The sandbox clock advance moves the one clock all tests share,
so it is fuzzed on a server of its own (started in the background while the rest is fuzzed).

CI runs a few derandomized examples per operation and mode; `BANKRAIL_FUZZ_EXAMPLES=200` fuzzes
longer.
"""

from __future__ import annotations

import contextlib
import copy
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from fuzz_support import (
    Caller,
    FreshPayment,
    Stage,
    World,
    body_is_documented,
    undocumented_fields,
)
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from support.databases import drop_database, fresh_database, run
from support.receiver import WebhookReceiver
from support.server import RunningServer, free_port

pytestmark = pytest.mark.slow  # Schemathesis over every route

EXAMPLES = int(os.environ.get("BANKRAIL_FUZZ_EXAMPLES", "4"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    undocumented_fields,
    negative_data_rejection,
]
HTTP_METHODS = {"get", "post", "put", "patch", "delete"}
POSITIVE, NEGATIVE = GenerationMode.POSITIVE, GenerationMode.NEGATIVE


@dataclass(frozen=True)
class Route:
    """One operation and how it is called."""

    method: str
    path: str
    caller: Caller
    stage: Stage | None = None  # the payment action needs a fresh payment in this state
    own_server: bool = False  # global effect: fuzz it on a server of its own
    # The schema states every rule of the input, so schema-valid input must be accepted.
    complete_schema: bool = False

    @property
    def label(self) -> str:
        return f"{self.method} {self.path} [{self.caller}]"


P = "/v3/payments/{payment_id}"
L = "/payments/{payment_id}"
M = "/v3/mandates/{mandate_id}"
ROUTES = [
    Route("POST", "/connect/token", Caller.PUBLIC),
    Route("GET", "/v3/merchant-accounts", Caller.MERCHANT),
    Route("GET", "/v3/merchant-accounts/{merchant_account_id}", Caller.MERCHANT),
    Route("GET", "/v3/merchant-accounts/{merchant_account_id}/transactions", Caller.MERCHANT),
    Route("GET", "/v3/merchant-accounts/{merchant_account_id}/payment-sources", Caller.MERCHANT),
    Route("POST", "/v3/merchant-accounts/{merchant_account_id}/sweeping", Caller.SIGNED),
    Route("GET", "/v3/merchant-accounts/{merchant_account_id}/sweeping", Caller.MERCHANT),
    Route("DELETE", "/v3/merchant-accounts/{merchant_account_id}/sweeping", Caller.SIGNED),
    Route("GET", "/v1/balances", Caller.MERCHANT),
    Route("POST", "/v3/payment-providers/search", Caller.MERCHANT),
    Route("POST", "/v3/payments-providers/search", Caller.MERCHANT),
    Route("GET", "/v3/payments-providers/{provider_id}", Caller.MERCHANT),
    Route("GET", "/v2/single-immediate-payments-providers", Caller.PUBLIC),
    Route("POST", "/v3/payouts", Caller.SIGNED),
    Route("GET", "/v3/payouts/{payout_id}", Caller.MERCHANT),
    Route("GET", "/v3/payouts", Caller.MERCHANT),
    Route("GET", "/v3/request-log", Caller.MERCHANT),
    Route("GET", "/v3/payments", Caller.MERCHANT),
    Route("GET", "/payments", Caller.MERCHANT),
    Route("POST", f"{P}/refunds", Caller.SIGNED, Stage.SETTLED),
    Route("POST", f"{L}/refunds", Caller.SIGNED, Stage.SETTLED),
    Route("GET", f"{P}/refunds", Caller.MERCHANT),
    Route("GET", f"{L}/refunds", Caller.MERCHANT),
    Route("GET", f"{P}/refunds/{{refund_id}}", Caller.MERCHANT),
    Route("GET", f"{L}/refunds/{{refund_id}}", Caller.MERCHANT),
    Route("POST", "/v1/payouts", Caller.SIGNED_V1),
    Route("POST", "/v1/payouts", Caller.BODY_ONLY),
    Route("GET", "/v1/transactions", Caller.MERCHANT),
    Route("POST", "/v3/payments", Caller.SIGNED),
    Route("POST", "/payments", Caller.SIGNED),
    Route("GET", P, Caller.MERCHANT),
    Route("GET", P, Caller.RESOURCE, Stage.CREATED),
    Route("GET", L, Caller.MERCHANT),
    Route("POST", f"{P}/authorization-flow", Caller.SIGNED, Stage.CREATED),
    Route("POST", f"{P}/authorization-flow", Caller.RESOURCE, Stage.CREATED),
    Route("POST", f"{L}/authorization-flow", Caller.SIGNED, Stage.CREATED),
    Route(
        "POST", f"{P}/authorization-flow/actions/provider-selection", Caller.SIGNED, Stage.PICKING
    ),
    Route(
        "POST", f"{P}/authorization-flow/actions/provider-selection", Caller.RESOURCE, Stage.PICKING
    ),
    Route("POST", f"{P}/submit-provider-selection", Caller.SIGNED, Stage.PICKING),
    Route(
        "POST", f"{L}/authorization-flow/actions/provider-selection", Caller.SIGNED, Stage.PICKING
    ),
    Route("POST", f"{L}/submit-provider-selection", Caller.RESOURCE, Stage.PICKING),
    Route("POST", f"{P}/authorization-flow/actions/consent", Caller.SIGNED, Stage.CONSENT),
    Route("POST", f"{P}/authorization-flow/actions/form", Caller.SIGNED, Stage.FORM),
    Route("POST", f"{P}/authorization-flow/actions/form", Caller.RESOURCE, Stage.FORM),
    Route("POST", f"{P}/actions/cancel", Caller.SIGNED, Stage.CREATED),
    Route("POST", f"{P}/actions/cancel", Caller.RESOURCE, Stage.CREATED),
    Route("POST", f"{L}/actions/cancel", Caller.SIGNED, Stage.CREATED),
    Route("POST", "/v3/payments-provider-return", Caller.PUBLIC),
    Route("POST", "/payments-provider-return", Caller.PUBLIC),
    Route("POST", "/v1/users/deposits", Caller.SIGNED_V1),
    Route("GET", "/admin/merchants", Caller.OPERATOR),
    Route("POST", "/admin/merchants", Caller.OPERATOR),
    Route("POST", "/admin/merchants/{merchant_id}/clients", Caller.OPERATOR),
    Route("POST", "/admin/merchants/{merchant_id}/signing-keys", Caller.OPERATOR),
    Route("DELETE", "/admin/merchants/{merchant_id}/signing-keys/{kid}", Caller.OPERATOR),
    Route("DELETE", "/admin/merchants/{merchant_id}/clients/{client_id}", Caller.OPERATOR),
    Route("POST", "/admin/merchants/{merchant_id}/console-users", Caller.OPERATOR),
    # On the server of their own, in this order: reset, close, then remove its merchant.
    Route("POST", "/sandbox/merchants/{merchant_id}/reset", Caller.OPERATOR, own_server=True),
    Route("POST", "/admin/merchants/{merchant_id}/close", Caller.OPERATOR, own_server=True),
    Route("DELETE", "/admin/merchants/{merchant_id}", Caller.OPERATOR, own_server=True),
    Route("PUT", "/admin/merchants/{merchant_id}/webhooks", Caller.OPERATOR),
    Route("PUT", "/admin/merchants/{merchant_id}/return-uris", Caller.OPERATOR),
    Route("POST", "/admin/merchants/{merchant_id}/merchant-accounts", Caller.OPERATOR),
    Route(
        "PUT", "/admin/merchant-accounts/{merchant_account_id}/balance-threshold", Caller.OPERATOR
    ),
    Route(
        "PUT",
        "/admin/merchant-accounts/{merchant_account_id}/sweeping-destination",
        Caller.OPERATOR,
    ),
    Route("GET", "/.well-known/jwks", Caller.PUBLIC),
    Route("GET", "/admin/webhook-deliveries", Caller.OPERATOR),
    Route("GET", "/admin/webhook-deliveries/{delivery_id}", Caller.OPERATOR),
    Route("POST", "/admin/webhook-deliveries/{delivery_id}/replay", Caller.OPERATOR),
    Route("GET", "/admin/screening-list", Caller.OPERATOR),
    Route("POST", "/admin/screening-list", Caller.OPERATOR),
    Route("GET", "/admin/ledger/check", Caller.OPERATOR),
    Route("GET", "/healthz", Caller.PUBLIC),
    Route("GET", "/readyz", Caller.PUBLIC),
    Route("GET", "/metrics", Caller.PUBLIC),
    Route("POST", "/sandbox/bank-transfers", Caller.OPERATOR),
    Route("POST", "/sandbox/clock/advance", Caller.OPERATOR, own_server=True, complete_schema=True),
    Route("GET", "/sandbox/clock", Caller.OPERATOR),
    Route("PUT", "/sandbox/mandates/{mandate_id}/remitter-balance", Caller.OPERATOR),
    Route(
        "POST",
        "/mock-bank/api/single-immediate-payments/{payment_id}/action",
        Caller.BANK,
        Stage.REDIRECT,
    ),
    Route("POST", "/v3/mandates", Caller.SIGNED),
    Route("GET", "/v3/mandates", Caller.MERCHANT),
    Route("GET", M, Caller.MERCHANT),
    Route("GET", f"{M}/constraints", Caller.MERCHANT),
    Route("GET", f"{M}/funds", Caller.MERCHANT),
    Route("POST", f"{M}/authorization-flow", Caller.SIGNED, Stage.MANDATE_CREATED),
    Route(
        "POST",
        f"{M}/authorization-flow/actions/provider-selection",
        Caller.SIGNED,
        Stage.MANDATE_PICKING,
    ),
    Route("POST", f"{M}/authorization-flow/actions/consent", Caller.SIGNED, Stage.MANDATE_CONSENT),
    Route("POST", f"{M}/revoke", Caller.SIGNED, Stage.MANDATE_AUTHORIZED),
    Route(
        "POST",
        "/mock-bank/api/vrp-consents/{mandate_id}/action",
        Caller.BANK,
        Stage.MANDATE_REDIRECT,
    ),
]

# --- findings ---------------------------------------------------------------------------------

Request = Callable[[World, Route, FreshPayment | None], dict[str, Any]]


def _body(body: Any) -> Request:
    return lambda _world, _route, _payment: {"body": body, "media_type": "application/json"}


def _query(**query: str) -> Request:
    return lambda _world, _route, _payment: {"query": query}


def _with_nul(*keys: str) -> Request:
    """The route's valid request with U+0000 appended to the text field at `keys`."""

    def make(world: World, route: Route, payment: FreshPayment | None) -> dict[str, Any]:
        valid = world.valid_request(route.path, payment)
        assert valid is not None, route.label
        container = valid["body"]
        for key in keys[:-1]:
            container = container[key]
        container[keys[-1]] += "\x00"
        return valid

    return make


NUL = (
    "a U+0000 character in a text field reaches PostgreSQL (CharacterNotInRepertoireError) "
    "and the API answers 500 instead of 400"
)
DATE_TIME = "`from`/`to` are documented as RFC 3339 date-times but `1` (epoch seconds) is accepted"
DATE_RANGE = (
    "a `from`/`to` date-time whose UTC instant falls outside years 1-9999 reaches asyncpg "
    "(DataError: date value out of range) and the API answers 500 instead of 400"
)
CLOCK_BOUNDS = (
    "ClockAdvance.seconds documents its bounds as `ge`/`le`, which are not JSON Schema "
    "keywords (minimum/maximum), so schema-valid negative seconds are answered 400"
)
RETURN_URI_NUL = {"provider_selection": {}, "redirect": {"return_uri": "https://m.example/\x00"}}
# (route label, mode) -> a bug this test found (since fixed), and the inputs that showed it,
# replayed on every run so that it stays fixed.
REGRESSIONS: dict[tuple[str, GenerationMode], tuple[str, list[Request]]] = {
    ("POST /connect/token [public]", POSITIVE): (NUL, [_with_nul("client_id")]),
    ("GET /v3/merchant-accounts/{merchant_account_id}/payment-sources [merchant]", POSITIVE): (
        NUL,
        [_query(user_id="\x00")],
    ),
    ("POST /v3/payouts [signed]", POSITIVE): (NUL, [_with_nul("beneficiary", "reference")]),
    ("POST /v1/payouts [signed_v1]", POSITIVE): (NUL, [_with_nul("beneficiary_name")]),
    ("POST /v1/payouts [body_only]", POSITIVE): (NUL, [_with_nul("beneficiary_reference")]),
    ("POST /v3/payments [signed]", POSITIVE): (NUL, [_with_nul("user", "name")]),
    ("POST /payments [signed]", POSITIVE): (NUL, [_with_nul("metadata", "order")]),
    ("POST /v3/payments/{payment_id}/authorization-flow [signed]", POSITIVE): (
        NUL,
        [_body(RETURN_URI_NUL)],
    ),
    ("POST /v3/payments/{payment_id}/authorization-flow [resource_token]", POSITIVE): (
        NUL,
        [_body(RETURN_URI_NUL)],
    ),
    ("POST /payments/{payment_id}/authorization-flow [signed]", POSITIVE): (
        NUL,
        [_body(RETURN_URI_NUL)],
    ),
    ("POST /v1/users/deposits [signed_v1]", POSITIVE): (NUL, [_with_nul("user_id")]),
    ("POST /admin/merchants [operator]", POSITIVE): (NUL, [_body({"name": "Fuzz\x00"})]),
    ("POST /admin/merchants/{merchant_id}/clients [operator]", POSITIVE): (
        NUL,
        [_body({"scopes": ["payments\x00"]})],
    ),
    ("PUT /admin/merchants/{merchant_id}/webhooks [operator]", POSITIVE): (
        NUL,
        [_body({"payments_uri": "https://m.example/\x00"})],
    ),
    ("POST /admin/merchants/{merchant_id}/merchant-accounts [operator]", POSITIVE): (
        NUL,
        [_body({"currency": "EUR", "account_holder_name": "Fuzz\x00"})],
    ),
    ("GET /admin/webhook-deliveries [operator]", POSITIVE): (NUL, [_query(event_type="\x00")]),
    ("POST /admin/screening-list [operator]", POSITIVE): (NUL, [_body({"names": ["Fuzz\x00"]})]),
    ("POST /sandbox/bank-transfers [operator]", POSITIVE): (NUL, [_with_nul("remitter_name")]),
    ("GET /v1/transactions [merchant]", NEGATIVE): (DATE_TIME, [_query(**{"from": "1"})]),
    ("GET /v1/transactions [merchant]", POSITIVE): (
        DATE_RANGE,
        [_query(**{"from": "0001-01-01T00:00:04+00:01"})],
    ),
    ("GET /v3/merchant-accounts/{merchant_account_id}/transactions [merchant]", POSITIVE): (
        DATE_RANGE,
        [_query(to="9999-12-31T23:59:59-01:00")],
    ),
    ("GET /v3/merchant-accounts/{merchant_account_id}/transactions [merchant]", NEGATIVE): (
        DATE_TIME,
        [_query(to="1")],
    ),
    ("POST /sandbox/clock/advance [operator]", POSITIVE): (CLOCK_BOUNDS, [_body({"seconds": -1})]),
}


def _cases() -> Iterator[Any]:
    for route in ROUTES:
        for mode in (POSITIVE, NEGATIVE):
            yield pytest.param(route, mode, id=f"{route.label}-{mode.value}")


# --- fixtures ---------------------------------------------------------------------------------


@dataclass
class Target:
    """A server under fuzzing: its `/openapi.json` and the world made on it."""

    base_url: str
    spec: dict[str, Any]
    world: World

    def schema(self) -> Any:
        """A Schemathesis schema of its own for each test, so no generation state carries over
        from one test to the next and each is reproducible alone."""
        return schemathesis.openapi.from_dict(copy.deepcopy(self.spec))


def _target(base_url: str, admin_token: str, receiver: WebhookReceiver) -> Target:
    answer = requests.get(f"{base_url}/openapi.json", timeout=30)
    assert answer.status_code == 200, answer.text
    return Target(base_url, answer.json(), World.build(base_url, admin_token, receiver))


@pytest.fixture(scope="module")
def hooks() -> Iterator[WebhookReceiver]:
    """Where the fuzz merchants' webhooks go (so replays are delivered)."""
    made = WebhookReceiver()
    yield made
    made.close()


@pytest.fixture(scope="module")
def own(pg_server: str, hooks: WebhookReceiver) -> Iterator[Future[Target]]:
    """A server of its own on a fresh database of the session's PostgreSQL, for routes whose
    effect is global (the sandbox clock); it starts in the background."""
    dsn = str(run(fresh_database(pg_server)))
    base = Path(tempfile.mkdtemp(prefix="bankrail-fuzz-"))
    running = RunningServer(
        data_dir=base / "data",
        port=free_port(),
        admin_token="admin-" + secrets.token_urlsafe(24),
        env={"DATABASE_URL": dsn},
    )

    def start() -> Target:
        running.start(timeout=120)
        return _target(running.base_url, running.admin_token, hooks)

    with ThreadPoolExecutor(max_workers=1) as pool:
        starting = pool.submit(start)
        try:
            yield starting
        finally:
            if not starting.exception():
                starting.result().world.close()
            if running.process is not None:  # its database is dropped next: no need to drain
                with contextlib.suppress(ProcessLookupError):
                    running.kill_group()
            run(drop_database(pg_server, dsn))
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def shared(server: RunningServer, hooks: WebhookReceiver, own: Future[Target]) -> Iterator[Target]:
    """The session's server (the screening list restored afterwards); `own` starts meanwhile."""
    target = _target(server.base_url, server.admin_token, hooks)
    before = target.world.operator.get("/admin/screening-list")
    assert before.status_code == 200, before.text
    yield target
    names = {"names": before.json()["names"]}
    restored = target.world.operator.post("/admin/screening-list", names)
    assert restored.status_code == 200, restored.text
    target.world.close()


# --- fuzzing ----------------------------------------------------------------------------------


def _path_names(operation: Any) -> list[str]:
    return [p["name"] for p in operation.definition.raw.get("parameters", []) if p["in"] == "path"]


def _can_be_invalid(operation: Any) -> bool:
    """False when the operation takes no input, or only strings the schema does not constrain."""
    definition = operation.definition.raw
    free = {"type", "title", "description"}
    return bool(definition.get("requestBody")) or any(
        not set(p.get("schema", {})) <= free or p["schema"].get("type") != "string"
        for p in definition.get("parameters", [])
    )


def _fixed(route: Route, operation: Any, world: World, mode: GenerationMode) -> dict[str, Any]:
    """Path parameters (and the v2 provider list's client_id) that name the world's objects.

    In negative mode they stay generated when nothing else could be made invalid."""
    definition = operation.definition.raw
    others = [p for p in definition.get("parameters", []) if p["in"] != "path"]
    fixed: dict[str, Any] = {}
    if mode is POSITIVE or others or definition.get("requestBody"):
        fixed["path_parameters"] = {n: world.path_values[n] for n in _path_names(operation)}
    if route.path == "/v2/single-immediate-payments-providers" and mode is POSITIVE:
        fixed["query"] = {"client_id": world.merchant.client_id}
    return fixed


CREDENTIALS = frozenset({"authorization", "svc-signature", "x-svc-signature"})


def _withheld(case: Any, operation: Any) -> frozenset[str]:
    """The credential headers a case with negative headers is about, which the caller's
    credentials must then not fill in: the one its phase names, else those the schema
    requires (a bearer scheme requires Authorization) that the case leaves out."""
    meta = case.meta
    if meta is None or not meta.is_negative_at(ParameterLocation.HEADER):
        return frozenset()
    named = getattr(getattr(meta.phase, "data", None), "parameter", None)
    if isinstance(named, str):
        return frozenset({named.lower()}) & CREDENTIALS
    definition = operation.definition.raw
    required = {
        p["name"].lower()
        for p in definition.get("parameters", [])
        if p["in"] == "header" and p.get("required")
    }
    if definition.get("security"):
        required.add("authorization")
    present = {name.lower() for name in case.headers or {}}
    return frozenset(required - present) & CREDENTIALS


def _fuzz(target: Target, route: Route, mode: GenerationMode) -> None:
    operation = target.schema()[route.path][route.method]
    if mode is NEGATIVE and not _can_be_invalid(operation):
        pytest.skip("no input the schema forbids")
    world = target.world
    session = requests.Session()
    checks = [*CHECKS, positive_data_acceptance] if route.complete_schema else CHECKS
    statuses: list[int] = []

    def send(
        case: Any, payment: FreshPayment | None, *, invalid: bool = False, ok: bool = False
    ) -> None:
        meta = case.meta
        if payment is not None and not (meta and meta.is_negative_at(ParameterLocation.PATH)):
            case.path_parameters = {**case.path_parameters, payment.param: payment.id}
        # A fresh Idempotency-Key on every call, unless the case is about that header.
        negative_headers = meta is not None and meta.is_negative_at(ParameterLocation.HEADER)
        fresh_key = not negative_headers and (
            route.caller is Caller.SIGNED or "idempotency-key" in case.headers
        )
        auth = world.auth(
            route.caller, payment, fresh_key=fresh_key, withheld=_withheld(case, operation)
        )
        response = case.call(base_url=target.base_url, session=session, auth=auth, timeout=30)
        statuses.append(response.status_code)
        case.validate_response(response, checks=checks)
        # Pinned inputs carry no generation metadata to tell the checks what they are.
        if ok:  # the route's valid request: credentials and signatures work
            assert 200 <= response.status_code < 300, (case.as_curl_command(), response.text)
        elif invalid:
            assert 400 <= response.status_code < 500, (case.as_curl_command(), response.text)
        elif meta is None and route.complete_schema and response.status_code == 400:
            assert not body_is_documented(case), (case.as_curl_command(), response.text)

    def fresh_payment() -> FreshPayment | None:
        return None if route.stage is None else world.fresh_payment(route.stage)

    def replay(make: Request, **expect: bool) -> None:
        payment = fresh_payment()
        fixed = {n: world.path_values[n] for n in _path_names(operation)}
        case = operation.Case(path_parameters=fixed, **make(world, route, payment))
        send(case, payment, **expect)

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    @given(case=operation.as_strategy(mode, **_fixed(route, operation, world, mode)))
    def fuzz(case: Any) -> None:
        send(case, fresh_payment())

    _, pinned = REGRESSIONS.get((route.label, mode), ("", []))
    try:
        if mode is POSITIVE and world.valid_request(route.path, None) is not None:
            # One request the route accepts first, so its success answer is checked too.
            replay(lambda w, r, p: w.valid_request(r.path, p) or {}, ok=True)
        for make in pinned:
            replay(make, invalid=mode is NEGATIVE)
        fuzz()
        if mode is POSITIVE:  # the credentials and signatures work: something got through
            assert any(200 <= status < 300 for status in statuses), statuses
    except Unsatisfiable:
        pytest.skip("the schema forbids nothing that could be sent here")
    finally:
        session.close()


# A listener's stream answers for most of the request deadline whatever it is asked (fuzzing it
# would hold each example for 24 s), and an answer names a delivery that only an attached
# stream was sent. Their parameters, bodies, owners and headers are tested in
# tests/e2e/test_listen_cli.py and tests/e2e/test_listener_head_http.py.
NOT_FUZZED = {
    ("GET", "/v3/webhook-listeners/{listener_id}/events"),
    ("POST", "/v3/webhook-listeners/{listener_id}/deliveries/{delivery_id}/answers"),
}


def test_every_operation_is_fuzzed(shared: Target) -> None:
    """The route table names every operation the schema documents, and nothing else; a `/v3`
    route's path without the prefix is the same route (http/pipeline.py), fuzzed under its
    `/v3` path unless the table names it too."""
    paths = shared.spec["paths"]
    tabled = {(route.method, route.path) for route in ROUTES}

    def unprefixed_twin(method: str, path: str) -> bool:
        return method in paths.get("/v3" + path, {}) and (method.upper(), path) not in tabled

    documented = {
        (method.upper(), path)
        for path, item in paths.items()
        for method in item
        if method in HTTP_METHODS and not unprefixed_twin(method, path)
    }
    assert documented - NOT_FUZZED == tabled


@pytest.mark.parametrize(("route", "mode"), list(_cases()))
def test_fuzz(route: Route, mode: GenerationMode, shared: Target, own: Future[Target]) -> None:
    _fuzz(own.result(timeout=180) if route.own_server else shared, route, mode)
