"""`bankrail init` and `bankrail serve` on one data directory, as a developer runs them: demo
credentials, restart, SIGTERM, and recovery after the whole process group is killed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_helpers import (
    bearer,
    end_processes_mentioning,
    identifier,
    private_data_dir,
    processes_mentioning,
    wait_for,
)
from payout_helpers import (
    SORT_CODE,
    create_payout,
    external_beneficiary,
    payout_body,
    wait_payout_status,
)

from support.api import Operator
from support.processes import children, command_line, niceness, session_commands, session_pids
from support.server import RunningServer, free_port

pytestmark = pytest.mark.slow  # starts, kills and restarts `bankrail serve` processes

# The embedded PostgreSQL is wanted here even when the suite runs against DATABASE_URL.
_UNSET = (
    "DATABASE_URL",
    "BANKRAIL_ADMIN_TOKEN",
    "BANKRAIL_DATA_DIR",
    "BANKRAIL_PORT",
    "BANKRAIL_HOST",
    "BANKRAIL_PUBLIC_URL",
    "BANKRAIL_MODE",
)


def _init(data_dir: Path, *extra_args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in _UNSET}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bankrail",
            "init",
            "--data-dir",
            str(data_dir),
            "--json",
            *extra_args,
        ],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    printed: dict[str, Any] = json.loads(done.stdout)
    return printed


@pytest.fixture(scope="module")
def demo() -> Iterator[tuple[Path, dict[str, Any], dict[str, Any]]]:
    """A data directory after `init --json` ran twice: (dir, first output, second output)."""
    with private_data_dir("bankrail-e2e-cli-") as data_dir:
        first = _init(data_dir)
        second = _init(data_dir)
        yield data_dir, first, second


@pytest.fixture
def serve(demo: tuple[Path, dict[str, Any], dict[str, Any]]) -> Iterator[RunningServer]:
    """A `bankrail serve` on the demo directory (not started), using the token init made."""
    with _server_of(demo[0]) as server:
        yield server


@contextlib.contextmanager
def _server_of(data_dir: Path) -> Iterator[RunningServer]:
    """A `bankrail serve` on `data_dir` (not started) on the embedded database, with the
    operator token found there; killed, with every process of the directory, afterwards."""
    server = RunningServer(
        data_dir=data_dir,
        port=free_port(),
        admin_token="",  # empty: serve uses the operator token kept in the data directory
        env={"DATABASE_URL": "", "BANKRAIL_PUBLIC_URL": ""},
    )
    try:
        yield server
    finally:
        if server.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait()
            server.process = None
        end_processes_mentioning(data_dir)
        wait_for(lambda: not processes_mentioning(data_dir), what="leftover processes to end")


def _operator(server: RunningServer, demo: dict[str, Any]) -> Operator:
    return Operator(server.base_url, demo["admin_token"])


def _demo_token(server: RunningServer, demo: dict[str, Any]) -> str:
    answer = httpx.post(
        f"{server.base_url}/connect/token",
        data={
            "grant_type": "client_credentials",
            "client_id": demo["client_id"],
            "client_secret": demo["client_secret"],
        },
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def _accounts(server: RunningServer, demo: dict[str, Any]) -> dict[str, dict[str, Any]]:
    listed = httpx.get(
        f"{server.base_url}/v3/merchant-accounts", headers=bearer(_demo_token(server, demo))
    )
    assert listed.status_code == 200, listed.text
    return {a["currency"]: a for a in listed.json()["items"]}


def _gbp_balance(server: RunningServer, demo: dict[str, Any]) -> int:
    return int(_accounts(server, demo)["GBP"]["current_balance_in_minor"])


def _top_up(server: RunningServer, demo: dict[str, Any], amount: int) -> None:
    operator = _operator(server, demo)
    try:
        gbp = next(a for a in demo["merchant_accounts"] if a["currency"] == "GBP")
        answer = operator.top_up(gbp, amount)
        assert answer.status_code == 201, answer.text
    finally:
        operator.close()


def _ledger_ok(server: RunningServer, demo: dict[str, Any]) -> bool:
    operator = _operator(server, demo)
    try:
        answer = operator.get("/admin/ledger/check")
        assert answer.status_code == 200, answer.text
        return bool(answer.json() == {"ok": True, "violations": []})
    finally:
        operator.close()


def test_init_prints_what_a_developer_needs(
    demo: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    data_dir, first, second = demo
    assert first["client_id"]
    assert first["client_secret"]
    assert first["signing_key_id"]
    assert first["admin_token"]
    key_path = Path(first["private_key_path"])
    assert key_path.is_file()
    assert "PRIVATE KEY" in key_path.read_text()
    for secret_file in (key_path, data_dir / "admin-token", data_dir / "demo-credentials.json"):
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600, secret_file
    accounts = {a["currency"]: a for a in first["merchant_accounts"]}
    assert set(accounts) == {"GBP", "EUR"}
    assert identifier(accounts["GBP"], "sort_code_account_number")
    assert identifier(accounts["GBP"], "iban")
    assert [i["type"] for i in accounts["EUR"]["account_identifiers"]] == ["iban"]

    assert second["merchant_id"] == first["merchant_id"], "init again shows the same demo"
    assert second["client_id"] == first["client_id"]
    assert not processes_mentioning(data_dir), "init leaves no database server running"


def test_init_prints_the_base_url_of_the_port_asked_for(
    demo: tuple[Path, dict[str, Any], dict[str, Any]],
) -> None:
    data_dir, first, _ = demo
    again = _init(data_dir, "--port", "9123")
    assert again["client_id"] == first["client_id"], "the same demo, shown for another port"
    assert again["base_url"] == "http://127.0.0.1:9123"


def test_serve_demo_creates_and_prints_a_demo_that_works_at_its_port() -> None:
    with private_data_dir("bankrail-e2e-serve-demo-") as data_dir, _server_of(data_dir) as server:
        server.start("--demo")
        printed = server.log_path.read_text()
        saved = json.loads((data_dir / "demo-credentials.json").read_text())
        assert f"base URL          {server.base_url}\n" in printed
        assert f"client_id         {saved['client_id']}\n" in printed
        assert _accounts(server, saved).keys() == {"GBP", "EUR"}
        assert server.stop() == 0


def test_serve_restart_keeps_balances(
    demo: tuple[Path, dict[str, Any], dict[str, Any]], serve: RunningServer
) -> None:
    _, first, _ = demo
    serve.start()
    accounts = _accounts(serve, first)
    assert {a["id"] for a in accounts.values()} == {a["id"] for a in first["merchant_accounts"]}
    before = _gbp_balance(serve, first)
    _top_up(serve, first, 2_500)
    assert _gbp_balance(serve, first) == before + 2_500
    serve.stop()

    serve.start()
    assert _gbp_balance(serve, first) == before + 2_500
    assert _ledger_ok(serve, first)
    serve.stop()


def test_sigterm_exits_zero_and_stops_postgres(
    demo: tuple[Path, dict[str, Any], dict[str, Any]], serve: RunningServer
) -> None:
    data_dir, first, _ = demo
    serve.start()
    assert _accounts(serve, first)
    code = serve.stop(signal.SIGTERM)
    leftovers = processes_mentioning(data_dir)
    assert (code, leftovers) == (0, [])


@pytest.mark.parametrize("api_processes", ["1", "2"])
def test_serve_runs_background_work_in_a_lower_priority_process_and_stops_whole(
    demo: tuple[Path, dict[str, Any], dict[str, Any]], serve: RunningServer, api_processes: str
) -> None:
    # Background work runs in a `bankrail worker` process of its own, started once the API
    # answers, at a lower CPU priority than the API: a payout is executed by it, and SIGTERM
    # stops it with the rest.
    data_dir, first, _ = demo
    serve.start("--workers", api_processes)
    assert serve.process is not None
    session = serve.process.pid
    operator = _operator(serve, first)
    try:
        merchant = operator.new_merchant(currencies=("GBP",))
        assert operator.top_up(merchant.accounts["GBP"], 1_000).status_code == 201
        body = payout_body(merchant, "GBP", 250, external_beneficiary(SORT_CODE))
        payout_id = create_payout(merchant, body)
        record = wait_payout_status(merchant, payout_id, {"executed", "failed"})
        assert record["status"] == "executed", record
        workers = _session_processes(session, "bankrail worker")
        assert [niceness(pid) for pid in workers] == [10]
        assert {niceness(pid) for pid in _session_processes(session, "bankrail serve")} == {0}
        # Every API process says whether the worker runs, from the state `serve` keeps.
        for _ in range(4):  # connections of their own, so both of --workers 2 are likely asked
            ready = httpx.get(f"{serve.base_url}/readyz").json()
            assert ready["checks"]["workers"] == "ok", ready
    finally:
        operator.close()
    code = serve.stop(signal.SIGTERM)
    assert (code, processes_mentioning(data_dir)) == (0, [])
    # multiprocessing's resource tracker (of --workers N > 1) ends on its own once the
    # processes that used it are gone, a moment after them.
    wait_for(lambda: not session_commands(session), what="every process of the session to end")


def _session_processes(session: int, command: str) -> list[int]:
    return [pid for pid in session_pids(session) if command in command_line(pid)]


def _kill_everything(data_dir: Path) -> None:
    """What a power cut does: every process of the data directory, the postmaster and its
    children included, dies at once (SIGKILL, by pid), leaving a stale `postmaster.pid`."""
    leaders = {pid for pid, _ in processes_mentioning(data_dir)}
    followers = set(children(leaders))
    for pid in leaders | followers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def gone() -> bool:
        return not any(Path(f"/proc/{pid}/cmdline").exists() for pid in leaders | followers)

    wait_for(gone, what="the killed processes to disappear")


def test_restart_after_the_process_group_is_killed(
    demo: tuple[Path, dict[str, Any], dict[str, Any]], serve: RunningServer
) -> None:
    data_dir, first, _ = demo
    serve.start()
    _top_up(serve, first, 1_234)
    expected = _gbp_balance(serve, first)
    serve.kill_group()  # a crash: serve and its process group die at once, without cleanup
    assert (data_dir / "pgdata" / "postmaster.pid").exists(), "a crash leaves the pid file"

    started = time.monotonic()
    serve.start()  # finds the pid file and whatever PostgreSQL the crash left running
    assert time.monotonic() - started < 45
    assert _gbp_balance(serve, first) == expected
    _top_up(serve, first, 1)
    assert _gbp_balance(serve, first) == expected + 1
    assert _ledger_ok(serve, first)

    serve.kill_group()
    serve.start()  # and once more, to be sure recovery is repeatable
    assert _gbp_balance(serve, first) == expected + 1
    assert _ledger_ok(serve, first)


def test_restart_after_every_process_is_killed(
    demo: tuple[Path, dict[str, Any], dict[str, Any]], serve: RunningServer
) -> None:
    data_dir, first, _ = demo
    serve.start()
    _top_up(serve, first, 42)
    expected = _gbp_balance(serve, first)
    serve.kill_group()
    _kill_everything(data_dir)
    assert (data_dir / "pgdata" / "postmaster.pid").exists(), "the pid file is now stale"

    serve.start()  # a stale pid file whose process is gone
    assert _gbp_balance(serve, first) == expected
    assert _ledger_ok(serve, first)
    assert {a["id"] for a in _accounts(serve, first).values()} == {
        a["id"] for a in first["merchant_accounts"]
    }
