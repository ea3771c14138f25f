"""Prometheus metrics at `/metrics`: traffic per route from every process, state from the database.

Counters and histograms live in the process that observes them. When several processes serve
(`bankrail serve`: its API processes and its worker), `PROMETHEUS_MULTIPROC_DIR` names a
directory they share, and a scrape of any one of them reports the sum. Gauges of payouts,
payments and the webhook backlog are read from PostgreSQL at scrape time, so they are the
same whichever process answers. Every series carries the label `host` (`BANKRAIL_HOST_ID`),
so that the figures of several hosts scraped into one Prometheus stay apart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from bankrail.core.metrics import HTTP_ERRORS, HTTP_LATENCY, HTTP_REQUESTS, WEBHOOK_ATTEMPTS
from bankrail.http.auth import require_operator
from bankrail.http.deps import AppContext
from bankrail.http.openapi import Needs
from bankrail.http.pipeline import Authenticator, Call, Endpoint, routes

__all__ = ["ROUTES", "observe", "observe_request"]


# Served by a plain Starlette route, which FastAPI's router does not record in the scope.
_DOCUMENTATION_PATHS = frozenset({"/openapi.json"})


def _route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    raw = scope.get("path", "")
    if raw in _DOCUMENTATION_PATHS:
        return str(raw)
    if str(raw).startswith("/static/"):
        return "/static/{path}"
    # Unmatched paths are grouped so that scanners cannot blow up the label set.
    return "unmatched"


def observe(scope: Scope, status: int, began: float) -> None:
    """Count an HTTP request answered with `status` (0: none), begun at `began`
    (time.perf_counter), under its route's template (ServiceMiddleware calls it for every
    request it answered or saw answered)."""
    observe_request(scope["method"], _route_template(scope), status, began)


def observe_request(method: str, route: str, status: int, started: float) -> None:
    """Count a request to `route` (its template) answered with `status` (0: none), begun
    at `started` (time.perf_counter)."""
    key = (method, route, status)
    children = _REQUEST_CHILDREN.get(key)
    if children is None:
        children = _REQUEST_CHILDREN[key] = _request_children(method, route, status)
    count, latency, errors = children
    count.inc()
    latency.observe(time.perf_counter() - started)
    if errors is not None:
        errors.inc()


# The labelled series of each (method, route template, status) seen, looked up once: a
# `labels()` call checks, joins and locks every time, on every request. Bounded: methods are
# the HTTP parser's, routes are templates, statuses are ours.
_Series = tuple[Counter, Histogram, Counter | None]  # requests, latency, errors (or None)
_REQUEST_CHILDREN: dict[tuple[str, str, int], _Series] = {}


def _request_children(method: str, route: str, status: int) -> _Series:
    failed = status == 0 or status >= 500
    return (
        HTTP_REQUESTS.labels(method, route, str(status)),
        HTTP_LATENCY.labels(method, route),
        HTTP_ERRORS.labels(method, route) if failed else None,
    )


class _Snapshot(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


class _OnHost(Collector):
    """Every series of `inner`, with the label `host` added."""

    def __init__(self, inner: Collector, host: str) -> None:
        self._inner = inner
        self._host = host

    def collect(self) -> Iterable[Metric]:
        for family in self._inner.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            labelled.samples = [
                sample._replace(labels={**sample.labels, "host": self._host})
                for sample in family.samples
            ]
            yield labelled


class _MultiProcess(Collector):
    """The sum over every process's files, and every family this process declares even
    when no process has observed it yet (a multiprocess scrape alone reports only what was
    observed: no 5xx answered would leave `bankrail_http_errors` undeclared)."""

    def __init__(self, directory: str) -> None:
        self._summed = MultiProcessCollector(None, path=directory)  # type: ignore[no-untyped-call]

    def collect(self) -> Iterable[Metric]:
        summed: list[Metric] = list(self._summed.collect())  # type: ignore[no-untyped-call]
        yield from summed
        seen = {family.name for family in summed}
        for declared in (HTTP_REQUESTS, HTTP_LATENCY, HTTP_ERRORS, WEBHOOK_ATTEMPTS):
            for family in declared.describe():
                if family.name not in seen:
                    yield family


def _process_metrics(host: str) -> bytes:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    registry = CollectorRegistry()
    registry.register(_OnHost(_MultiProcess(directory) if directory else REGISTRY, host))
    return generate_latest(registry)


async def _operator_in_production(request: Request, context: AppContext) -> None:
    """The operator token, required in production mode only."""
    if not context.settings.sandbox:
        await require_operator(request, context)


async def metrics(call: Call[None, None]) -> Response:
    """Request rates, latencies and errors per route; webhook outcomes and backlog; payouts
    and payments by status; database pool use. Text exposition format. In production mode
    the operator token is required."""
    context = call.context
    payouts = GaugeMetricFamily("bankrail_payouts", "Payouts by stage.", labels=["stage"])
    payments = GaugeMetricFamily("bankrail_payments", "Payments by status.", labels=["status"])
    deliveries = GaugeMetricFamily(
        "bankrail_webhook_deliveries",
        "Webhook deliveries by status (pending is the backlog).",
        labels=["status"],
    )
    pool_use = GaugeMetricFamily(
        "bankrail_db_pool_connections",
        "Connections of the answering process's database pool, by state.",
        labels=["state"],
    )
    pool = context.pool
    idle = pool.get_idle_size()
    pool_use.add_metric(["open"], pool.get_size())
    pool_use.add_metric(["in_use"], pool.get_size() - idle)
    pool_use.add_metric(["idle"], idle)
    pool_use.add_metric(["max"], pool.get_max_size())
    now = context.clock.now()
    async with pool.acquire() as conn:
        for row in await conn.fetch("SELECT stage, count(*) AS n FROM payouts GROUP BY stage"):
            payouts.add_metric([row["stage"]], row["n"])
        for row in await conn.fetch("SELECT status, count(*) AS n FROM payments GROUP BY status"):
            payments.add_metric([row["status"]], row["n"])
        for row in await conn.fetch(
            "SELECT status, count(*) AS n FROM webhook_deliveries GROUP BY status"
        ):
            deliveries.add_metric([row["status"]], row["n"])
        due_since = await conn.fetchval(
            "SELECT min(next_attempt_at) FROM webhook_deliveries"
            " WHERE status = 'pending' AND next_attempt_at <= $1",
            now,
        )
    oldest = GaugeMetricFamily(
        "bankrail_webhook_backlog_oldest_seconds",
        "Age in seconds of the oldest pending webhook delivery that is due (0 if none).",
        value=max(0.0, (now - due_since).total_seconds()) if due_since else 0.0,
    )
    # Families built for this scrape only: in multiprocess mode a Gauge would also be
    # written to the shared directory and come back a second time, with a pid label.
    registry = CollectorRegistry()
    host = context.settings.host_id
    registry.register(_OnHost(_Snapshot([payouts, payments, deliveries, oldest, pool_use]), host))
    body = _process_metrics(host) + generate_latest(registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


ROUTES = routes(
    Endpoint(
        "GET",
        "/metrics",
        metrics,
        # The operator token: in production.
        Authenticator(_operator_in_production, Needs(schemes=("operatorToken",), anonymous=True)),
        summary="Prometheus metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
        tags=["operations"],
    ),
)
"""The Prometheus scrape."""
