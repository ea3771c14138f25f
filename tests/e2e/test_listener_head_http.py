"""A HEAD of a webhook listener's stream (every GET route answers HEAD) says what the GET would
and does nothing: it attaches no listener, so no event gets a delivery for it, and its stream
takes no delivery to send to no one (events/routes.py `listen`)."""

from __future__ import annotations

import time
import uuid

import httpx
from e2e_helpers import bearer

from support.api import Operator
from support.server import RunningServer


def _deliveries(operator: Operator, merchant_id: str) -> list[dict[str, object]]:
    answer = operator.get("/admin/webhook-deliveries", merchant_id=merchant_id)
    assert answer.status_code == 200, answer.text
    items: list[dict[str, object]] = answer.json()["items"]
    return items


def test_a_head_of_the_stream_attaches_no_listener(
    server: RunningServer, operator: Operator
) -> None:
    merchant = operator.new_merchant()
    other = operator.new_merchant()
    listener = uuid.uuid4()
    path = f"/v3/webhook-listeners/{listener}/events"
    with httpx.Client(base_url=server.base_url, timeout=10) as client:
        head = client.head(path, headers=bearer(merchant.token()))
        assert head.status_code == 200
        assert head.headers["content-type"].startswith("text/event-stream")

        answer = operator.top_up(merchant.accounts["GBP"], 1_00)
        assert answer.status_code in (200, 201, 202), answer.text
        deadline = time.monotonic() + 20
        while not (found := _deliveries(operator, merchant.merchant_id)):
            assert time.monotonic() < deadline, "the top-up's event was not recorded"
            time.sleep(0.05)
        assert [d["listener_id"] for d in found] == [None]  # the URI's only

        # Attached by a GET, the listener is the merchant's: another merchant's HEAD is 404.
        with client.stream("GET", path, headers=bearer(merchant.token())) as stream:
            assert stream.status_code == 200
        refused = client.head(path, headers=bearer(other.token()))
        assert refused.status_code == 404


def test_an_answer_that_is_not_a_status_a_reason_or_a_latency_is_refused(
    server: RunningServer, operator: Operator
) -> None:
    # The fuzzer leaves the answers route out (test_api_fuzz.py NOT_FUZZED): its body is
    # checked here, before any delivery is looked up.
    merchant = operator.new_merchant()
    path = f"/v3/webhook-listeners/{uuid.uuid4()}/deliveries/{uuid.uuid4()}/answers"
    for body in (
        {"status_code": 99},
        {"status_code": "two hundred"},
        {"status_code": 200, "latency_ms": -1},
        {"error": "x" * 501},
        [200],
    ):
        answer = merchant.signed_post(path, body)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
    unknown = merchant.signed_post(path, {"status_code": 200})
    assert unknown.status_code == 404, unknown.text
