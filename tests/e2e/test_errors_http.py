"""Error answers over HTTP: problem+json, trace ids, strict validation, size limits
(docs/api.md)."""

from __future__ import annotations

from collections.abc import Iterator
from html.parser import HTMLParser

import httpx
import pytest
from e2e_helpers import assert_invalid, assert_problem, bearer, fresh_token

from support.api import Operator
from support.server import RunningServer

MiB = 1024 * 1024

DOCUMENTED_ANCHORS = (
    "invalid-parameters",
    "unauthenticated",
    "forbidden",
    "not-found",
    "method-not-allowed",
    "conflict",
    "idempotency-key-concurrency-conflict",
    "request-timeout",
    "payload-too-large",
    "idempotency-key-reuse",
    "rate-limit-exceeded",
    "request-header-fields-too-large",
    "unknown-error",
)


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)


def _page_ids(server: RunningServer) -> set[str]:
    page = httpx.get(f"{server.base_url}/errors")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    parser = _Ids()
    parser.feed(page.text)
    return parser.ids


def test_unknown_path_is_404_problem_with_trace_id(server: RunningServer) -> None:
    answer = httpx.get(f"{server.base_url}/v3/no-such-thing")
    problem = assert_problem(answer, 404, "Not Found")
    assert problem["type"] == f"{server.base_url}/errors#not-found"
    assert problem["trace_id"] == answer.headers["Svc-Trace-Id"]
    assert problem["trace_id"]


def test_wrong_method_is_405_problem(operator: Operator) -> None:
    merchant = operator.new_merchant()
    token = fresh_token(merchant)["access_token"]
    answer = merchant.http.delete("/v3/merchant-accounts", headers=bearer(token))
    problem = assert_problem(answer, 405)
    assert problem["type"].endswith("/errors#method-not-allowed")
    assert "GET" in answer.headers.get("allow", "")


def test_every_response_carries_a_distinct_trace_id(
    operator: Operator, server: RunningServer
) -> None:
    merchant = operator.new_merchant()
    token = fresh_token(merchant)["access_token"]
    base = server.base_url
    answers = [
        httpx.get(f"{base}/openapi.json"),
        httpx.get(f"{base}/errors"),
        httpx.post(f"{base}/connect/token", data={"grant_type": "client_credentials"}),
        httpx.get(f"{base}/v3/merchant-accounts", headers=bearer(token)),
        httpx.get(f"{base}/v1/balances", headers=bearer(token)),
        httpx.get(f"{base}/v3/merchant-accounts"),
        operator.post("/admin/merchants", {"name": "Traced"}),
        operator.get("/admin/ledger/check"),
        operator.get("/sandbox/clock"),
        httpx.get(f"{base}/nowhere"),
    ]
    statuses = {a.status_code for a in answers}
    assert {200, 201, 400, 401, 404} <= statuses
    trace_ids = [a.headers.get("svc-trace-id") for a in answers]
    assert all(trace_ids), [(str(a.url), a.status_code) for a in answers]
    assert len(set(trace_ids)) == len(trace_ids)


def test_malformed_json_is_400_with_errors(server: RunningServer) -> None:
    answer = httpx.post(
        f"{server.base_url}/admin/merchants",
        content=b'{"name": "Broken",',
        headers={**bearer(server.admin_token), "Content-Type": "application/json"},
    )
    body = assert_invalid(answer)
    assert body["type"].endswith("/errors#invalid-parameters")


@pytest.mark.parametrize("name", [123, 1.5, True, None, ["A"], {"x": "y"}])
def test_wrong_json_type_is_400_naming_the_field(operator: Operator, name: object) -> None:
    assert_invalid(operator.post("/admin/merchants", {"name": name}), "name")


def test_missing_required_field_is_400_naming_it(operator: Operator) -> None:
    assert_invalid(operator.post("/admin/merchants", {}), "name")


def test_body_that_is_not_an_object_is_400(operator: Operator) -> None:
    assert_invalid(operator.post("/admin/merchants", ["name"]))


def test_unknown_field_is_400_naming_it(operator: Operator) -> None:
    answer = operator.post("/admin/merchants", {"name": "Extra", "nickname": "x"})
    assert_invalid(answer, "nickname")
    names = [m["name"] for m in operator.get("/admin/merchants").json()]
    assert "Extra" not in names, "a rejected request must create nothing"


def _oversized_body() -> bytes:
    return b'{"name": "' + b"x" * (MiB + 10) + b'"}'


def test_body_over_one_mebibyte_with_content_length_is_413(server: RunningServer) -> None:
    body = _oversized_body()
    answer = httpx.post(
        f"{server.base_url}/admin/merchants",
        content=body,
        headers={**bearer(server.admin_token), "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.request.headers["content-length"] == str(len(body))
    problem = assert_problem(answer, 413, "Payload Too Large")
    assert problem["type"].endswith("/errors#payload-too-large")


def test_chunked_body_over_one_mebibyte_is_413(server: RunningServer) -> None:
    body = _oversized_body()

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    answer = httpx.post(
        f"{server.base_url}/admin/merchants",
        content=chunks(),
        headers={**bearer(server.admin_token), "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.request.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in answer.request.headers
    assert_problem(answer, 413, "Payload Too Large")


def test_chunked_token_request_over_one_mebibyte_is_413(server: RunningServer) -> None:
    body = _oversized_body()

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    answer = httpx.post(
        f"{server.base_url}/connect/token",
        content=chunks(),
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert "content-length" not in answer.request.headers
    assert_problem(answer, 413, "Payload Too Large")


def test_chunked_body_under_the_limit_is_accepted(
    operator: Operator, server: RunningServer
) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"name": '
        yield b'"Chunked Ltd"}'

    answer = httpx.post(
        f"{server.base_url}/admin/merchants",
        content=chunks(),
        headers={**bearer(server.admin_token), "Content-Type": "application/json"},
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["name"] == "Chunked Ltd"


def test_errors_page_has_a_section_for_every_problem_type(server: RunningServer) -> None:
    ids = _page_ids(server)
    missing = [anchor for anchor in DOCUMENTED_ANCHORS if anchor not in ids]
    assert not missing, missing


def test_every_problem_type_answered_links_to_the_errors_page(
    operator: Operator, server: RunningServer
) -> None:
    base = server.base_url
    answers = [
        httpx.get(f"{base}/nowhere"),
        httpx.get(f"{base}/v3/merchant-accounts"),
        httpx.delete(f"{base}/v1/balances"),
        operator.post("/admin/merchants", {"name": 1}),
        operator.post(
            f"/admin/merchants/{operator.post('/admin/merchants', {'name': 'K'}).json()['id']}"
            "/signing-keys",
            {"public_key_pem": "nope"},
        ),
    ]
    ids = _page_ids(server)
    for answer in answers:
        problem = answer.json()
        page, _, anchor = problem["type"].partition("#")
        assert page == f"{base}/errors"
        assert anchor in ids, problem
