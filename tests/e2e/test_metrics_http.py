"""Prometheus metrics at `/metrics` as a scraper reads them: requests, errors and latency per
route template (never per raw id), payouts and payments by status, webhook deliveries and
attempt outcomes, and the database pool; with `bankrail serve --workers 2` every API process
counts into one total, whichever process answers the scrape.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from e2e_helpers import wait_for
from pay_in_helpers import payment_body
from payout_helpers import (
    GB_IBAN,
    create_payout,
    external_beneficiary,
    funded_merchant,
    payout_body,
    wait_payout_status,
)
from test_production_mode_http import PRODUCTION, _log_documents

from support.api import Operator
from support.metrics import Scrape, scrape_metrics
from support.receiver import Answer, Received, WebhookReceiver
from support.server import RunningServer, own_server

PAYOUT_ROUTE = "/v3/payouts/{payout_id}"


# --- the session's sandbox server --------------------------------------------------------------


def test_requests_are_counted_by_route_template_with_latency(
    server: RunningServer, operator: Operator
) -> None:
    merchant = funded_merchant(operator, gbp=5_000)
    payout_id = create_payout(
        merchant, payout_body(merchant, "GBP", 1_000, external_beneficiary(GB_IBAN))
    )
    merchant.token()
    unknown_path = f"/no/such/route/{uuid.uuid4()}"
    before = scrape_metrics(server.base_url)

    reads = 3
    for _ in range(reads):
        assert merchant.get(f"/v3/payouts/{payout_id}").status_code == 200
    missing = str(uuid.uuid4())
    assert merchant.get(f"/v3/payouts/{missing}").status_code == 404
    assert httpx.get(server.base_url + unknown_path).status_code == 404
    after = scrape_metrics(server.base_url)

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    requests = "bankrail_http_requests_total"
    route = {"method": "GET", "route": PAYOUT_ROUTE}
    assert delta(requests, **route, status="200") == reads
    assert delta(requests, **route, status="404") == 1
    assert delta(requests, route="unmatched", status="404") == 1
    assert delta("bankrail_http_errors_total", **route) == 0
    # One series per template: no raw ids or paths become label values.
    for raw in (payout_id, missing, merchant.merchant_id, unknown_path):
        assert raw not in after.text

    latency = "bankrail_http_request_duration_seconds"
    assert delta(f"{latency}_count", **route) == reads + 1
    assert delta(f"{latency}_bucket", **route, le="+Inf") == reads + 1
    assert delta(f"{latency}_sum", **route) > 0
    buckets = sorted(
        (float(s.labels["le"]), s.value)
        for s in after.samples
        if s.name == f"{latency}_bucket" and s.labels["route"] == PAYOUT_ROUTE
    )
    assert len(buckets) >= 10
    counts = [count for _, count in buckets]
    assert counts == sorted(counts)  # cumulative
    assert counts[-1] == after.value(f"{latency}_count", **route)


def test_a_served_page_is_not_counted_as_unmatched(server: RunningServer) -> None:
    before = scrape_metrics(server.base_url)
    assert httpx.get(f"{server.base_url}/openapi.json", timeout=30).status_code == 200
    after = scrape_metrics(server.base_url)
    unmatched = "bankrail_http_requests_total"
    assert after.value(unmatched, route="unmatched") == before.value(unmatched, route="unmatched")


def _first_refused_then_ok(_request: Received, index: int) -> Answer:
    return Answer(500 if index == 0 else 200)


@pytest.fixture
def flaky_receiver(receiver: WebhookReceiver) -> WebhookReceiver:
    """The test's receiver, answering 500 to its first request and 200 after that."""
    receiver.behaviour = _first_refused_then_ok
    return receiver


def test_business_state_webhooks_and_the_pool_are_reported(
    server: RunningServer, operator: Operator, flaky_receiver: WebhookReceiver
) -> None:
    before = scrape_metrics(server.base_url)
    merchant = funded_merchant(operator, flaky_receiver, gbp=5_000)
    payout_id = create_payout(
        merchant, payout_body(merchant, "GBP", 1_000, external_beneficiary(GB_IBAN))
    )
    assert wait_payout_status(merchant, payout_id, {"executed", "failed"})["status"] == "executed"
    payment = merchant.signed_post("/v3/payments", payment_body(merchant))
    assert payment.status_code == 201, payment.text
    refused_event = flaky_receiver.wait_for(lambda got: len(got) >= 2)[0].json()["event_id"]
    # The refused delivery is retried a second later, and then succeeds.
    received = flaky_receiver.wait_for(
        lambda got: [r.json()["event_id"] for r in got].count(refused_event) >= 2
    )
    events = {r.json()["event_id"] for r in received}

    def grown(scrape: Scrape, name: str, by: int, **labels: str) -> bool:
        return scrape.value(name, **labels) - before.value(name, **labels) >= by

    def counted() -> Scrape | None:
        # Counted and recorded just after the receiver answers: poll for it.
        scrape = scrape_metrics(server.base_url)
        attempts = "bankrail_webhook_attempts_total"
        done = (
            grown(scrape, attempts, 1, outcome="http_error")
            and grown(scrape, attempts, len(events), outcome="delivered")
            and grown(scrape, "bankrail_webhook_deliveries", len(events), status="delivered")
        )
        return scrape if done else None

    # Webhooks: the receiver's 500 and its 200s are counted as attempt outcomes, and every
    # event is counted as delivered.
    after = wait_for(counted, what="the webhook attempts and deliveries to be counted")

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    # Payouts by stage and payments by status come from the database.
    assert delta("bankrail_payouts") == 1
    assert delta("bankrail_payouts", stage="executed") >= 1
    assert delta("bankrail_payments") == 1
    assert after.labels("bankrail_payments", "status")
    assert after.value("bankrail_webhook_backlog_oldest_seconds") >= 0
    # The answering process's database pool.
    pool = after.labels("bankrail_db_pool_connections", "state")
    assert set(pool) == {"open", "in_use", "idle", "max"}
    assert pool["open"] >= 1
    assert pool["in_use"] + pool["idle"] == pool["open"]
    assert pool["max"] >= pool["open"]


# --- several API processes -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_workers(pg_server: str) -> Iterator[RunningServer]:
    """`serve --workers 2` in production mode, whose access lines name the answering pid."""
    with own_server(
        pg_server, {**PRODUCTION, "BANKRAIL_HOST_ID": HOST_ID}, "--workers", "2"
    ) as running:
        yield running


HOST_ID = "metrics-host-7"


def test_every_series_and_log_line_names_the_host(two_workers: RunningServer) -> None:
    scrape = scrape_metrics(two_workers.base_url, two_workers.admin_token)
    assert scrape.samples
    assert {s.labels.get("host") for s in scrape.samples} == {HOST_ID}
    documents = _log_documents(two_workers)
    assert documents
    assert {d.get("host") for d in documents} == {HOST_ID}
    assert all(isinstance(d["pid"], int) for d in documents)


def _access_pids(server: RunningServer, path: str) -> dict[str, int]:
    """trace id -> pid of the access lines for `path`."""
    return {
        d["trace_id"]: d["pid"]
        for d in _log_documents(server)
        if d.get("logger") == "bankrail.access" and d.get("path") == path
    }


def _healthz(base_url: str) -> str:
    answer = httpx.get(f"{base_url}/healthz", timeout=30)  # a new connection each time
    assert answer.status_code == 200, answer.text
    return answer.headers["svc-trace-id"]


@pytest.mark.slow  # two_workers: a server of its own, with two API processes
def test_counts_from_every_api_process_are_summed(two_workers: RunningServer) -> None:
    sent: list[str] = []

    def served_by_both() -> set[int] | None:
        with ThreadPoolExecutor(max_workers=8) as pool:
            sent.extend(pool.map(lambda _: _healthz(two_workers.base_url), range(40)))
        pids = _access_pids(two_workers, "/healthz")
        answered = {pids[t] for t in sent if t in pids}
        return answered if len(answered) == 2 else None

    wait_for(served_by_both, timeout=60, what="both API processes to answer requests")
    wait_for(
        lambda: set(sent) <= set(_access_pids(two_workers, "/healthz")),
        what="every request's access line",
    )
    per_process = collections.Counter(_access_pids(two_workers, "/healthz")[t] for t in sent)
    assert len(per_process) == 2, per_process

    scraped_by: dict[int, Scrape] = {}
    route = {"method": "GET", "route": "/healthz"}

    def scrapes_from_both() -> bool:
        scrape = scrape_metrics(two_workers.base_url, two_workers.admin_token)
        pid = wait_for(
            lambda: _access_pids(two_workers, "/metrics").get(
                scrape.answer.headers["svc-trace-id"]
            ),
            what="the scrape's access line",
        )
        # Each process hands its counts to the shared directory within FLUSH_SECONDS: a
        # scrape shows the other's latest requests once that has passed.
        if scrape.value("bankrail_http_requests_total", **route, status="200") == len(
            _access_pids(two_workers, "/healthz")
        ):
            scraped_by[pid] = scrape
        return len(scraped_by) == 2

    wait_for(scrapes_from_both, timeout=60, what="a scrape answered by each process, in full")
    # Every /healthz answered, by either process: the test's, and the one `serve` sends
    # itself before it says it is ready.
    answered = _access_pids(two_workers, "/healthz")
    assert len(answered) - len(sent) <= 1, (len(answered), len(sent))
    for pid, scrape in scraped_by.items():
        total = scrape.value("bankrail_http_requests_total", **route, status="200")
        assert total == len(answered), (pid, total, len(answered), per_process)
        latency = scrape.value("bankrail_http_request_duration_seconds_count", **route)
        assert latency == len(answered), (pid, latency)


# Every family a scrape declares, observed or not (no 5xx answered leaves the error counter
# without samples, but declared).
FAMILIES = (
    "bankrail_http_requests_total",
    "bankrail_http_request_duration_seconds",
    "bankrail_http_errors_total",
    "bankrail_webhook_attempts_total",
    "bankrail_payouts",
    "bankrail_payments",
    "bankrail_webhook_deliveries",
    "bankrail_webhook_backlog_oldest_seconds",
    "bankrail_db_pool_connections",
)


@pytest.mark.slow  # two_workers: a server of its own, with two API processes
def test_each_metric_family_is_described_once(two_workers: RunningServer) -> None:
    scrape = scrape_metrics(two_workers.base_url, two_workers.admin_token)
    declared = [line.split()[2] for line in scrape.text.splitlines() if line.startswith("# TYPE")]
    repeated = sorted(n for n, c in collections.Counter(declared).items() if c > 1)
    assert repeated == []
    assert not [s for s in scrape.samples if "pid" in s.labels]
    assert [family for family in FAMILIES if family not in declared] == []


def test_each_metric_family_is_described_once_with_one_process(server: RunningServer) -> None:
    scrape = scrape_metrics(server.base_url)
    declared = [line.split()[2] for line in scrape.text.splitlines() if line.startswith("# TYPE")]
    assert len(declared) == len(set(declared)), declared
    assert [family for family in FAMILIES if family not in declared] == []


@pytest.mark.slow  # two_workers: a server of its own, with two API processes
def test_every_api_process_links_to_the_host_and_port_serve_was_given(
    two_workers: RunningServer,
) -> None:
    """`--host` and `--port` reach the API processes of `serve --workers N`: the links they
    hand out (here a problem's type) name the address the service answers on."""
    types = set()

    def answered_by_both() -> bool:
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(
                pool.map(
                    lambda _: httpx.get(f"{two_workers.base_url}/v3/payouts/x", timeout=30),
                    range(20),
                )
            )
        for answer in answers:
            assert answer.status_code == 401, answer.text
            types.add(answer.json()["type"])
        pids = _access_pids(two_workers, "/v3/payouts/x")
        return len(set(pids.values())) == 2

    wait_for(answered_by_both, timeout=60, what="both API processes to answer")
    assert types == {f"{two_workers.base_url}/errors#unauthenticated"}
