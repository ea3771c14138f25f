"""The request log's writer process (http/request_log_writer.py) in a real `bankrail serve`:
it runs beside the API process, one that dies is replaced without losing the entries captured
after it died, and a stop signalled to the whole process group (Ctrl-C, a service manager's
stop) still writes every entry the API had captured before the process exits."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import asyncpg

from support.api import MerchantClient, operator_of
from support.databases import run
from support.server import own_server
from support.waiting import wait_for

WRITER = b"bankrail.http.request_log_writer"
PATH = "/v3/merchant-accounts"


def _tree(root: int) -> set[int]:
    """`root` and every process under it."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    tree, grew = {root}, True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return tree


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _writers(root: int) -> list[int]:
    """The request-log writers running under the server `root`."""
    found = []
    for pid in _tree(root):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if WRITER in command and _alive(pid):
            found.append(pid)
    return found


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
            [writer] = _writers(root)
            assert writer != root

            # A writer that dies is replaced; what was captured after it died is written.
            os.kill(writer, signal.SIGKILL)
            wait_for(lambda: not _alive(writer), what="the writer's death")
            _read(merchant, 4)
            assert wait_for(lambda: run(_logged(dsn, merchant.merchant_id)) == 7, what="7")
            [replacement] = wait_for(lambda: _writers(root), what="a new writer")
            assert replacement != writer

            # Every process of the group is told to stop, as Ctrl-C or a service manager
            # does; the writer outlives the signal and writes what the API hands it last.
            _read(merchant, 50)
            os.killpg(root, signal.SIGTERM)
            assert running.stop() == 0
        assert run(_logged(dsn, merchant.merchant_id)) == 57
        assert not _alive(replacement)
