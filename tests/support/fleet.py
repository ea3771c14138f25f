"""Bankrail run as an operator runs it: several `bankrail serve` hosts against one database of
the machine's PostgreSQL server, and a client that sends signed payouts through them as a
load balancer would (docs/operations.md, "Many hosts")."""

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
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.api import MerchantClient
from support.databases import drop_database, fresh_database, run
from support.server import RunningServer, free_port

# The PostgreSQL server the operating-at-scale tests run against, as an operator's would be
# (a TCP address, a server of its own rather than the embedded one).
LOCAL_SERVER = os.environ.get(
    "BANKRAIL_TEST_LOCAL_PG", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def local_server() -> str:
    """The local PostgreSQL server's admin DSN; skips the test when nothing listens there."""
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=2):
            pass
    except OSError:
        pytest.skip(
            "no PostgreSQL server at 127.0.0.1:5432 (the operating-at-scale tests need one)"
        )
    return LOCAL_SERVER


@contextlib.contextmanager
def local_database() -> Iterator[tuple[str, str]]:
    """A new, empty database of the local server: (server DSN, database DSN); dropped after."""
    server = local_server()
    dsn = str(run(fresh_database(server, migrated=False)))
    try:
        yield server, dsn
    finally:
        run(drop_database(server, dsn))


@contextlib.contextmanager
def hosts(
    dsn: str, count: int, env: dict[str, str] | None = None, *serve_args: str
) -> Iterator[list[RunningServer]]:
    """`count` started `bankrail serve` hosts on one database, each with its own port, data
    directory and host id (`BANKRAIL_HOST_ID` host-1, host-2...), and one operator token."""
    base = Path(tempfile.mkdtemp(prefix="bankrail-fleet-"))
    token = secrets.token_urlsafe(32)
    started = [
        RunningServer(
            data_dir=base / f"host-{n}",
            port=free_port(),
            admin_token=token,
            env={"DATABASE_URL": dsn, "BANKRAIL_HOST_ID": f"host-{n}", **(env or {})},
        )
        for n in range(1, count + 1)
    ]
    try:
        for host in started:
            host.start(*serve_args, timeout=120)
        yield started
    finally:
        for host in started:
            if host.process is not None:
                host.stop()
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class WorkerHost:
    """A `bankrail worker` process group of its own, as on a host that runs background work
    only."""

    data_dir: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the worker (it is running once it has applied the migrations)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = (self.data_dir / "worker.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bankrail", "worker", "--data-dir", str(self.data_dir)],
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def log(self) -> str:
        """What the worker wrote so far."""
        return (self.data_dir / "worker.log").read_text(errors="replace")

    def kill_group(self) -> None:
        """SIGKILL the worker's whole process group, as a crash of its host would."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    def stop(self) -> int:
        """SIGTERM; the exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait()
        self.process = None
        return code


@contextlib.contextmanager
def workers(dsn: str, count: int, env: dict[str, str] | None = None) -> Iterator[list[WorkerHost]]:
    """`count` started `bankrail worker` hosts on one database (host ids worker-1, ...)."""
    base = Path(tempfile.mkdtemp(prefix="bankrail-workers-"))
    started = [
        WorkerHost(
            base / f"worker-{n}",
            {"DATABASE_URL": dsn, "BANKRAIL_HOST_ID": f"worker-{n}", **(env or {})},
        )
        for n in range(1, count + 1)
    ]
    try:
        for worker in started:
            worker.start()
        yield started
    finally:
        for worker in started:
            if worker.process is not None:
                worker.stop()
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class FailoverClient:
    """One merchant's signed POSTs sent to several hosts in turn, as a load balancer would: a
    host that refuses the connection is skipped, and the same request (the same
    Idempotency-Key) goes to the next one. Each request has a connection of its own, so a
    connection that a host accepted and then dropped is a failed request (`httpx` raises),
    never one retried elsewhere.

    With `after_crashes`, the client also sends the same request again (to the next host)
    when its connection was dropped without an answer, or when it is still in flight (409
    `idempotency-key-concurrency-conflict`), as a client of a host that may crash must:
    `dropped` counts those."""

    merchant: MerchantClient
    base_urls: list[str]
    give_up_after: float = 90.0
    after_crashes: bool = False
    dropped: int = 0
    _clients: list[MerchantClient] = field(init=False)
    _next: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._clients = [replace(self.merchant, base_url=url) for url in self.base_urls]
        for client in self._clients:
            client.http.close()
            client.http = httpx.Client(
                base_url=client.base_url,
                timeout=30,
                limits=httpx.Limits(max_keepalive_connections=0),
            )

    def post(self, path: str, body: dict[str, Any], key: str) -> httpx.Response:
        """The first answer any host gives (a refused connection is retried elsewhere)."""
        deadline = time.monotonic() + self.give_up_after
        while True:
            client = self._clients[self._next % len(self._clients)]
            self._next += 1
            try:
                answer = client.signed_post(path, body, idempotency_key=key)
            except httpx.TransportError as exc:
                dropped = not isinstance(exc, httpx.ConnectError)
                if (dropped and not self.after_crashes) or time.monotonic() > deadline:
                    raise
                self.dropped += dropped
                time.sleep(0.01)
                continue
            if self.after_crashes and _in_flight(answer) and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            return answer

    def close(self) -> None:
        """Close every host's connections."""
        for client in self._clients:
            client.http.close()


def _in_flight(answer: httpx.Response) -> bool:
    return answer.status_code == 409 and "idempotency-key-concurrency" in answer.text


@dataclass
class PayoutLoad:
    """Threads sending signed `POST /v3/payouts` through a `FailoverClient` each, until
    stopped; every answer is kept: `accepted` maps each acknowledged key to its payout id."""

    merchant: MerchantClient
    base_urls: list[str]
    body: dict[str, Any]
    threads: int = 4
    after_crashes: bool = False
    dropped: int = 0
    accepted: dict[str, str] = field(default_factory=dict)
    refused: list[tuple[int, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _running: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        """Start sending."""
        for n in range(self.threads):
            thread = threading.Thread(target=self._send, args=(n,), daemon=True)
            self._running.append(thread)
            thread.start()

    def stop(self) -> None:
        """Stop sending and wait for the requests in flight."""
        self._stop.set()
        for thread in self._running:
            thread.join(timeout=120)

    def count(self) -> int:
        """How many requests were acknowledged so far."""
        with self._lock:
            return len(self.accepted)

    def _send(self, n: int) -> None:
        # Each thread starts at another host, so that both take load from the start.
        urls = self.base_urls[n % len(self.base_urls) :] + self.base_urls[: n % len(self.base_urls)]
        client = FailoverClient(self.merchant, urls, after_crashes=self.after_crashes)
        try:
            while not self._stop.is_set():
                key = str(uuid.uuid4())
                try:
                    answer = client.post("/v3/payouts", self.body, key)
                except httpx.TransportError as exc:
                    with self._lock:
                        self.errors.append(f"{key}: {exc!r}")
                    continue
                with self._lock:
                    if answer.status_code == 202:
                        self.accepted[key] = str(answer.json()["id"])
                    else:
                        self.refused.append((answer.status_code, answer.text))
        finally:
            with self._lock:
                self.dropped += client.dropped
            client.close()
