"""The fast lane (`web/fastlane.py`) answers the common `POST /v3/payouts` and
`GET /v3/payouts/{id}` without FastAPI's per-request machinery. It must answer exactly as the
router does: two servers share one database, one with the fast lane and one started with
`BANKRAIL_FAST_LANE=0`, and every variant of the two operations (the common case, and each way
a request can fall off it) gets the same status, headers and body from both, ids and trace ids
aside. Payouts either server accepted are the same payouts, and a request the fast lane hands
on to the router is charged to the client's rate limit once, not twice.

The second server also verifies signatures on threads (`BANKRAIL_VERIFY_PROCESSES=0`), the
first in its verifier processes (the default): every signature variant gets the same answer
from both ways of verifying.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_helpers import assert_problem, fresh_token, is_uuid, wait_for

from support.api import MerchantClient, Operator
from support.server import RunningServer, free_port, own_server

SORT_CODE = {
    "type": "sort_code_account_number",
    "sort_code": "040004",
    "account_number": "12345678",
}
GB_IBAN = {"type": "iban", "iban": "GB29NWBK60161331926819"}
VOLATILE = {"trace_id", "created_at", "authorized_at", "executed_at", "failed_at"}


@dataclass
class Pair:
    """The same database served with (`fast`) and without (`router`) the fast lane."""

    fast: Operator
    router: Operator
    merchant: MerchantClient
    other: MerchantClient
    other_audience_token: str


@pytest.fixture(scope="module")
def pair(pg_server: str) -> Iterator[Pair]:
    # One public URL for both, as behind one load balancer: it is in every problem's `type`.
    with own_server(pg_server, {"BANKRAIL_PUBLIC_URL": "https://bankrail.test"}) as fast:
        base = Path(tempfile.mkdtemp(prefix="bankrail-router-"))
        router = RunningServer(
            data_dir=base / "data",
            port=free_port(),
            admin_token=fast.admin_token,
            env={**fast.env, "BANKRAIL_FAST_LANE": "0", "BANKRAIL_VERIFY_PROCESSES": "0"},
        )
        router.start(timeout=120)
        fast_operator = Operator(fast.base_url, fast.admin_token)
        router_operator = Operator(router.base_url, router.admin_token)
        try:
            merchant = fast_operator.new_merchant("Fast Lane Ltd", currencies=("GBP", "EUR"))
            other = fast_operator.new_merchant("Someone Else Ltd", currencies=("GBP",))
            for account in (merchant.accounts["GBP"], other.accounts["GBP"]):
                assert fast_operator.top_up(account, 1_000_000).status_code == 201
            client = fast_operator.post(
                f"/admin/merchants/{merchant.merchant_id}/clients", {"scopes": ["payouts"]}
            ).json()
            answer = fresh_token(
                merchant, client_id=client["client_id"], client_secret=client["client_secret"]
            )
            token = answer["access_token"]
            yield Pair(fast_operator, router_operator, merchant, other, token)
        finally:
            fast_operator.close()
            router_operator.close()
            router.stop()
            shutil.rmtree(base, ignore_errors=True)


def _normalised(answer: httpx.Response) -> tuple[Any, ...]:
    """Status, content type, Retry-After, the path of a redirect, and the body with
    per-request values masked."""

    def mask(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ("<volatile>" if k in VOLATILE else mask(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [mask(v) for v in value]
        return "<uuid>" if isinstance(value, str) and is_uuid(value) and "-" in value else value

    assert answer.headers["svc-trace-id"]
    assert int(answer.headers["content-length"]) == len(answer.content)
    try:
        body: Any = mask(answer.json())
    except ValueError:
        body = answer.text
    location = answer.headers.get("location")
    return (
        answer.status_code,
        answer.headers.get("content-type"),
        answer.headers.get("retry-after"),
        httpx.URL(location).path if location else None,
        body,
    )


# --- POST /v3/payouts -------------------------------------------------------------------------


def _payout(merchant: MerchantClient, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "merchant_account_id": merchant.accounts["GBP"]["id"],
        "amount_in_minor": 125,
        "currency": "GBP",
        "beneficiary": {
            "type": "external_account",
            "reference": "fast lane",
            "account_holder_name": "Jane Doe",
            "account_identifier": SORT_CODE,
        },
    }
    body.update(changes)
    return body


Request = tuple[list[tuple[str, str]], bytes]
Variant = Callable[[Pair, str], Request]


def _signed(
    pair: Pair,
    key: str | None,
    body: Any,
    *,
    content_type: str = "application/json",
    signature_header: str = "Svc-Signature",
    sign_body: bytes | None = None,
    token: str | None = None,
    extra: list[tuple[str, str]] | None = None,
) -> Request:
    merchant = pair.merchant
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    signed = {"Idempotency-Key": key} if key is not None else {}
    headers = [
        ("Authorization", f"Bearer {token or merchant.token()}"),
        ("Content-Type", content_type),
        (signature_header, merchant.sign("POST", "/v3/payouts", sign_body or raw, signed)),
        *signed.items(),
        *(extra or []),
    ]
    return headers, raw


POST_VARIANTS: dict[str, Variant] = {
    "sort code": lambda p, k: _signed(p, k, _payout(p.merchant)),
    "iban with metadata": lambda p, k: _signed(
        p,
        k,
        _payout(
            p.merchant,
            metadata={"order": "42"},
            beneficiary={
                "type": "external_account",
                "reference": "iban",
                "account_holder_name": "John Roe",
                "account_identifier": GB_IBAN,
            },
        ),
    ),
    "charset parameter": lambda p, k: _signed(
        p, k, _payout(p.merchant), content_type="application/json; charset=utf-8"
    ),
    "x-svc-signature header": lambda p, k: _signed(
        p, k, _payout(p.merchant), signature_header="X-SVC-Signature"
    ),
    "text/plain body": lambda p, k: _signed(p, k, _payout(p.merchant), content_type="text/plain"),
    "no idempotency key": lambda p, k: _signed(p, None, _payout(p.merchant)),
    "idempotency key too long": lambda p, k: _signed(p, k + "x" * 200, _payout(p.merchant)),
    "repeated idempotency key header": lambda p, k: _signed(
        p, k, _payout(p.merchant), extra=[("Idempotency-Key", k)]
    ),
    "signature over another body": lambda p, k: _signed(
        p, k, _payout(p.merchant), sign_body=b'{"amount_in_minor": 1}'
    ),
    "invalid token": lambda p, k: _signed(p, k, _payout(p.merchant), token="not-a-token"),
    "token without payments audience": lambda p, k: _signed(
        p, k, _payout(p.merchant), token=p.other_audience_token
    ),
    "malformed json": lambda p, k: _signed(p, k, b'{"amount_in_minor": '),
    "nan amount": lambda p, k: _signed(
        p, k, json.dumps(_payout(p.merchant)).replace("125", "NaN").encode()
    ),
    "invalid fields": lambda p, k: _signed(p, k, _payout(p.merchant, amount_in_minor=0)),
    "currency of another account": lambda p, k: _signed(p, k, _payout(p.merchant, currency="EUR")),
    "another merchant's account": lambda p, k: _signed(
        p, k, _payout(p.merchant, merchant_account_id=p.other.accounts["GBP"]["id"])
    ),
    "more than the balance": lambda p, k: _signed(
        p, k, _payout(p.merchant, amount_in_minor=10**12)
    ),
    "nul character in a name": lambda p, k: _signed(
        p,
        k,
        _payout(
            p.merchant,
            beneficiary={**_payout(p.merchant)["beneficiary"], "account_holder_name": "A\u0000B"},
        ),
    ),
    "unknown payment source": lambda p, k: _signed(
        p,
        k,
        _payout(
            p.merchant,
            beneficiary={
                "type": "payment_source",
                "reference": "closed loop",
                "payment_source_id": str(uuid.uuid4()),
                "user_id": str(uuid.uuid4()),
            },
        ),
    ),
}


def _post(operator: Operator, request: Request) -> httpx.Response:
    headers, raw = request
    return operator.http.post("/v3/payouts", content=raw, headers=httpx.Headers(headers))


@pytest.mark.parametrize("variant", list(POST_VARIANTS))
def test_post_answers_as_the_router_does(pair: Pair, variant: str) -> None:
    """Each variant, sent to both servers under keys of its own, gets the same answer from
    both; sent again under the same key it is replayed, from either server."""
    answers = {}
    for side, operator in (("fast", pair.fast), ("router", pair.router)):
        key = str(uuid.uuid4())
        request = POST_VARIANTS[variant](pair, key)
        first = _post(operator, request)
        again = _post(operator, request)
        if first.status_code == 202:
            assert again.content == first.content  # the same payout, not a second one
        assert _normalised(again) == _normalised(first), (side, again.text)
        answers[side] = first
    assert _normalised(answers["fast"]) == _normalised(answers["router"]), {
        side: answer.text for side, answer in answers.items()
    }
    if answers["fast"].status_code == 202:
        # Compared once both have run their course: one server's job loop may take a payout
        # further than the other's at any given moment.
        records = [
            wait_for(
                lambda path=f"/v3/payouts/{answer.json()['id']}": _finished(pair.merchant, path),
                what="the payout to execute or fail",
            )
            for answer in answers.values()
        ]
        assert _normalised_record(records[0]) == _normalised_record(records[1])


def _finished(merchant: MerchantClient, path: str) -> dict[str, Any] | None:
    record: dict[str, Any] = merchant.get(path).json()
    return record if record["status"] in ("executed", "failed") else None


def _normalised_record(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in VOLATILE | {"id", "status"}}


def test_a_key_reused_with_another_body_is_refused_by_both(pair: Pair) -> None:
    """422 from either server, whichever server accepted the key first."""
    for first, second in ((pair.fast, pair.router), (pair.router, pair.fast), (pair.fast,) * 2):
        key = str(uuid.uuid4())
        assert _post(first, _signed(pair, key, _payout(pair.merchant))).status_code == 202
        changed = _signed(pair, key, _payout(pair.merchant, amount_in_minor=126))
        assert_problem(_post(second, changed), 422)


# --- GET /v3/payouts/{id} ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def payout_id(pair: Pair) -> str:
    answer = _post(pair.fast, _signed(pair, str(uuid.uuid4()), _payout(pair.merchant)))
    assert answer.status_code == 202, answer.text
    identifier = str(answer.json()["id"])
    wait_for(
        lambda: (
            pair.merchant.get(f"/v3/payouts/{identifier}").json()["status"] == "executed" or None
        ),
        what="the payout executed",
    )
    return identifier


GET_VARIANTS: dict[str, Callable[[Pair, str], tuple[str, dict[str, str]]]] = {
    "canonical id": lambda p, i: (i, {}),
    "capital letters": lambda p, i: (i.upper(), {}),
    "no hyphens": lambda p, i: (i.replace("-", ""), {}),
    "braces": lambda p, i: ("{" + i + "}", {}),
    "query string": lambda p, i: (i + "?expand=all", {}),
    "trailing slash": lambda p, i: (i + "/", {}),
    "not an id": lambda p, i: ("payout-1", {}),
    "unknown id": lambda p, i: (str(uuid.uuid4()), {}),
    "another merchant's token": lambda p, i: (
        i,
        {"Authorization": f"Bearer {p.other.token()}"},
    ),
    "no token": lambda p, i: (i, {"Authorization": ""}),
    "basic credentials": lambda p, i: (i, {"Authorization": "Basic dXNlcjpwYXNz"}),
    "token without payments audience": lambda p, i: (
        i,
        {"Authorization": f"Bearer {p.other_audience_token}"},
    ),
}


@pytest.mark.parametrize("variant", list(GET_VARIANTS))
def test_get_answers_as_the_router_does(pair: Pair, payout_id: str, variant: str) -> None:
    """The same payout read through either server: byte for byte the same record, and the
    same problem for every request the router refuses."""
    suffix, headers = GET_VARIANTS[variant](pair, payout_id)
    merged = {"Authorization": f"Bearer {pair.merchant.token()}", **headers}
    sent = {k: v for k, v in merged.items() if v}
    answers = [
        operator.http.get(f"/v3/payouts/{suffix}", headers=sent)
        for operator in (pair.fast, pair.router)
    ]
    assert _normalised(answers[0]) == _normalised(answers[1]), [a.text for a in answers]
    if answers[0].status_code == 200:
        assert answers[0].content == answers[1].content


# --- rate limit -------------------------------------------------------------------------------


def test_a_request_handed_on_is_charged_to_the_rate_limit_once(pg_server: str) -> None:
    """A refused request the fast lane hands on to the router costs one request of the
    client's budget: with a burst of 4, four refused payouts and no more pass the limit."""
    env = {"BANKRAIL_RATE_LIMIT_PER_SECOND": "0.01", "BANKRAIL_RATE_LIMIT_BURST": "4"}
    with own_server(pg_server, env, admin_token=secrets.token_urlsafe(32)) as server:
        operator = Operator(server.base_url, server.admin_token)
        try:
            merchant = operator.new_merchant("Limited Ltd", currencies=("GBP",))
            token = merchant.token()
            raw = json.dumps(_payout(merchant)).encode()
            headers = {
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Idempotency-Key": str(uuid.uuid4()),
                "Svc-Signature": merchant.sign("POST", "/v3/payouts", b"{}", {}),
            }
            for _ in range(4):
                refused = merchant.http.post("/v3/payouts", content=raw, headers=headers)
                assert_problem(refused, 401)
            assert_problem(merchant.http.post("/v3/payouts", content=raw, headers=headers), 429)
        finally:
            operator.close()
