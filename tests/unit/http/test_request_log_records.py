"""The request log's hand-over (http/request_log.py, http/request_log_writer.py): what the
capture copies of a request is what the writer reads back, values, types and service time
included."""

from __future__ import annotations

import asyncio
import marshal
import uuid
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bankrail.core.clock import ServiceClock
from bankrail.http.request_log import CLAIMS, RequestLog, WriterSettings
from bankrail.http.request_log_writer import Entry, _entry_of, record
from bankrail.http.responses import ReplayedResponse
from bankrail.security.tokens import AccessClaims

MERCHANT = uuid.uuid4()
HEADERS = [(b"authorization", b"Bearer secret"), (b"idempotency-key", b"k-1")]


def _read(one: bytes) -> Entry:
    return _entry_of(marshal.loads(one))  # noqa: S302 - made by this test


def _entry(**changes: Any) -> Entry:
    values: dict[str, Any] = {
        "merchant_id": MERCHANT.bytes,
        "client_id": "client",
        "created_at": datetime(2026, 11, 29, 1, 2, 3, 456789, tzinfo=UTC),
        "method": "POST",
        "path": "/v3/payouts",
        "status": 202,
        "duration_ms": 1.25,
        "replayed": False,
        "request_headers": HEADERS,
        "request_body": b'{"amount_in_minor": 1}',
        "response_headers": [(b"content-type", b"application/json")],
        "response_body": b'{"id": "p-1"}',
    }
    return Entry(**{**values, **changes})


def test_an_entry_is_read_back_as_it_was_recorded() -> None:
    for entry in (
        _entry(),
        _entry(request_body=300_000, response_body=None, replayed=True),  # sizes, no answer
        _entry(created_at=datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    ):
        read = _read(record(entry))
        assert read == entry
        assert read.created_at.tzinfo is not None


def _request() -> Request:
    claims = AccessClaims(
        client_id="client",
        merchant_id=MERCHANT,
        scopes=frozenset({"payments"}),
        audiences=frozenset({"payments"}),
        expires_at=datetime.now(UTC) + timedelta(hours=1),
    )
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v3/payouts",
        "headers": HEADERS,
        CLAIMS: claims,
    }
    request = Request(scope)  # type: ignore[arg-type]
    request._body = b'{"amount_in_minor": 1}'  # as the route read it
    return request


def test_the_capture_hands_over_what_the_request_saw_at_the_service_time() -> None:
    clock = ServiceClock(timedelta(days=3, microseconds=7))  # a sandbox clock moved on
    journal = RequestLog(WriterSettings("postgresql://unused"), clock)

    async def replayed(_request: Request) -> Response:
        # A status given as HTTPStatus (an int subclass marshal would refuse) is kept as 202.
        return ReplayedResponse(
            b'{"id": "p-1"}', status_code=HTTPStatus.ACCEPTED, media_type="application/json"
        )

    before = clock.now()
    answer = asyncio.run(journal.record(_request(), replayed))
    after = clock.now()
    assert answer.status_code == 202
    (one,) = journal._buffer
    read = _read(one)
    assert before <= read.created_at <= after
    assert type(read.status) is int
    assert read._replace(created_at=before, duration_ms=0.0) == Entry(
        MERCHANT.bytes,
        "client",
        before,
        "POST",
        "/v3/payouts",
        202,
        0.0,
        True,
        HEADERS,
        b'{"amount_in_minor": 1}',
        answer.raw_headers,
        b'{"id": "p-1"}',
    )
