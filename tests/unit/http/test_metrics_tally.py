"""Requests counted in plain integers (http/metrics.py) reach prometheus_client exactly as if
each had been observed there one at a time."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from bankrail.core.metrics import HTTP_ERRORS, HTTP_LATENCY, HTTP_REQUESTS
from bankrail.http import metrics

# Latencies that land in several buckets (clear of their bounds: each is measured a hair
# longer here), two in one, and past the last bound.
DURATIONS = (0.0001, 0.0015, 0.003, 0.04, 0.04, 0.7, 12.0)


def _twin_registry() -> tuple[CollectorRegistry, Counter, Histogram, Counter]:
    registry = CollectorRegistry()
    requests = Counter(
        "twin_http_requests", "requests", ["method", "route", "status"], registry=registry
    )
    latency = Histogram(
        "twin_http_request_duration_seconds",
        "latency",
        ["method", "route"],
        buckets=HTTP_LATENCY._upper_bounds,
        registry=registry,
    )
    errors = Counter("twin_http_errors", "errors", ["method", "route"], registry=registry)
    return registry, requests, latency, errors


def _samples(text: bytes, prefix: str, route: str) -> list[str]:
    """The sample lines of `route`, their metric names without `prefix`, `_created` left out
    (it is when each series was made)."""
    lines = text.decode().splitlines()
    return sorted(
        line.removeprefix(prefix)
        for line in lines
        if line.startswith(prefix) and f'route="{route}"' in line and "_created" not in line
    )


def test_a_flush_gives_the_counts_buckets_and_sums_of_one_observation_each() -> None:
    route = "/unit/tally/{id}"
    registry, requests, latency, errors = _twin_registry()
    for status in (200, 503):
        for duration in DURATIONS:
            metrics.observe_request("GET", route, status, time.perf_counter() - duration)
            # The same observation, straight to a Counter and a Histogram of the same shape.
            requests.labels("GET", route, str(status)).inc()
            latency.labels("GET", route).observe(duration)
            if status >= 500:
                errors.labels("GET", route).inc()
    metrics.flush()

    ours = generate_latest()
    twin = generate_latest(registry)
    mine_all, twin_all = _samples(ours, "bankrail_", route), _samples(twin, "twin_", route)
    assert mine_all
    assert len(mine_all) == len(twin_all)
    for mine, theirs in zip(mine_all, twin_all, strict=True):
        name, _, value = mine.rpartition(" ")
        twin_name, _, twin_value = theirs.rpartition(" ")
        assert name == twin_name
        # The sum is of the durations measured here, a hair longer than those given.
        if "_sum" in name:
            assert float(twin_value) <= float(value) < float(twin_value) + 0.01
        else:
            assert value == twin_value
    assert HTTP_REQUESTS.labels("GET", route, "200")._value.get() == len(DURATIONS)
    assert HTTP_ERRORS.labels("GET", route)._value.get() == len(DURATIONS)


def test_counts_reach_prometheus_client_within_the_flush_period_unscraped() -> None:
    route = "/unit/tally/timer"

    async def count_one() -> None:
        metrics.observe_request("GET", route, 200, time.perf_counter())
        series = HTTP_REQUESTS.labels("GET", route, "200")
        assert series._value.get() == 0  # counted here, not handed over yet
        deadline = time.monotonic() + 10
        while series._value.get() != 1:
            assert time.monotonic() < deadline, "never handed over"
            await asyncio.sleep(metrics.FLUSH_SECONDS / 10)

    asyncio.run(count_one())
