"""SIGHUP (a closed terminal), SIGINT (Ctrl-C) and SIGTERM each stop everything a real
`bankrail serve` started: its API processes, worker and verifiers, then the embedded
PostgreSQL, leaving no process of the data directory or of its session and no run directory
behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest
from e2e_helpers import private_data_dir, processes_mentioning, wait_for

from support.processes import session_commands
from support.server import RunningServer, free_port

pytestmark = pytest.mark.slow  # starts and stops `bankrail serve` processes of its own


def _worker_runs(server: RunningServer) -> bool:
    ready = httpx.get(f"{server.base_url}/readyz", timeout=5).json()
    return bool(ready["checks"].get("workers") == "ok")


@pytest.mark.parametrize(
    ("sig", "whole_group", "workers"),
    [
        # A closed terminal (or `tmux kill-session`) hangs up the whole foreground group.
        (signal.SIGHUP, True, "1"),
        # uvicorn's supervisor of several API processes would take it as "restart them".
        (signal.SIGHUP, True, "2"),
        (signal.SIGINT, True, "1"),  # Ctrl-C, also to the whole group
        (signal.SIGTERM, False, "2"),  # `kill <pid>`, to serve alone
    ],
    ids=["SIGHUP", "SIGHUP-2-workers", "SIGINT", "SIGTERM-2-workers"],
)
def test_a_signal_stops_everything_serve_started(
    sig: signal.Signals, whole_group: bool, workers: str
) -> None:
    with private_data_dir("bankrail-e2e-signals-") as data_dir:
        # serve keeps its run directory (metrics, worker state) under TMPDIR: here, one of
        # the test's own, so that what it leaves behind can be seen.
        run_parent = data_dir.parent / "tmp"
        run_parent.mkdir()
        server = RunningServer(
            data_dir=data_dir,
            port=free_port(),
            admin_token="",  # serve generates one and keeps it in the data directory
            env={"DATABASE_URL": "", "BANKRAIL_PUBLIC_URL": "", "TMPDIR": str(run_parent)},
        )
        server.start("--workers", workers)
        assert server.process is not None
        session = server.process.pid
        wait_for(lambda: _worker_runs(server), timeout=30, what="the background worker")
        assert processes_mentioning(data_dir), "the embedded PostgreSQL runs"
        assert list(run_parent.iterdir()), "serve's run directory exists"

        if whole_group:
            os.killpg(session, sig)
        else:
            os.kill(session, sig)
        code = server.process.wait(timeout=90)
        server.process = None

        wait_for(
            lambda: not processes_mentioning(data_dir) and not session_commands(session),
            timeout=30,
            what="every process serve started to end",
        )
        log = server.log_path.read_text()
        assert code == 0, log
        assert list(run_parent.iterdir()) == [], "serve's run directory is removed"
        # In order: PostgreSQL shut down cleanly once its clients had stopped (none of
        # them reported losing it).
        assert _postgres_log_tail(data_dir).endswith("database system is shut down"), log
        assert "Traceback" not in log, log
        assert "exited with code" not in log, log


def _postgres_log_tail(data_dir: Path) -> str:
    return (data_dir / "postgres.log").read_text().rstrip()
