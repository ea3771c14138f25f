"""The Bankrail server the tests talk to: a `bankrail serve` of the session's own, or the one
at `BANKRAIL_URL`."""

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
from dataclasses import dataclass, field
from pathlib import Path

import httpx

__all__ = ["BankrailServer", "ServerError", "connect_server", "probe_server", "start_server"]

# Environment that would make the child serve another database, directory or address than
# the one chosen here.
_CHILD_ENV_DROPPED = (
    "DATABASE_URL",
    "BANKRAIL_DATA_DIR",
    "BANKRAIL_HOST",
    "BANKRAIL_PORT",
    "BANKRAIL_PUBLIC_URL",
    "BANKRAIL_MODE",
)
_LOG_TAIL_LINES = 15


class ServerError(RuntimeError):
    """The server could not be started or reached; the message says why, in one line (plus
    the server's log tail when it has one)."""


@dataclass
class BankrailServer:
    """A running Bankrail: its base URL and operator token.

    `started_in` is how long the start took (seconds; 0 for a server at `BANKRAIL_URL`).
    """

    url: str
    admin_token: str
    started_in: float = 0.0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    base_dir: Path | None = field(default=None, repr=False)

    def operator(self) -> httpx.Client:
        """A new `httpx.Client` for the operator and sandbox API (close it when done)."""
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=30,
        )

    @property
    def log_path(self) -> Path | None:
        """The server's log file (only for a server started here)."""
        return self.base_dir / "serve.log" if self.base_dir else None

    def stop(self, timeout: float = 60) -> None:
        """Stop a server started here and remove its directory; nothing for one at
        `BANKRAIL_URL`."""
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(process.pid)
                process.wait()
            # Whatever of its process group outlived it (nothing, normally) goes too.
            _kill_group(process.pid)
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def probe_server(url: str) -> bool:
    """Whether the Bankrail at `url` is ready: True when its `/readyz` answers 200, False while
    it answers 503 (starting, or its database is down) or too slowly. Raises ServerError at
    once, saying which, when nothing listens at `url` or what answers there is not Bankrail's
    API (any other status, such as the 404 of another server or of a wrong path)."""
    url = url.rstrip("/")
    try:
        answer = httpx.get(f"{url}/readyz", timeout=2)
    except httpx.TimeoutException:
        return False
    except httpx.ConnectError as exc:
        raise ServerError(
            f"nothing answers at {url} ({exc}): is `bankrail serve` running there, on this "
            "host and port?"
        ) from None
    except httpx.HTTPError as exc:
        raise ServerError(f"cannot reach {url}: {exc}") from None
    if answer.status_code == 200:
        return True
    if answer.status_code == 503:
        return False
    raise ServerError(
        f"{url} is not a Bankrail API: GET {url}/readyz answered {answer.status_code} "
        "(give the server's base URL, such as http://127.0.0.1:8080)"
    )


def connect_server(url: str, admin_token: str | None, timeout: float = 30) -> BankrailServer:
    """The server at `url` (`BANKRAIL_URL`), once its /readyz answers 200; ServerError at once
    when nothing listens there or it is not Bankrail (probe_server), after `timeout` seconds
    when it stays not ready."""
    if not admin_token:
        raise ServerError("BANKRAIL_URL is set but BANKRAIL_ADMIN_TOKEN is not")
    url = url.rstrip("/")
    deadline = time.monotonic() + timeout
    while not probe_server(url):
        if time.monotonic() >= deadline:
            raise ServerError(
                f"the Bankrail server at {url} is not ready after {timeout:g} s "
                "(GET /readyz answers 503)"
            )
        time.sleep(0.2)
    return BankrailServer(url=url, admin_token=admin_token)


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-_LOG_TAIL_LINES:])


def _make_base_dir(parent: Path | None) -> Path:
    where = parent if parent is not None else Path(tempfile.gettempdir())
    try:
        return Path(tempfile.mkdtemp(prefix="bankrail-session-", dir=where))
    except OSError as exc:
        raise ServerError(
            f"cannot create the server's data directory in {where}: {exc.strerror or exc}"
        ) from None


def start_server(
    *,
    port: int | None = None,
    parent_dir: Path | None = None,
    host: str = "127.0.0.1",
    timeout: float = 120,
) -> BankrailServer:
    """Start `python -m bankrail serve` on an embedded PostgreSQL in a new temporary directory
    (under `parent_dir`, default the system's), with a new operator token, on `port` (default:
    a free one), and wait until /readyz answers 200."""
    began = time.monotonic()
    if port is not None and not _port_free(host, port):
        raise ServerError(f"port {port} on {host} is already in use")
    base = _make_base_dir(parent_dir)
    try:
        log_path = base / "serve.log"
        log = log_path.open("wb")
    except OSError as exc:
        shutil.rmtree(base, ignore_errors=True)
        raise ServerError(f"cannot write in {base}: {exc.strerror or exc}") from None
    chosen = port if port is not None else _free_port(host)
    token = "test-" + secrets.token_urlsafe(32)
    env = {k: v for k, v in os.environ.items() if k not in _CHILD_ENV_DROPPED}
    env["BANKRAIL_ADMIN_TOKEN"] = token
    command = [sys.executable, "-m", "bankrail", "serve", "--host", host, "--port", str(chosen)]
    command += ["--data-dir", str(base / "data")]
    with log:
        process = subprocess.Popen(  # noqa: S603 (our own argv)
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = BankrailServer(
        url=f"http://{host}:{chosen}", admin_token=token, process=process, base_dir=base
    )
    deadline = began + timeout
    while not _ready(server.url):
        code = process.poll()
        if code is not None or time.monotonic() >= deadline:
            tail = _tail(log_path)
            server.stop(timeout=10)
            if "address already in use" in tail.lower():
                raise ServerError(f"port {chosen} on {host} is already in use")
            what = f"exited with code {code}" if code is not None else f"not ready in {timeout}s"
            raise ServerError(f"bankrail serve {what}; its log ends:\n{tail}")
        time.sleep(0.05)
    server.started_in = time.monotonic() - began
    return server
