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
COPYING = (
    "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    " AND query ILIKE 'copy%request_log%')"
)


@pytest.fixture(scope="module", params=["on", "off"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    retention = {"on": "604800", "off": "0"}[request.param]
    started = Server(1, env={"BANKRAIL_REQUEST_LOG_RETENTION_SECONDS": retention})
    started.start()
    try:
        yield started
    finally:
        started.stop()


async def _entries(conn: asyncpg.Connection) -> int:
    count: int = await conn.fetchval("SELECT count(*) FROM request_log")
    return count


async def test_idle_waits_until_the_last_entry_is_written(server: Server) -> None:
    merchant = seed(server, balance=1)
    host = f"127.0.0.1:{server.port}"
    auth = {"Authorization": f"Bearer {merchant.token}"}
    gets = [http_request("GET", f"/v3/payouts/{uuid.uuid4()}", host, auth)] * GETS
    # One logged request first: the log's writer process starts with the first entry, as
    # it has long before any loop of a benchmark.
    await run_load("127.0.0.1", server.port, gets[:1], concurrency=1)
    await idle(server)
    logged = server.env["BANKRAIL_REQUEST_LOG_RETENTION_SECONDS"] != "0"
    conn = await asyncpg.connect(server.dsn())
    blocker = await asyncpg.connect(server.dsn())
    try:
        before = await _entries(conn)
        # The log's COPY waits behind this lock while the loop is answered: its newest entry
        # stands still, as it does while a slow batch (or another process's) is copied.
        holding = blocker.transaction()
        await holding.start()
        await blocker.execute("LOCK TABLE request_log IN SHARE MODE")
        result = await run_load("127.0.0.1", server.port, gets, concurrency=8)
        assert result.requests == GETS
        began = time.monotonic()
        waiting = asyncio.create_task(idle(server))
        if logged:
            deadline = time.monotonic() + 30
            while not await conn.fetchval(COPYING):
                assert time.monotonic() < deadline, "the log's COPY never started"
                await asyncio.sleep(0.01)
            # Three quiet intervals with nothing new written: still it waits.
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiting), 3 * QUIET_SECONDS)
        await holding.rollback()
        await waiting
        # Not one entry is written after it returns: the next loop pays for none of these.
        assert await _entries(conn) - before == (GETS if logged else 0)
        # With the log off nothing arrives: one quiet interval, the same pause as the log
        # on takes after a loop of its own.
        assert time.monotonic() - began >= QUIET_SECONDS
    finally:
        await blocker.close()
        await conn.close()
