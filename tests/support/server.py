"""`bankrail serve` as a subprocess on a free port, as a user would run it."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from support.databases import drop_database, fresh_database, run

PRODUCTION = {"BANKRAIL_MODE": "production"}
"""The environment of a production-mode server."""
STAGING = {**PRODUCTION, "BANKRAIL_MOCK_PROVIDERS": "on"}
"""Production mode with the mock providers and outcome tokens on (a staging deployment)."""


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningServer:
    """A `bankrail serve` process and how to reach it."""

    data_dir: Path
    port: int
    admin_token: str
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.data_dir / "serve.log"

    @property
    def base_url(self) -> str:
        """Where the API answers."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, *extra_args: str, timeout: float = 60) -> None:
        """Start the server and wait until it answers."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env, "BANKRAIL_ADMIN_TOKEN": self.admin_token}
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bankrail",
                "serve",
                "--data-dir",
                str(self.data_dir),
                "--port",
                str(self.port),
                *extra_args,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"bankrail serve exited:\n{self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.base_url}/openapi.json", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"bankrail serve did not start:\n{self.log_path.read_text()}")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 60) -> int:
        """Stop the server with `sig` and return its exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait()
        self.process = None
        return code

    def kill_group(self) -> None:
        """SIGKILL the server's whole process group, as a crash would."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None


@contextlib.contextmanager
def own_server(
    pg_server: str, env: dict[str, str], *serve_args: str, admin_token: str | None = None
) -> Iterator[RunningServer]:
    """A started `bankrail serve` of a test module's own, on a fresh database of the
    session's PostgreSQL, with a strong operator token unless told otherwise."""
    dsn = str(run(fresh_database(pg_server, migrated=False)))
    base = Path(tempfile.mkdtemp(prefix="bankrail-own-"))
    running = RunningServer(
        data_dir=base / "data",
        port=free_port(),
        admin_token=admin_token or secrets.token_urlsafe(32),
        env={"DATABASE_URL": dsn, **env},
    )
    try:
        running.start(*serve_args, timeout=120)
        yield running
    finally:
        if running.process is not None:
            running.stop()
        run(drop_database(pg_server, dsn))
        shutil.rmtree(base, ignore_errors=True)
