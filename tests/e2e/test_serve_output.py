"""What a real `bankrail serve` prints in the sandbox: the demo's credentials, then one line
once it answers, then one concise line per request (method, path, status, milliseconds, and
the problem's title for a 4xx or 5xx), unless the access line is turned off."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator

import httpx
import pytest
from e2e_helpers import private_data_dir, wait_for

from support.server import RunningServer, free_port

pytestmark = pytest.mark.slow  # starts and stops `bankrail serve` processes of its own

_ACCESS_LINE = re.compile(r"^\d\d:\d\d:\d\d (GET|POST) /\S* \d{3} \d+\.\d ms", re.MULTILINE)


@pytest.fixture
def server() -> Iterator[RunningServer]:
    """A `bankrail serve` on a data directory of its own (not started yet)."""
    with private_data_dir("bankrail-e2e-output-") as data_dir:
        running = RunningServer(
            data_dir=data_dir,
            port=free_port(),
            admin_token="",
            env={"DATABASE_URL": "", "BANKRAIL_PUBLIC_URL": "", "BANKRAIL_ACCESS_LOG": ""},
        )
        try:
            yield running
        finally:
            if running.process is not None:
                running.stop()


def _stopped_log(server: RunningServer) -> str:
    """Everything the server printed, once it has exited (so nothing is still on its way)."""
    assert server.stop(signal.SIGTERM) == 0
    return server.log_path.read_text()


def test_the_ready_line_follows_the_credentials_and_each_request_gets_a_line(
    server: RunningServer,
) -> None:
    server.start("--demo")
    ready = f"Bankrail is ready on {server.base_url} "
    wait_for(lambda: ready in server.log_path.read_text(), timeout=30, what="the ready line")
    assert httpx.get(f"{server.base_url}/v3/payouts").status_code == 401
    assert httpx.post(f"{server.base_url}/connect/token", data={}).status_code == 400
    log = _stopped_log(server)

    assert log.index("client_secret ") < log.index(ready), log
    assert re.search(r"^\d\d:\d\d:\d\d GET /v3/payouts 401 \d+\.\d ms Unauthenticated$", log, re.M)
    assert re.search(
        r"^\d\d:\d\d:\d\d POST /connect/token 400 \d+\.\d ms Invalid Parameters$", log, re.M
    ), log
    assert re.search(r"^\d\d:\d\d:\d\d GET /healthz 200 \d+\.\d ms$", log, re.M), log


@pytest.mark.parametrize(
    ("args", "env"),
    [((), {"BANKRAIL_ACCESS_LOG": "off"}), (("--no-access-log",), {})],
    ids=["BANKRAIL_ACCESS_LOG=off", "--no-access-log"],
)
def test_the_access_line_can_be_turned_off(
    server: RunningServer, args: tuple[str, ...], env: dict[str, str]
) -> None:
    server.env.update(env)
    server.start(*args)
    wait_for(lambda: "Bankrail is ready on" in server.log_path.read_text(), timeout=30)
    assert httpx.get(f"{server.base_url}/v3/payouts").status_code == 401
    log = _stopped_log(server)
    assert not _ACCESS_LINE.search(log), log
