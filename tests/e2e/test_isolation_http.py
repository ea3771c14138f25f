"""Isolation between merchants and between credentials (OWASP API Top 10: broken object level
authorization, broken function level authorization, broken authentication), over HTTP against
`bankrail serve`.

Promises proved:

- every route whose path names a merchant's object (account, transactions, payment sources,
  v3 payout, payment, each authorization-flow action, cancel, refund, mandate and its
  actions) and every body that names one (the account of a v3 payout or of a payment, the
  payment source of a closed-loop payout, the mandate of a payment) answers another merchant
  exactly as for an id that does not exist (404 problem+json; 400 for the payment source and
  the mandate, as documented) and changes nothing. `ROUTES` is checked against
  `/openapi.json`, so a route added without an entry here fails `test_table_covers_every_route`;
- a merchant's access token, or a payment's resource token, cannot call any `/admin` or
  `/sandbox` route (enumerated from `/openapi.json`);
- a payment's `resource_token` cannot call the merchant routes, nor act on another payment;
- a signed request replayed with a changed body, path or Idempotency-Key, or signed with
  another merchant's key, is 401 and creates nothing; so is a v1 payout signature replayed
  with another `transaction_id`; a v1 `transaction_id` is the merchant's own (no cross-merchant
  conflict);
- the v1 and v3 APIs (payouts and payments alike: the service has one audience, `payments`)
  refuse a token without the `payments` scope with 403 InvalidAudience.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from e2e_helpers import PROBLEM_TYPE, assert_problem, bearer, wait_for
from mandate_helpers import (
    authorised_mandate,
    create_mandate,
    mandate_body,
    mandate_payment,
    redirected_mandate,
)
from pay_in_helpers import (
    EMBEDDED_FIRST_FORM,
    balances,
    bank_action,
    bank_token,
    next_action,
    payment_body,
)

from bankrail.security import signing
from support.api import MerchantClient, Operator
from support.server import RunningServer

GB_REDIRECT = "mock-payments-gb-redirect"
DE_EMBEDDED = "mock-payments-de-embedded"
RETURN_URI = "https://shop.example/back"
GB_IBAN = "GB29NWBK60161331926819"
SORT_CODE = {
    "type": "sort_code_account_number",
    "sort_code": "040004",
    "account_number": "12345678",
}

# Routes that need no merchant credentials, or name no merchant's object: each is here on
# purpose, so that a new route cannot slip past the table unnoticed.
PUBLIC = {
    "POST /connect/token",
    "GET /.well-known/jwks",
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",  # Prometheus scrape: per-route and per-status counts, no merchant's data
    "GET /v2/single-immediate-payments-providers",
    # The payer's browser, back from the bank, carries only the payment id (spec 3.x).
    "POST /v3/payments-provider-return",
    "POST /payments-provider-return",
}
# Path parameters that name the shared provider catalogue, not a merchant's object.
NOT_MERCHANT_OWNED = {"GET /v3/payments-providers/{provider_id}"}
# A listener's id is chosen by the CLI and an unknown one is attached (made) by its first
# stream, so another merchant's id cannot answer as a missing one does: it answers 404
# (tests/e2e/test_listen_cli.py), which tells that the random id is in use, and nothing else.
CLIENT_NAMED = {"GET /v3/webhook-listeners/{listener_id}/events"}
OPERATOR_PREFIXES = ("/admin", "/sandbox")


# --- the world: merchant A owns objects, merchant B tries to reach them ------------------------


@dataclass
class World:
    """Two merchants on the session's server and merchant A's objects in every state."""

    operator: Operator
    a: MerchantClient
    b: MerchantClient
    a_payout_id: str
    a_user_id: str
    a_source_id: str
    a_settled_payment_id: str
    a_payment: dict[str, Any]  # authorization_required, with its resource_token
    b_payment: dict[str, Any]
    a_other_audience_token: str  # merchant A's client whose only scope is not `payments`


def _create_payment(
    merchant: MerchantClient, provider_id: str | None = None, currency: str = "GBP", **extra: Any
) -> dict[str, Any]:
    answer = merchant.signed_post(
        "/v3/payments", payment_body(merchant, currency, provider_id=provider_id, **extra)
    )
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def _start_flow(merchant: MerchantClient, payment_id: str) -> dict[str, Any]:
    answer = merchant.signed_post(
        f"/v3/payments/{payment_id}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}},
    )
    assert answer.status_code == 200, answer.text
    return next_action(answer.json())


def _redirected(merchant: MerchantClient) -> tuple[str, str]:
    """A payment at the mock bank's consent step: (id, the bank token of its redirect)."""
    payment_id = str(_create_payment(merchant, GB_REDIRECT)["id"])
    action = _start_flow(merchant, payment_id)
    assert action["type"] == "redirect", action
    return payment_id, bank_token(action["uri"])


def _payout_body(merchant: MerchantClient, amount: int, account_id: str | None = None) -> Any:
    return {
        "merchant_account_id": account_id or merchant.accounts["GBP"]["id"],
        "amount_in_minor": amount,
        "currency": "GBP",
        "beneficiary": {
            "type": "external_account",
            "reference": "isolation",
            "account_holder_name": "Jane Doe",
            "account_identifier": SORT_CODE,
        },
    }


def _v1_body(transaction_id: str, amount: int) -> dict[str, Any]:
    return {
        "transaction_id": transaction_id,
        "beneficiary_name": "Jane Doe",
        "beneficiary_iban": GB_IBAN,
        "beneficiary_reference": "isolation",
        "currency": "GBP",
        "amount_in_minor": amount,
    }


def _json(merchant: MerchantClient, path: str) -> Any:
    answer = merchant.get(path)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _v1_records(merchant: MerchantClient) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = _json(merchant, "/v1/transactions")["results"]
    return results


def _settled_v1(merchant: MerchantClient, transaction_id: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        found = [r for r in _v1_records(merchant) if r["transaction_id"] == transaction_id]
        return found[0] if found and found[0]["status"] == "settled" else None

    return wait_for(check, timeout=30, what=f"v1 payout {transaction_id} settled")


@pytest.fixture(scope="module")
def world(server: RunningServer) -> Iterator[World]:
    """Merchants A and B, both funded; A with an executed payout, a settled payment (so a user
    and a payment source), and a payment waiting for authorisation. Nothing is left moving."""
    operator = Operator(server.base_url, server.admin_token)
    try:
        a = operator.new_merchant("Merchant A")
        b = operator.new_merchant("Merchant B")
        for merchant in (a, b):
            assert operator.top_up(merchant.accounts["GBP"], 100_000).status_code == 201

        answer = a.signed_post("/v3/payouts", _payout_body(a, 1_000))
        assert answer.status_code == 202, answer.text
        payout_id = str(answer.json()["id"])
        wait_for(
            lambda: _json(a, f"/v3/payouts/{payout_id}")["status"] == "executed",
            timeout=30,
            what="A's payout executed",
        )

        user_id = f"user-{uuid.uuid4()}"
        paid = _create_payment(a, GB_REDIRECT, user={"id": user_id, "name": "Alice Payer"})
        action = _start_flow(a, paid["id"])
        assert bank_action(a.http, paid["id"], action["uri"], "Execute").status_code == 202
        settled = wait_for(
            lambda: (
                (p := _json(a, f"/v3/payments/{paid['id']}"))["status"] == "payment_settled" and p
            ),
            timeout=30,
            what="A's payment settled",
        )

        client = operator.post(f"/admin/merchants/{a.merchant_id}/clients", {"scopes": ["payouts"]})
        assert client.status_code == 201, client.text
        token = a.http.post(
            "/connect/token",
            data={
                "grant_type": "client_credentials",
                "client_id": client.json()["client_id"],
                "client_secret": client.json()["client_secret"],
            },
        )
        assert token.status_code == 200, token.text

        yield World(
            operator=operator,
            a=a,
            b=b,
            a_payout_id=payout_id,
            a_user_id=user_id,
            a_source_id=settled["payment_source"]["id"],
            a_settled_payment_id=str(paid["id"]),
            a_payment=_create_payment(a),
            b_payment=_create_payment(b),
            a_other_audience_token=token.json()["access_token"],
        )
    finally:
        operator.close()


def _state(world: World, payment_id: str | None = None) -> list[Any]:
    """What a request that should be refused must leave alone: both merchants' accounts and
    balances, their payouts and top-ups, and the payment the request acted on."""
    views = [
        _json(world.a, "/v3/merchant-accounts"),
        _json(world.b, "/v3/merchant-accounts"),
        _v1_records(world.a),
        _v1_records(world.b),
        *(_account_list(m, c) for m in (world.a, world.b) for c in m.accounts),
    ]
    if payment_id is not None:
        views.append(_json(world.a, f"/v3/payments/{payment_id}"))
    return views


# --- the table: one valid request on merchant A's objects per merchant route ------------------


@dataclass(frozen=True)
class Target:
    """One request on merchant A's behalf, naming A's objects."""

    method: str
    path: str
    body: Any = None  # None: an empty body
    object_id: str | None = None  # A's object named in the path
    payment_id: str | None = None  # A's payment the request acts on
    owner_token: str | None = None  # the mock bank's token for A's payment
    intruder_token: str | None = None  # the mock bank's token for one of B's payments


@dataclass(frozen=True)
class Route:
    """How to make a valid request on A's objects, and what A itself gets (the control)."""

    prepare: Callable[[World], Target]
    owner_status: int
    owned: bool = True  # the path names one of the merchant's objects


def _account(w: World) -> str:
    return str(w.a.accounts["GBP"]["id"])


def _get(path: str, object_id: Callable[[World], str], suffix: str = "") -> Route:
    def prepare(w: World) -> Target:
        oid = object_id(w)
        return Target("GET", path.format(oid) + suffix, object_id=oid)

    return Route(prepare, 200)


# Sweeping A's account: nothing to sweep below a billion, whatever the clock does.
SWEEPING = {"max_amount_in_minor": 10**9, "frequency": "fortnightly"}


def _sweeping(w: World) -> str:
    return f"/v3/merchant-accounts/{_account(w)}/sweeping"


def _sweeping_set(w: World) -> Target:
    """A GET of A's sweeping settings, set first (else the owner's GET is 404 too)."""
    answer = w.a.signed_post(_sweeping(w), SWEEPING)
    assert answer.status_code == 200, answer.text
    return Target("GET", _sweeping(w), object_id=_account(w))


def _a_listener(w: World) -> str:
    """A webhook listener of A's: attached once (its stream opened, then left)."""
    listener_id = str(uuid.uuid4())
    with w.a.http.stream(
        "GET", f"/v3/webhook-listeners/{listener_id}/events", headers=bearer(w.a.token())
    ) as stream:
        assert stream.status_code == 200
        for line in stream.iter_lines():
            if line == ": attached":
                break
    return listener_id


def _listener_events(w: World) -> Target:
    listener_id = _a_listener(w)
    return Target("GET", f"/v3/webhook-listeners/{listener_id}/events", object_id=listener_id)


def _listener_answer(w: World) -> Target:
    # No delivery of A's listener exists here: the owner's control is the 404 of an unknown
    # delivery, and B must get exactly the answer of an unknown listener.
    listener_id = _a_listener(w)
    return Target(
        "POST",
        f"/v3/webhook-listeners/{listener_id}/deliveries/{uuid.uuid4()}/answers",
        {"status_code": 200},
        object_id=listener_id,
    )


def _unowned(method: str, path: str, body: Any = None) -> Route:
    return Route(lambda _w: Target(method, path, body), 200, owned=False)


def _on_payment(
    template: str,
    body: Any,
    owner_status: int,
    setup: Callable[[World], str] = lambda w: str(_create_payment(w.a)["id"]),
) -> Route:
    """An action on a fresh payment of A's (so each row starts from a known state)."""

    def prepare(w: World) -> Target:
        pid = setup(w)
        return Target("POST", template.format(pid), body, object_id=pid, payment_id=pid)

    return Route(prepare, owner_status)


def _a_refund(w: World) -> str:
    """A new refund of A's settled payment."""
    path = f"/v3/payments/{w.a_settled_payment_id}/refunds"
    answer = w.a.signed_post(path, REFUND)
    assert answer.status_code == 201, answer.text
    refund_id = str(answer.json()["id"])
    # Executed before the row's request: the money it moves is then no change of B's making.
    wait_for(
        lambda: _json(w.a, f"{path}/{refund_id}")["status"] == "executed",
        what=f"refund {refund_id} executed",
    )
    return refund_id


def _refund_of(template: str) -> Route:
    def prepare(w: World) -> Target:
        rid = _a_refund(w)
        pid = w.a_settled_payment_id
        return Target("GET", template.format(pid, rid), object_id=pid)

    return Route(prepare, 200)


def _flow_started(w: World) -> str:
    pid = str(_create_payment(w.a)["id"])
    assert _start_flow(w.a, pid)["type"] == "provider_selection"
    return pid


def _consent_awaited(w: World) -> str:
    pid = str(_create_payment(w.a, GB_REDIRECT)["id"])
    answer = w.a.signed_post(f"/v3/payments/{pid}/authorization-flow", {**FLOW, "consent": {}})
    assert next_action(answer.json())["type"] == "consent", answer.text
    return pid


def _form_shown(w: World) -> str:
    pid = str(_create_payment(w.a, DE_EMBEDDED, "EUR")["id"])
    assert _start_flow(w.a, pid)["type"] == "form"
    return pid


def _mock_bank(w: World) -> Target:
    pid, token = _redirected(w.a)
    _, intruder = _redirected(w.b)
    return Target(
        "POST",
        f"/mock-bank/api/single-immediate-payments/{pid}/action",
        {"action": "Cancel"},
        object_id=pid,
        payment_id=pid,
        owner_token=token,
        intruder_token=intruder,
    )


def _a_mandate(w: World) -> str:
    """A new mandate of A's that the payer authorised."""
    return authorised_mandate(w.a)[0]


def _on_mandate(
    template: str, body: Any, owner_status: int, setup: Callable[[World], str] = _a_mandate
) -> Route:
    """An action on a fresh mandate of A's."""

    def prepare(w: World) -> Target:
        mid = setup(w)
        return Target("POST", template.format(mid), body, object_id=mid)

    return Route(prepare, owner_status)


def _mandate_created(w: World) -> str:
    return str(create_mandate(w.a)["id"])


def _mandate_picking(w: World) -> str:
    mid = str(create_mandate(w.a, mandate_body(w.a, provider_id=None))["id"])
    answer = w.a.signed_post(f"/v3/mandates/{mid}/authorization-flow", FLOW)
    assert next_action(answer.json())["type"] == "provider_selection", answer.text
    return mid


def _mandate_consent_awaited(w: World) -> str:
    mid = str(create_mandate(w.a)["id"])
    answer = w.a.signed_post(f"/v3/mandates/{mid}/authorization-flow", {**FLOW, "consent": {}})
    assert next_action(answer.json())["type"] == "consent", answer.text
    return mid


def _consent_bank(w: World) -> Target:
    mid, token = redirected_mandate(w.a)
    _, intruder = redirected_mandate(w.b)
    return Target(
        "POST",
        f"/mock-bank/api/vrp-consents/{mid}/action",
        {"action": "Reject"},
        object_id=mid,
        owner_token=token,
        intruder_token=intruder,
    )


SELECTION = {"provider_id": GB_REDIRECT}
FLOW = {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}}
FORM = EMBEDDED_FIRST_FORM  # the first of three forms: it decides nothing
PAYMENT_SEARCH: dict[str, Any] = {"currencies": ["GBP"]}
REFUND = {"amount_in_minor": 1, "reference": "isolation"}

ROUTES: dict[str, Route] = {
    "GET /v3/merchant-accounts": _unowned("GET", "/v3/merchant-accounts"),
    "GET /v1/balances": _unowned("GET", "/v1/balances"),
    "GET /v1/transactions": _unowned("GET", "/v1/transactions"),
    "POST /v3/payment-providers/search": _unowned(
        "POST", "/v3/payment-providers/search", PAYMENT_SEARCH
    ),
    "POST /v3/payments-providers/search": _unowned(
        "POST", "/v3/payments-providers/search", PAYMENT_SEARCH
    ),
    "GET /v3/payments-providers/{provider_id}": _unowned(
        "GET", f"/v3/payments-providers/{GB_REDIRECT}"
    ),
    "GET /v3/payouts": _unowned("GET", "/v3/payouts"),
    # Only the caller's own requests (test_request_log_http.py proves another's are not).
    "GET /v3/request-log": _unowned("GET", "/v3/request-log"),
    "GET /v3/webhook-listeners/{listener_id}/events": Route(_listener_events, 200, owned=False),
    "POST /v3/webhook-listeners/{listener_id}/deliveries/{delivery_id}/answers": Route(
        _listener_answer, 404
    ),
    "GET /v3/payments": _unowned("GET", "/v3/payments"),
    "GET /payments": _unowned("GET", "/payments"),
    "POST /v3/payouts": Route(
        lambda w: Target("POST", "/v3/payouts", _payout_body(w.a, 100)), 202, owned=False
    ),
    "POST /v1/payouts": Route(
        lambda w: Target("POST", "/v1/payouts", _v1_body(str(uuid.uuid4()), 100)), 202, owned=False
    ),
    "POST /v3/payments": Route(
        lambda w: Target("POST", "/v3/payments", payment_body(w.a)), 201, owned=False
    ),
    "POST /payments": Route(
        lambda w: Target("POST", "/payments", payment_body(w.a)), 201, owned=False
    ),
    "POST /v1/users/deposits": Route(
        lambda w: Target(
            "POST",
            "/v1/users/deposits",
            {
                "user_id": w.a_user_id,
                "deposit": {
                    "deposit_id": str(uuid.uuid4()),
                    "amount_in_minor": 100,
                    "currency": "GBP",
                },
                "auth_flow": {"type": "redirect", "return_uri": RETURN_URI},
            },
        ),
        201,
        owned=False,
    ),
    # Routes whose path names one of the merchant's objects.
    "GET /v3/merchant-accounts/{merchant_account_id}": _get("/v3/merchant-accounts/{}", _account),
    "GET /v3/merchant-accounts/{merchant_account_id}/transactions": _get(
        "/v3/merchant-accounts/{}/transactions", _account
    ),
    "POST /v3/merchant-accounts/{merchant_account_id}/sweeping": Route(
        lambda w: Target("POST", _sweeping(w), SWEEPING, object_id=_account(w)), 200
    ),
    "GET /v3/merchant-accounts/{merchant_account_id}/sweeping": Route(_sweeping_set, 200),
    "DELETE /v3/merchant-accounts/{merchant_account_id}/sweeping": Route(
        lambda w: Target("DELETE", _sweeping(w), object_id=_account(w)), 204
    ),
    "GET /v3/merchant-accounts/{merchant_account_id}/payment-sources": Route(
        lambda w: Target(
            "GET",
            f"/v3/merchant-accounts/{_account(w)}/payment-sources?user_id={w.a_user_id}",
            object_id=_account(w),
        ),
        200,
    ),
    "GET /v3/payouts/{payout_id}": _get("/v3/payouts/{}", lambda w: w.a_payout_id),
    "GET /v3/payments/{payment_id}": _get("/v3/payments/{}", lambda w: w.a_settled_payment_id),
    "GET /payments/{payment_id}": _get("/payments/{}", lambda w: w.a_settled_payment_id),
    "POST /v3/payments/{payment_id}/authorization-flow": _on_payment(
        "/v3/payments/{}/authorization-flow", FLOW, 200
    ),
    "POST /payments/{payment_id}/authorization-flow": _on_payment(
        "/payments/{}/authorization-flow", FLOW, 200
    ),
    "POST /v3/payments/{payment_id}/authorization-flow/actions/provider-selection": _on_payment(
        "/v3/payments/{}/authorization-flow/actions/provider-selection",
        SELECTION,
        200,
        _flow_started,
    ),
    "POST /v3/payments/{payment_id}/submit-provider-selection": _on_payment(
        "/v3/payments/{}/submit-provider-selection", SELECTION, 200, _flow_started
    ),
    "POST /payments/{payment_id}/authorization-flow/actions/provider-selection": _on_payment(
        "/payments/{}/authorization-flow/actions/provider-selection",
        SELECTION,
        200,
        _flow_started,
    ),
    "POST /payments/{payment_id}/submit-provider-selection": _on_payment(
        "/payments/{}/submit-provider-selection", SELECTION, 200, _flow_started
    ),
    "POST /v3/payments/{payment_id}/authorization-flow/actions/consent": _on_payment(
        "/v3/payments/{}/authorization-flow/actions/consent", {}, 200, _consent_awaited
    ),
    "POST /v3/payments/{payment_id}/authorization-flow/actions/form": _on_payment(
        "/v3/payments/{}/authorization-flow/actions/form", FORM, 200, _form_shown
    ),
    "POST /v3/payments/{payment_id}/actions/cancel": _on_payment(
        "/v3/payments/{}/actions/cancel", None, 202
    ),
    "POST /payments/{payment_id}/actions/cancel": _on_payment(
        "/payments/{}/actions/cancel", None, 202
    ),
    "POST /v3/payments/{payment_id}/refunds": _on_payment(
        "/v3/payments/{}/refunds", REFUND, 201, lambda w: w.a_settled_payment_id
    ),
    "POST /payments/{payment_id}/refunds": _on_payment(
        "/payments/{}/refunds", REFUND, 201, lambda w: w.a_settled_payment_id
    ),
    "GET /v3/payments/{payment_id}/refunds": _get(
        "/v3/payments/{}/refunds", lambda w: w.a_settled_payment_id
    ),
    "GET /payments/{payment_id}/refunds": _get(
        "/payments/{}/refunds", lambda w: w.a_settled_payment_id
    ),
    "GET /v3/payments/{payment_id}/refunds/{refund_id}": _refund_of("/v3/payments/{}/refunds/{}"),
    "GET /payments/{payment_id}/refunds/{refund_id}": _refund_of("/payments/{}/refunds/{}"),
    "POST /mock-bank/api/single-immediate-payments/{payment_id}/action": Route(_mock_bank, 202),
    "POST /v3/mandates": Route(
        lambda w: Target("POST", "/v3/mandates", mandate_body(w.a)), 201, owned=False
    ),
    "GET /v3/mandates": _unowned("GET", "/v3/mandates"),
    "GET /v3/mandates/{mandate_id}": _get("/v3/mandates/{}", _a_mandate),
    "GET /v3/mandates/{mandate_id}/constraints": _get("/v3/mandates/{}/constraints", _a_mandate),
    "GET /v3/mandates/{mandate_id}/funds": _get(
        "/v3/mandates/{}/funds", _a_mandate, "?amount_in_minor=1&currency=GBP"
    ),
    "POST /v3/mandates/{mandate_id}/authorization-flow": _on_mandate(
        "/v3/mandates/{}/authorization-flow", FLOW, 200, _mandate_created
    ),
    "POST /v3/mandates/{mandate_id}/authorization-flow/actions/provider-selection": _on_mandate(
        "/v3/mandates/{}/authorization-flow/actions/provider-selection",
        SELECTION,
        200,
        _mandate_picking,
    ),
    "POST /v3/mandates/{mandate_id}/authorization-flow/actions/consent": _on_mandate(
        "/v3/mandates/{}/authorization-flow/actions/consent", None, 200, _mandate_consent_awaited
    ),
    "POST /v3/mandates/{mandate_id}/revoke": _on_mandate("/v3/mandates/{}/revoke", None, 204),
    "POST /mock-bank/api/vrp-consents/{mandate_id}/action": Route(_consent_bank, 202),
}
OWNED = sorted(k for k, r in ROUTES.items() if r.owned)
MOCK_BANK = "POST /mock-bank/api/single-immediate-payments/{payment_id}/action"
BANK_ROUTES = {MOCK_BANK, "POST /mock-bank/api/vrp-consents/{mandate_id}/action"}
MERCHANT_ROUTES = sorted(k for k in ROUTES if k not in BANK_ROUTES)
PAYMENT_ROUTES = sorted(k for k in MERCHANT_ROUTES if "{payment_id}" in k)


def _send(sender: MerchantClient, target: Target, token: str, path: str = "") -> httpx.Response:
    """The target's request with `token`, a POST or DELETE signed with the sender's key."""
    path = path or target.path
    if target.method == "GET" and path.endswith("/events"):
        # A listener's stream: its status and headers, without waiting for the stream's end.
        with sender.http.stream("GET", path, headers=bearer(token)) as stream:
            if stream.status_code != 200:
                stream.read()
            return stream
    if target.method == "GET":
        return sender.http.get(path, headers=bearer(token))
    if target.method == "DELETE":
        key = str(uuid.uuid4())
        signature = sender.sign("DELETE", path, b"", {"Idempotency-Key": key})
        headers = {**bearer(token), "Idempotency-Key": key, "Svc-Signature": signature}
        return sender.http.delete(path, headers=headers)
    if target.body is None:
        return sender.signed_post(path, None, token=token, raw=b"")
    return sender.signed_post(path, target.body, token=token)


def _operations(server: RunningServer) -> set[str]:
    spec = httpx.get(f"{server.base_url}/openapi.json", timeout=30).json()
    return {f"{method.upper()} {path}" for path, ops in spec["paths"].items() for method in ops}


def _fill(path: str, values: dict[str, str]) -> str:
    """The path with each `{name}` replaced by values[name] (a fresh UUID otherwise)."""
    for part in path.split("/"):
        if part.startswith("{") and part.endswith("}"):
            path = path.replace(part, values.get(part[1:-1], str(uuid.uuid4())))
    return path


def _masked(problem: dict[str, Any], object_id: str) -> tuple[Any, ...]:
    return (
        problem["status"],
        problem["type"],
        problem["title"],
        problem["detail"].replace(object_id, "<id>"),
    )


# --- coverage ---------------------------------------------------------------------------------


def _twin_of_a_v3_operation(operation: str, operations: set[str]) -> bool:
    """The operation is a `/v3` route's path without the prefix: the same route and handler
    (http/pipeline.py), whose isolation its `/v3` row proves."""
    method, path = operation.split(" ")
    return f"{method} /v3{path}" in operations


def test_table_covers_every_route(server: RunningServer) -> None:
    operations = _operations(server)
    merchant_facing = {
        op
        for op in operations
        if not op.split(" ")[1].startswith(OPERATOR_PREFIXES)
        and not (_twin_of_a_v3_operation(op, operations) and op not in ROUTES)
    }
    assert merchant_facing - PUBLIC - set(ROUTES) == set(), "routes missing from ROUTES/PUBLIC"
    assert (set(ROUTES) | PUBLIC) - operations == set(), "table rows for routes that do not exist"
    with_ids = (
        {op for op in merchant_facing if "{" in op} - PUBLIC - NOT_MERCHANT_OWNED - CLIENT_NAMED
    )
    assert with_ids <= set(OWNED), with_ids - set(OWNED)
    assert any(op.split(" ")[1].startswith("/admin") for op in operations)
    assert any(op.split(" ")[1].startswith("/sandbox") for op in operations)


# --- another merchant's objects ----------------------------------------------------------------


@pytest.mark.parametrize("route", OWNED)
def test_other_merchant_gets_404_on_an_object_named_in_the_path(world: World, route: str) -> None:
    target = ROUTES[route].prepare(world)
    assert target.object_id is not None
    before = _state(world, target.payment_id)

    denied_status = 401 if target.intruder_token else 404
    intruder_token = target.intruder_token or world.b.token()
    denied = _send(world.b, target, intruder_token)
    problem = assert_problem(denied, denied_status)
    # Exactly the answer for an object that does not exist: nothing tells B that A's exists.
    missing_id = str(uuid.uuid4())
    missing = _send(
        world.b, target, intruder_token, target.path.replace(target.object_id, missing_id)
    )
    assert _masked(problem, target.object_id) == _masked(
        assert_problem(missing, denied_status), missing_id
    )
    assert _state(world, target.payment_id) == before, "B's request changed A's object"

    owner = _send(world.a, target, target.owner_token or world.a.token())
    assert owner.status_code == ROUTES[route].owner_status, owner.text
    _refunds_done(world)


def _refunds_done(world: World) -> None:
    """Wait until A's refunds have executed: the owner's refund (the control of a refund row)
    moves A's money after its 201, which the next row would otherwise see as B's doing."""
    path = f"/v3/payments/{world.a_settled_payment_id}/refunds"
    wait_for(
        lambda: all(r["status"] in ("executed", "failed") for r in _json(world.a, path)["items"]),
        what="A's refunds executed",
    )


def _source_beneficiary(user_id: str, source_id: str) -> dict[str, Any]:
    return {
        "type": "payment_source",
        "user_id": user_id,
        "payment_source_id": source_id,
        "reference": "refund",
    }


# Requests of B's whose body names one of A's objects: (path, body builder given the id, A's id,
# the documented status for an unknown id).
BODY_IDS: dict[str, tuple[str, Callable[[World, str], Any], Callable[[World], str], int]] = {
    "v3 payout from A's account": (
        "/v3/payouts",
        lambda w, oid: _payout_body(w.b, 100, oid),
        _account,
        404,
    ),
    "v3 payment into A's account (beneficiary)": (
        "/v3/payments",
        lambda w, oid: {
            **payment_body(w.b),
            "payment_method": {
                **payment_body(w.b)["payment_method"],
                "beneficiary": {"type": "merchant_account", "merchant_account_id": oid},
            },
        },
        _account,
        404,
    ),
    "payment into A's account (flat form)": (
        "/payments",
        lambda _w, oid: {
            "amount_in_minor": 100,
            "currency": "GBP",
            "merchant_account_id": oid,
            "payment_method": {
                "type": "bank_transfer",
                "provider_selection": {"type": "user_selected"},
            },
        },
        _account,
        404,
    ),
    "v3 payment on A's mandate": (
        "/v3/payments",
        lambda _w, oid: mandate_payment(oid, 100),
        _a_mandate,
        400,
    ),
    "closed-loop payout to A's user's payment source": (
        "/v3/payouts",
        lambda w, oid: {
            **_payout_body(w.b, 100),
            "beneficiary": _source_beneficiary(w.a_user_id, oid),
        },
        lambda w: w.a_source_id,
        400,
    ),
}


@pytest.mark.parametrize("case", sorted(BODY_IDS))
def test_other_merchant_cannot_use_an_object_named_in_the_body(world: World, case: str) -> None:
    path, body, object_id, status = BODY_IDS[case]
    oid = object_id(world)
    before = _state(world)
    denied = world.b.signed_post(path, body(world, oid))
    problem = assert_problem(denied, status)
    missing_id = str(uuid.uuid4())
    missing = world.b.signed_post(path, body(world, missing_id))
    assert _masked(problem, oid) == _masked(assert_problem(missing, status), missing_id)
    assert problem.get("errors") == assert_problem(missing, status).get("errors")
    assert _state(world) == before, "nothing may be created or held"


def test_payment_sources_of_another_merchants_user_stay_hidden(world: World) -> None:
    query = f"payment-sources?user_id={world.a_user_id}"
    mine = _json(world.a, f"/v3/merchant-accounts/{_account(world)}/{query}")["items"]
    assert [s["id"] for s in mine] == [world.a_source_id]
    theirs = _json(world.b, f"/v3/merchant-accounts/{world.b.accounts['GBP']['id']}/{query}")
    assert theirs["items"] == []


def test_v1_transaction_ids_belong_to_each_merchant(world: World) -> None:
    """B reusing A's transaction_id is B's own new payout, not a 409 (which would reveal A's)
    nor a replay of A's (which would create nothing for B)."""
    shared = str(uuid.uuid4())
    assert world.a.signed_post("/v1/payouts", _v1_body(shared, 111)).status_code == 202
    answer = world.b.signed_post("/v1/payouts", _v1_body(shared, 222))
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"transaction_id": shared}
    assert _settled_v1(world.a, shared)["amount_in_minor"] == 111
    assert _settled_v1(world.b, shared)["amount_in_minor"] == 222


# --- operator routes ----------------------------------------------------------------------------


def _operator_body(world: World, operation: str) -> Any:
    """A valid body, so that a missing check would show as success rather than as a 400."""
    a = world.a
    iban = next(i["iban"] for i in a.accounts["GBP"]["account_identifiers"] if i["type"] == "iban")
    key = signing.generate_private_key()
    bodies: dict[str, Any] = {
        "POST /admin/merchants": {"name": "Mallory"},
        "POST /admin/merchants/{merchant_id}/clients": {"scopes": ["payments"]},
        "POST /admin/merchants/{merchant_id}/signing-keys": {
            "public_key_pem": signing.public_key_pem(key.public_key())
        },
        "PUT /admin/merchants/{merchant_id}/webhooks": {"payments_uri": "http://127.0.0.1:9/x"},
        "POST /admin/merchants/{merchant_id}/merchant-accounts": {"currency": "GBP"},
        "PUT /admin/merchant-accounts/{merchant_account_id}/balance-threshold": {
            "threshold_in_minor": 1
        },
        "POST /admin/screening-list": {"names": ["Mallory Isolation"]},
        "POST /sandbox/bank-transfers": {
            "iban": iban,
            "amount_in_minor": 1_000_000,
            "currency": "GBP",
            "remitter_name": "Mallory",
            "reference": "free money",
        },
        "POST /sandbox/clock/advance": {"seconds": 1},
    }
    return bodies.get(operation, {})


def _operator_state(world: World) -> list[Any]:
    op = world.operator
    return [
        op.get("/admin/merchants").json(),
        op.get("/admin/screening-list").json(),
        op.get("/admin/webhook-deliveries", merchant_id=world.a.merchant_id).json(),
        _json(world.a, "/v3/merchant-accounts"),
    ]


@pytest.mark.parametrize("credential", ["merchant access token", "payment resource token"])
def test_merchant_credentials_cannot_call_operator_routes(
    world: World, server: RunningServer, credential: str
) -> None:
    token = (
        world.a.token()
        if credential == "merchant access token"
        else world.a_payment["resource_token"]
    )
    operations = sorted(
        op for op in _operations(server) if op.split(" ")[1].startswith(OPERATOR_PREFIXES)
    )
    values = {
        "merchant_id": world.a.merchant_id,
        "merchant_account_id": _account(world),
    }
    before = _operator_state(world)
    allowed = []
    for operation in operations:
        method, path = operation.split(" ")
        answer = world.a.http.request(
            method,
            _fill(path, values),
            headers=bearer(token),
            json=None if method == "GET" else _operator_body(world, operation),
        )
        content_type = answer.headers.get("content-type", "").split(";")[0]
        if answer.status_code not in (401, 403) or content_type != PROBLEM_TYPE:
            allowed.append((operation, answer.status_code, answer.text[:200]))
    assert allowed == []
    assert len(operations) >= 10, operations
    assert _operator_state(world) == before


# --- resource tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize("route", sorted(set(MERCHANT_ROUTES) - set(PAYMENT_ROUTES)))
def test_resource_token_cannot_call_merchant_routes(world: World, route: str) -> None:
    target = ROUTES[route].prepare(world)
    before = _state(world)
    answer = _send(world.a, target, world.a_payment["resource_token"])
    assert_problem(answer, 401, "Unauthenticated")
    assert _state(world) == before


@pytest.mark.parametrize("whose", ["another payment of the merchant", "another merchant's payment"])
@pytest.mark.parametrize("route", PAYMENT_ROUTES)
def test_resource_token_cannot_act_on_another_payment(world: World, route: str, whose: str) -> None:
    target = ROUTES[route].prepare(world)
    assert target.object_id is not None
    source = world.a_payment if whose.endswith("of the merchant") else world.b_payment
    assert source["id"] != target.object_id
    before = _state(world, target.object_id)
    answer = _send(world.a, target, source["resource_token"])
    assert_problem(answer, 401, "Unauthenticated")
    assert _state(world, target.object_id) == before


def test_resource_token_works_for_its_own_payment(world: World) -> None:
    """The control of the two tests above: the token is valid, only not there."""
    payment = world.a_payment
    answer = world.a.http.get(
        f"/v3/payments/{payment['id']}", headers=bearer(payment["resource_token"])
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "authorization_required"


# --- audience -----------------------------------------------------------------------------------


@pytest.mark.parametrize("route", MERCHANT_ROUTES)
def test_token_without_payments_audience_is_refused(world: World, route: str) -> None:
    """Merchant A's own client without the `payments` scope (here: `payouts`, which is not an
    audience of its own) signs with A's key and names A's objects: only the audience stops it."""
    target = ROUTES[route].prepare(world)
    before = _state(world, target.payment_id)
    answer = _send(world.a, target, world.a_other_audience_token)
    problem = assert_problem(answer, 403, "Forbidden")
    assert "InvalidAudience" in problem["detail"]
    assert _state(world, target.payment_id) == before


# --- replayed signatures ------------------------------------------------------------------------


@pytest.fixture
def funded(world: World) -> MerchantClient:
    """A fresh merchant with 10,000 in its GBP account, whose balances only this test moves."""
    merchant = world.operator.new_merchant("Replay Target")
    assert world.operator.top_up(merchant.accounts["GBP"], 10_000).status_code == 201
    return merchant


def _post_raw(
    merchant: MerchantClient,
    path: str,
    content: bytes,
    signature: str,
    idempotency_key: str | None,
    header: str = "Svc-Signature",
) -> httpx.Response:
    headers = {**bearer(merchant.token()), "Content-Type": "application/json", header: signature}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return merchant.http.post(path, content=content, headers=headers)


def _assert_bad_signature(answer: httpx.Response) -> None:
    problem = assert_problem(answer, 401, "Unauthenticated")
    assert problem["detail"].startswith("Invalid request signature"), problem


def _account_list(merchant: MerchantClient, currency: str = "GBP") -> list[dict[str, Any]]:
    """The movements of the merchant's account: payouts of both APIs, top-ups, payments."""
    items: list[dict[str, Any]] = _json(
        merchant, f"/v3/merchant-accounts/{merchant.accounts[currency]['id']}/transactions"
    )["items"]
    return items


def _payouts(merchant: MerchantClient) -> list[dict[str, Any]]:
    """Every payout of the merchant's GBP account, made through v1 or v3."""
    return [item for item in _account_list(merchant) if item["type"] == "payout"]


def test_v3_signature_replayed_with_a_changed_body_is_rejected(funded: MerchantClient) -> None:
    key = str(uuid.uuid4())
    content = json.dumps(_payout_body(funded, 1_000)).encode()
    signature = funded.sign("POST", "/v3/payouts", content, {"Idempotency-Key": key})
    changed = json.dumps(_payout_body(funded, 9_000)).encode()

    _assert_bad_signature(_post_raw(funded, "/v3/payouts", changed, signature, key))
    assert balances(funded) == (10_000, 10_000)
    assert _payouts(funded) == []
    # The signature was good for what it signed.
    assert _post_raw(funded, "/v3/payouts", content, signature, key).status_code == 202
    assert balances(funded)[1] == 9_000


def test_v3_signature_replayed_with_another_idempotency_key_is_rejected(
    funded: MerchantClient,
) -> None:
    key = str(uuid.uuid4())
    content = json.dumps(_payout_body(funded, 1_000)).encode()
    signature = funded.sign("POST", "/v3/payouts", content, {"Idempotency-Key": key})
    assert _post_raw(funded, "/v3/payouts", content, signature, key).status_code == 202

    replay = _post_raw(funded, "/v3/payouts", content, signature, str(uuid.uuid4()))
    _assert_bad_signature(replay)
    assert balances(funded)[1] == 9_000, "the replay must not pay out a second time"
    assert len(_payouts(funded)) == 1


def test_v3_signature_replayed_on_another_path_is_rejected(funded: MerchantClient) -> None:
    first, second = (str(_create_payment(funded)["id"]) for _ in range(2))
    key = str(uuid.uuid4())
    signature = funded.sign(
        "POST", f"/v3/payments/{first}/actions/cancel", b"", {"Idempotency-Key": key}
    )

    _assert_bad_signature(
        _post_raw(funded, f"/v3/payments/{second}/actions/cancel", b"", signature, key)
    )
    assert _json(funded, f"/v3/payments/{second}")["status"] == "authorization_required"
    answer = _post_raw(funded, f"/v3/payments/{first}/actions/cancel", b"", signature, key)
    assert answer.status_code == 202, answer.text
    assert _json(funded, f"/v3/payments/{first}")["failure_reason"] == "canceled"

    # The unversioned alias is another path: a signature for one does not verify on the other.
    content = json.dumps(payment_body(funded)).encode()
    signature = funded.sign("POST", "/payments", content, {"Idempotency-Key": key})
    _assert_bad_signature(_post_raw(funded, "/v3/payments", content, signature, key))


def test_another_merchants_signing_key_does_not_verify(
    world: World, funded: MerchantClient
) -> None:
    key = str(uuid.uuid4())
    content = json.dumps(_payout_body(funded, 1_000)).encode()
    foreign = world.b.sign("POST", "/v3/payouts", content, {"Idempotency-Key": key})
    _assert_bad_signature(_post_raw(funded, "/v3/payouts", content, foreign, key))
    assert balances(funded) == (10_000, 10_000)
    assert _payouts(funded) == []


def _body_only_signature(merchant: MerchantClient, body: bytes) -> str:
    """The standard detached JWS over the body alone (no tl_version), accepted on v1."""
    key = serialization.load_pem_private_key(merchant.private_key_pem.encode(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    header = signing.b64url_encode(json.dumps({"alg": "ES512", "kid": merchant.kid}).encode())
    der = key.sign(header + b"." + signing.b64url_encode(body), ec.ECDSA(hashes.SHA512()))
    r, s = decode_dss_signature(der)
    raw = r.to_bytes(66, "big") + s.to_bytes(66, "big")
    return (header + b".." + signing.b64url_encode(raw)).decode()


@pytest.mark.parametrize("form", ["tl_version 2", "body-only JWS"])
def test_v1_signature_replayed_with_another_transaction_id_is_rejected(
    funded: MerchantClient, form: str
) -> None:
    signed_id, replayed_id = str(uuid.uuid4()), str(uuid.uuid4())
    content = json.dumps(_v1_body(signed_id, 1_000)).encode()
    signature = (
        funded.sign("POST", "/v1/payouts", content, {})
        if form == "tl_version 2"
        else _body_only_signature(funded, content)
    )
    replayed = json.dumps(_v1_body(replayed_id, 1_000)).encode()

    answer = _post_raw(funded, "/v1/payouts", replayed, signature, None, "X-SVC-Signature")
    _assert_bad_signature(answer)
    assert balances(funded) == (10_000, 10_000)
    assert _payouts(funded) == []
    answer = _post_raw(funded, "/v1/payouts", content, signature, None, "X-SVC-Signature")
    assert answer.status_code == 202, answer.text
    assert len(_payouts(funded)) == 1
    assert [p["transaction_id"] for p in _v1_records(funded) if p["type"] == "payout"] == [
        signed_id
    ]
