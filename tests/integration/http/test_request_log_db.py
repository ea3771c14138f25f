"""The request log's writer and retention (http/request_log.py, jobs/pruning.py) on the
suite's PostgreSQL: entries are written in batches off the request, a full buffer drops and
counts instead of waiting, closing writes what is buffered, and the pruning job deletes what
is older than the retention on the service clock."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from prometheus_client import REGISTRY
from starlette.requests import Request
from starlette.responses import Response

from bankrail.config import Settings
from bankrail.core.clock import ServiceClock
from bankrail.http.request_log import CLAIMS, RequestLog
from bankrail.jobs.pruning import Pruner
from bankrail.security.tokens import AccessClaims
from bankrail.worker import retentions

pytestmark = pytest.mark.asyncio(loop_scope="session")

MERCHANT = uuid.uuid4()
CLAIMED = AccessClaims(
    client_id="sandbox-client",
    merchant_id=MERCHANT,
    scopes=frozenset({"payments"}),
    audiences=frozenset({"payments"}),
    expires_at=ServiceClock().now() + timedelta(hours=1),
)


def _request(path: str, body: bytes = b"") -> Request:
    sent = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return sent.pop() if sent else {"type": "http.disconnect"}

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [
            (b"authorization", b"Bearer secret-token"),
            (b"content-type", b"application/json"),
        ],
        "server": ("test", 80),
        CLAIMS: CLAIMED,
    }
    return Request(scope, receive)  # type: ignore[arg-type]


async def _answer(request: Request) -> Response:
    await request.body()  # as the pipeline reads it: the log keeps the body the route read
    return Response(b'{"id": "p-1"}', status_code=201, media_type="application/json")


def _dropped() -> float:
    return (
        REGISTRY.get_sample_value("bankrail_request_log_entries_dropped_total", {"reason": "full"})
        or 0.0
    )


async def _rows(pool: asyncpg.Pool) -> list[Any]:
    return await pool.fetch(
        "SELECT * FROM request_log WHERE merchant_id = $1 ORDER BY created_at", MERCHANT
    )


async def test_a_full_buffer_drops_and_counts_and_close_writes_the_rest(
    pool: asyncpg.Pool,
) -> None:
    journal = RequestLog(pool, ServiceClock(), capacity=2, batch=10, interval=60)
    before = _dropped()
    for n in range(3):
        answer = await journal.record(_request(f"/v3/payments/{n}", b'{"a": 1}'), _answer)
        assert answer.status_code == 201
    assert _dropped() == before + 1
    assert await _rows(pool) == []  # nothing written on the request's way

    journal.start()
    await journal.close()

    rows = await _rows(pool)
    assert [row["path"] for row in rows] == ["/v3/payments/0", "/v3/payments/1"]
    assert rows[0]["request"] == {
        "headers": {"authorization": "[redacted]", "content-type": "application/json"},
        "body": {"a": 1},
    }
    assert rows[0]["object_ids"] == ["p-1"]
    assert rows[0]["status"] == 201


async def test_the_pruning_job_deletes_entries_past_the_retention_in_service_time(
    pool: asyncpg.Pool,
) -> None:
    clock = ServiceClock()
    journal = RequestLog(pool, clock)
    await journal.record(_request("/v3/payouts/old"), _answer)
    await journal.flush()
    clock.set_offset(timedelta(days=6))
    await journal.record(_request("/v3/payouts/recent"), _answer)
    await journal.flush()

    settings = Settings()
    assert settings.request_log_retention == 7 * 86400
    pruner = Pruner(pool, clock, retentions(settings), interval=0)
    clock.set_offset(timedelta(days=7, seconds=1))
    await pruner.run()
    assert [row["path"] for row in await _rows(pool)] == ["/v3/payouts/recent"]
    clock.set_offset(timedelta(days=13, seconds=1))
    await pruner.run()
    assert await _rows(pool) == []


async def test_a_body_postgresql_cannot_hold_as_json_is_kept_as_text(pool: asyncpg.Pool) -> None:
    journal = RequestLog(pool, ServiceClock())
    await journal.record(_request("/v3/payouts/nul", b'{"reference": "a\\u0000b"}'), _answer)
    await journal.record(_request("/v3/payouts/text", b"not json"), _answer)
    assert await journal.flush() == 2
    rows = {row["path"]: row for row in await _rows(pool)}
    assert rows["/v3/payouts/nul"]["request"]["body"] == '{"reference": "a\\u0000b"}'
    assert rows["/v3/payouts/text"]["request"]["body"] == "not json"
