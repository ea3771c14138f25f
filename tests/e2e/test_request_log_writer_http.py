"""The request log's writer process (http/request_log_writer.py) in a real `bankrail serve`:
it runs beside the API process at the lowest CPU priority, one that dies is replaced without
losing the entries captured after it died, and a stop signalled to the whole process group
(Ctrl-C, a service manager's stop) still writes every entry the API had captured before the
process exits."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import asyncpg
from bench.processes import server_processes

from bankrail.http.request_log_writer import NICENESS
from support.api import MerchantClient, operator_of
from support.databases import run
from support.server import RunningServer, own_server
from support.waiting import wait_for

PATH = "/v3/merchant-accounts"


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _writers(running: RunningServer) -> list[int]:
    """The request-log writers running under the server."""
    assert running.process is not None
    groups = server_processes(running.process.pid, running.data_dir)
    return [pid for pid, group in groups.items() if group == "request_log" and _alive(pid)]


async def _logged(dsn: str, merchant_id: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM request_log WHERE merchant_id = $1::uuid AND path = $2",
                merchant_id,
                PATH,
            )
        )
    finally:
        await conn.close()


def _read(merchant: MerchantClient, times: int) -> None:
    for _ in range(times):
        assert merchant.get(PATH).status_code == 200


def test_the_writer_runs_at_the_lowest_priority_and_the_api_at_its_own(pg_server: str) -> None:
    """On a machine whose cores are busy, the requests' processes run before the writer, whose
    work holds no request up (docs/performance.md, "The writer's priority")."""
    with own_server(pg_server, {}) as running:
        assert running.process is not None
        with operator_of(running) as operator:
            merchant = operator.new_merchant()
            _read(merchant, 1)
            # Written: the writer has started, and set its priority before it took the batch.
            dsn = running.env["DATABASE_URL"]
            assert wait_for(lambda: run(_logged(dsn, merchant.merchant_id)) == 1, what="1")
            [writer] = _writers(running)
            assert NICENESS == 19
            assert os.getpriority(os.PRIO_PROCESS, writer) == NICENESS
            # The serving process keeps the priority it was started with (this test's).
            own = os.getpriority(os.PRIO_PROCESS, 0)
            assert os.getpriority(os.PRIO_PROCESS, running.process.pid) == own < NICENESS


def test_the_writer_is_replaced_when_it_dies_and_a_stop_of_the_group_writes_everything(
    pg_server: str,
) -> None:
    with own_server(pg_server, {}) as running:
        assert running.process is not None
        root, dsn = running.process.pid, running.env["DATABASE_URL"]
        with operator_of(running) as operator:
            merchant = operator.new_merchant()
            _read(merchant, 3)
            assert wait_for(lambda: run(_logged(dsn, merchant.merchant_id)) == 3, what="3")
            [writer] = _writers(running)
            assert writer != root

            # A writer that dies is replaced; what was captured after it died is written.
            os.kill(writer, signal.SIGKILL)
            wait_for(lambda: not _alive(writer), what="the writer's death")
            _read(merchant, 4)
            assert wait_for(lambda: run(_logged(dsn, merchant.merchant_id)) == 7, what="7")
            [replacement] = wait_for(lambda: _writers(running), what="a new writer")
            assert replacement != writer

            # Every process of the group is told to stop, as Ctrl-C or a service manager
            # does: what the API captured is written before it exits (that the writer itself
            # ignores the signal: tests/integration/http/test_request_log_db.py).
            _read(merchant, 50)
            os.killpg(root, signal.SIGTERM)
            assert running.stop() == 0
        assert run(_logged(dsn, merchant.merchant_id)) == 57
        assert not _alive(replacement)
