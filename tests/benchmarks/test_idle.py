"""`bench.measure.idle`: a measurement starts once the server's request log has written what
it buffered, so that no loop pays for an earlier loop's entries, and both settings of the
log pause alike."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import asyncpg
import pytest
from bench.loadgen import http_request, run_load
from bench.measure import QUIET_SECONDS, idle
from bench.service import Server, seed

GETS = 1_500
RATE = 1_000.0
"""The GETs are offered for 1.5 s, several of the log's quiet intervals."""


@pytest.fixture(scope="module", params=["on", "off"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    retention = {"on": "604800", "off": "0"}[request.param]
    started = Server(1, env={"BANKRAIL_REQUEST_LOG_RETENTION_SECONDS": retention})
    started.start()
    try:
        yield started
    finally:
        started.stop()


async def _entries(server: Server) -> int:
    conn = await asyncpg.connect(server.dsn())
    try:
        count: int = await conn.fetchval("SELECT count(*) FROM request_log")
    finally:
        await conn.close()
    return count


async def test_idle_waits_while_entries_arrive_and_until_the_last_is_written(
    server: Server,
) -> None:
    merchant = seed(server, balance=1)
    await idle(server)  # the seeding's own requests
    before = await _entries(server)
    host = f"127.0.0.1:{server.port}"
    auth = {"Authorization": f"Bearer {merchant.token}"}
    gets = [http_request("GET", f"/v3/payouts/{uuid.uuid4()}", host, auth)] * GETS
    began = time.monotonic()
    load = asyncio.create_task(run_load("127.0.0.1", server.port, gets, concurrency=8, rate=RATE))
    await idle(server)
    waited = time.monotonic() - began
    result = await load
    assert result.requests == GETS
    logged = server.env["BANKRAIL_REQUEST_LOG_RETENTION_SECONDS"] != "0"
    if logged:
        # It waited out the load (a fixed pause would have returned in its midst), and not
        # one entry is written after it returns: the next loop pays for none of these.
        assert waited >= GETS / RATE
        assert await _entries(server) - before == GETS
    else:
        # With the log off nothing arrives: one quiet interval, the same pause as the log
        # on would take after a loop of its own.
        assert QUIET_SECONDS <= waited < GETS / RATE
        assert await _entries(server) == before
