"""The process's Prometheus counters and histograms (exposed by `bankrail.http.metrics`)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

__all__ = [
    "HTTP_ERRORS",
    "HTTP_LATENCY",
    "HTTP_REQUESTS",
    "REQUEST_LOG_DROPPED",
    "REQUEST_LOG_WRITTEN",
    "WEBHOOK_ATTEMPTS",
    "record_webhook_attempt",
]

HTTP_REQUESTS = Counter(
    "bankrail_http_requests",
    "HTTP requests answered, by route template, method and status code.",
    ["method", "route", "status"],
)
HTTP_LATENCY = Histogram(
    "bankrail_http_request_duration_seconds",
    "Time from the request's arrival to the end of its answer, by route template.",
    ["method", "route"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
HTTP_ERRORS = Counter(
    "bankrail_http_errors",
    "HTTP answers with a 5xx status, or none at all, by route template.",
    ["method", "route"],
)
REQUEST_LOG_WRITTEN = Counter(
    "bankrail_request_log_entries_written",
    "Request-log entries written to the database (http/request_log.py).",
)
REQUEST_LOG_DROPPED = Counter(
    "bankrail_request_log_entries_dropped",
    "Request-log entries not kept, by reason: full (the buffer was full: the request was not"
    " made to wait) or error (their batch's write failed, or the capture could not copy a"
    " value of a type no ASGI server gives).",
    ["reason"],
)
WEBHOOK_ATTEMPTS = Counter(
    "bankrail_webhook_attempts",
    "Webhook delivery attempts by outcome: delivered (2xx), http_error, network_error.",
    ["outcome"],
)


def record_webhook_attempt(status_code: int | None) -> None:
    """Count one webhook delivery attempt that got `status_code` (None: no HTTP answer)."""
    if status_code is None:
        outcome = "network_error"
    elif 200 <= status_code < 300:
        outcome = "delivered"
    else:
        outcome = "http_error"
    WEBHOOK_ATTEMPTS.labels(outcome).inc()
