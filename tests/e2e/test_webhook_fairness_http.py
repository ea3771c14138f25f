"""Delivery fairness over HTTP (issue 36 point 4, docs/webhooks.md "Delivery fairness"): with
merchant A's receiver accepting connections and never answering, and hundreds of A's
webhooks pending, merchant B's webhook reaches B's receiver within two seconds of its event;
A's receiver never holds more than A's share of attempts, and A's attempts time out and are
scheduled again as the retry schedule says."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest

from support.api import MerchantClient, Operator
from support.databases import fetch_value, run
from support.receiver import HangingReceiver, WebhookReceiver
from support.server import RunningServer, own_server
from support.waiting import wait_for

pytestmark = pytest.mark.slow  # a server of its own, and A's attempts run to their 10 s timeout

SHARE = 4  # BANKRAIL_WEBHOOK_DESTINATION_CONCURRENCY of this server
A_EVENTS = 300
B_WITHIN = 2.0  # seconds from B's event to B's receiver


@pytest.fixture(scope="module")
def fair_server(pg_server: str) -> Iterator[RunningServer]:
    with own_server(pg_server, {"BANKRAIL_WEBHOOK_DESTINATION_CONCURRENCY": str(SHARE)}) as running:
        yield running


def _merchant(operator: Operator, payouts_uri: str) -> MerchantClient:
    merchant = operator.new_merchant(currencies=("GBP",))
    answer = operator.put(
        f"/admin/merchants/{merchant.merchant_id}/webhooks", {"payouts_uri": payouts_uri}
    )
    assert answer.status_code == 200, answer.text
    return merchant


def _value(server: RunningServer, query: str, *args: object) -> object:
    return run(fetch_value(server.env["DATABASE_URL"], query, *args))  # type: ignore[call-overload]


def _pending(server: RunningServer, merchant: MerchantClient) -> int:
    query = (
        "SELECT count(*) FROM webhook_deliveries WHERE merchant_id = $1::uuid"
        " AND status = 'pending'"
    )
    return int(_value(server, query, merchant.merchant_id))  # type: ignore[call-overload]


def test_a_hanging_receiver_does_not_delay_another_merchants_webhook(
    fair_server: RunningServer,
) -> None:
    operator = Operator(fair_server.base_url, fair_server.admin_token)
    hanging, healthy = HangingReceiver(), WebhookReceiver()
    try:
        a = _merchant(operator, hanging.url + "/hooks")
        b = _merchant(operator, healthy.url + "/hooks")
        with ThreadPoolExecutor(8) as pool:  # A's top-ups: each sends A a topup_received
            statuses = list(
                pool.map(
                    lambda n: operator.top_up(a.accounts["GBP"], 100 + n).status_code,
                    range(A_EVENTS),
                )
            )
        assert statuses == [201] * A_EVENTS
        wait_for(lambda: hanging.open_now >= SHARE, timeout=20, what="A's attempts in flight")
        assert _pending(fair_server, a) == A_EVENTS

        started = time.monotonic()
        assert operator.top_up(b.accounts["GBP"], 4_242).status_code == 201
        [request] = healthy.wait_for(lambda seen: len(seen) >= 1, timeout=20)
        late = time.monotonic() - started
        assert request.json()["event_body"]["amount_in_minor"] == 4_242
        assert late < B_WITHIN, f"B's webhook arrived {late:.1f} s after its event"
        # Meanwhile A's receiver held A's share of attempts, no more, and A's backlog waited.
        assert hanging.most_open <= SHARE, hanging.most_open
        assert _pending(fair_server, a) == A_EVENTS

        # A's attempts run to the 10 s timeout, are logged, and are scheduled again 1 s later
        # (the first retry); A's next deliveries take the freed slots.
        tried = wait_for(
            lambda: _tried(operator, a), timeout=30, what="A's first attempts", interval=0.5
        )
        [attempt] = tried["attempts"]
        assert attempt["status_code"] is None
        assert "timeout" in attempt["error"]
        failed_at = _time(attempt["at"]) + timedelta(milliseconds=attempt["latency_ms"])
        retry_in = _time(tried["next_attempt_at"]) - failed_at
        assert timedelta(seconds=1) <= retry_in < timedelta(seconds=2)
        wait_for(lambda: hanging.accepted > SHARE, timeout=20, what="A's next attempts")
        assert hanging.most_open <= SHARE, hanging.most_open
    finally:
        hanging.close()
        healthy.close()
        operator.close()


def _tried(operator: Operator, merchant: MerchantClient) -> dict[str, object] | None:
    """A delivery of the merchant with an attempt, in detail, or None."""
    answer = operator.get(
        "/admin/webhook-deliveries", merchant_id=merchant.merchant_id, status="pending", limit=500
    )
    assert answer.status_code == 200, answer.text
    for item in answer.json()["items"]:
        if item["attempt_count"] >= 1:
            detail = operator.get(f"/admin/webhook-deliveries/{item['id']}")
            assert detail.status_code == 200, detail.text
            found: dict[str, object] = detail.json()
            return found
    return None


def _time(text: object) -> datetime:
    assert isinstance(text, str), text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
