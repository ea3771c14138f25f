"""Prometheus metrics at `/metrics`: traffic per route from every process, state from the database.

Counters and histograms live in the process that observes them. When several processes serve
(`bankrail serve`: its API processes and its worker), `PROMETHEUS_MULTIPROC_DIR` names a
directory they share, and a scrape of any one of them reports the sum. Gauges of payouts,
payments and the webhook backlog are read from PostgreSQL at scrape time, so they are the
same whichever process answers. Every series carries the label `host` (`BANKRAIL_HOST_ID`),
so that the figures of several hosts scraped into one Prometheus stay apart.
"""

from __future__ import annotations

import asyncio
import os
import time
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

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

__all__ = ["FLUSH_SECONDS", "ROUTES", "flush", "observe", "observe_request"]


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
    at `started` (time.perf_counter). It reaches `prometheus_client` within
    `FLUSH_SECONDS`, and at once in the process answering a scrape (`flush`)."""
    elapsed = time.perf_counter() - started
    tally = _PENDING.get((method, route, status))
    if tally is None:
        tally = _PENDING[(method, route, status)] = [0, 0.0, [0] * len(_BOUNDS)]
    tally[0] += 1
    tally[1] += elapsed
    tally[2][bisect_left(_BOUNDS, elapsed)] += 1
    if not _FLUSHING:
        _schedule_flush()


# Requests counted in plain integers per (method, route template, status) and handed to
# prometheus_client in one go: a Counter's and a Histogram's every observation takes a
# lock (and, with several processes, writes a shared file), which was a tenth of a small
# request's CPU (docs/performance.md). Each tally: [requests, seconds in all, requests per
# latency bucket]. Bounded: methods are the HTTP parser's, routes are templates, statuses
# are ours.
_Tally = list[Any]
_PENDING: dict[tuple[str, str, int], _Tally] = {}
_BOUNDS: tuple[float, ...] = (*HTTP_LATENCY._upper_bounds,)  # the histogram's, +Inf last
FLUSH_SECONDS = 0.25
"""How long a request may be counted here before `prometheus_client` holds it (what
another process's scrape reports, through the shared directory, lags by at most this)."""
_FLUSHING: list[asyncio.TimerHandle] = []  # the timer that will flush, while one is due


def _schedule_flush() -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # counted outside an event loop: hand it over at once
        flush()
        return
    _FLUSHING.append(loop.call_later(FLUSH_SECONDS, _flush_from_timer))


def _flush_from_timer() -> None:
    _FLUSHING.clear()
    flush()


def flush() -> None:
    """Hand every request counted so far to `prometheus_client` (the series a scrape reads),
    exactly as if each had been observed there: the same counts, buckets and sums."""
    for handle in _FLUSHING:
        handle.cancel()
    _FLUSHING.clear()
    while _PENDING:
        (method, route, status), (count, seconds, buckets) = _PENDING.popitem()
        requests, latency, errors = _series(method, route, status)
        requests.inc(count)
        if errors is not None:
            errors.inc(count)
        # The histogram's own values (sum, and its non-cumulative buckets, as `observe`
        # updates them), incremented by many observations at once: prometheus_client has no
        # public call for that, and one `observe` per request is the cost this avoids.
        latency._sum.inc(seconds)
        for value, added in zip(latency._buckets, buckets, strict=True):
            if added:
                value.inc(added)


# The labelled series of each (method, route template, status) seen, looked up once.
_Series = tuple[Counter, Histogram, Counter | None]  # requests, latency, errors (or None)
_SERIES: dict[tuple[str, str, int], _Series] = {}


def _series(method: str, route: str, status: int) -> _Series:
    found = _SERIES.get((method, route, status))
    if found is None:
        failed = status == 0 or status >= 500
        found = _SERIES[(method, route, status)] = (
            HTTP_REQUESTS.labels(method, route, str(status)),
            HTTP_LATENCY.labels(method, route),
            HTTP_ERRORS.labels(method, route) if failed else None,
        )
    return found


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
    flush()
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
