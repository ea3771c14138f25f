"""How `bankrail serve` runs its processes: uvicorn's API processes (`api_only_app` builds the
application of each), the background worker in a process of its own started once the API
processes are up and restarted when it fails (`DeferredProcess`), and the state it reports at
/readyz; which signals stop it (`stop_on_hangup`), and the line that says it answers."""

from __future__ import annotations

import asyncio
import functools
import gc
import http.client
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bankrail.config import Settings, settings_from_env
from bankrail.core.logs import configure_logging

__all__ = [
    "WORKER_NICENESS",
    "DeferredProcess",
    "api_only_app",
    "guarded_event_loop",
    "published_state",
    "run_http",
    "stop_on_hangup",
    "survive_reraised_signals",
    "tune_gc_for_serving",
]

# How much lower `serve` sets its background worker's CPU priority (nice(2)). On a busy
# machine the API processes, their signature verifiers and PostgreSQL then answer requests
# first, and background work, which no request waits for, takes the time left: its
# batches grow meanwhile and cost less a payout. Nothing it does holds a lock while it
# waits for a core: a batch's rows are leased, decided, then written in one statement.
WORKER_NICENESS = 10

# Named as when this code lived in bankrail.cli, so that log lines and their filters keep it.
log = logging.getLogger("bankrail.cli")

# Set by `serve` for its API processes: each creates this file once it has built its
# application (the costly part of its start).
_API_STARTED_FILE = "BANKRAIL_API_STARTED_FILE"
# Set by `serve` for its API processes: the file where it keeps its background worker's state.
_WORKER_STATE_FILE = "BANKRAIL_WORKER_STATE_FILE"


def stop_on_hangup() -> None:
    """Make SIGHUP (its terminal closed, `tmux kill-session`) stop `serve` as SIGTERM does,
    in the same order, and make SIGTERM before the server runs end `serve` through its
    cleanup (KeyboardInterrupt, as Ctrl-C does) rather than kill it with the database up.

    Called first, before any thread exists. uvicorn's supervisor of `--workers N` takes
    SIGHUP to mean "restart the API processes", and a process left to the default dies at
    once with PostgreSQL running. So SIGHUP is blocked here, and thereby in every process
    `serve` starts (a blocked signal stays blocked across fork and exec; PostgreSQL sets its
    own mask): the API processes, the worker and the verifiers, which a closed terminal
    signals too, keep running until `serve` stops them in order. One thread of this process
    waits for SIGHUP and turns it into SIGTERM."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    hangup = {signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, hangup)

    def relay() -> None:
        while True:
            signal.sigwait(hangup)
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=relay, name="sighup-to-sigterm", daemon=True).start()


def survive_reraised_signals() -> None:
    """uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal to the
    handler that was installed before it. With the default handler that kills the process
    before the embedded database is stopped; this handler lets `serve` finish its cleanup
    and exit 0 instead."""

    def after_graceful_shutdown(_signum: int, _frame: object) -> None:
        return None

    signal.signal(signal.SIGTERM, after_graceful_shutdown)
    signal.signal(signal.SIGINT, after_graceful_shutdown)


def guarded_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop whose servers guard each connection with the limits of the
    process's settings (`BANKRAIL_*`): uvicorn's `loop` option takes it by name."""
    from bankrail.http.connection_guard import Limits
    from bankrail.http.guarded_loop import GuardedLoop

    settings = settings_from_env()
    return GuardedLoop(
        Limits(
            max_head_bytes=settings.max_head_bytes,
            head_timeout=settings.head_timeout_seconds,
            request_timeout=settings.request_timeout_seconds,
            max_connections=settings.max_connections,
            public_url=settings.public_url,
        )
    )


def run_http(settings: Settings, dsn: str, workers: int) -> None:
    """Serve HTTP with `workers` API processes on `dsn` until uvicorn stops, with the
    background worker in a process of its own, started once an API process has built its
    application and stopped (within 60 s) after them."""
    import uvicorn

    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": "warning",
        "access_log": False,  # ServiceMiddleware writes its own, with the trace id
        "log_config": None,  # uvicorn's loggers go through configure_logging's handler
        "timeout_graceful_shutdown": 30,
        "server_header": False,
        "http": "httptools",
        "ws": "none",
        # uvloop, whose servers put http/connection_guard.py's guard in front of each
        # connection: limits on request heads and open connections, which uvicorn lacks.
        "loop": "bankrail._serve:guarded_event_loop",
    }
    # The API processes build their settings from the environment: what the command line
    # chose must reach them there, or their links would name the default address.
    os.environ["DATABASE_URL"] = dsn
    os.environ["BANKRAIL_DATA_DIR"] = str(settings.data_dir)
    os.environ["BANKRAIL_HOST"] = settings.host
    os.environ["BANKRAIL_PORT"] = str(settings.port)
    os.environ["BANKRAIL_ACCESS_LOG"] = "on" if settings.access_log else "off"
    # The processes write their counters to files here, so /metrics on any one of them
    # reports the sum (prometheus_client's multiprocess mode).
    run_dir = Path(tempfile.mkdtemp(prefix="bankrail-serve-"))
    metrics_dir = run_dir / "metrics"
    metrics_dir.mkdir()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    started = run_dir / "api-started"
    os.environ[_API_STARTED_FILE] = str(started)
    # How the API processes learn whether the worker runs (with --workers 1, the one API
    # process is this one, but it reads the state as the others do).
    worker_state = run_dir / "worker-state"
    os.environ[_WORKER_STATE_FILE] = str(worker_state)
    worker = DeferredProcess(
        [sys.executable, "-m", "bankrail", "worker", "--nice", str(WORKER_NICENESS)],
        started.exists,
        state_file=worker_state,
    )
    worker.start()
    answering = threading.Event()
    threading.Thread(
        target=announce_when_answering, args=(settings, answering), daemon=True
    ).start()
    try:
        survive_reraised_signals()
        uvicorn.run("bankrail._serve:api_only_app", factory=True, workers=workers, **common)
    finally:
        answering.set()  # or stop waiting for it
        worker.stop(timeout=60)
        os.environ.pop(_WORKER_STATE_FILE, None)
        shutil.rmtree(run_dir, ignore_errors=True)


def announce_when_answering(settings: Settings, stop: threading.Event) -> None:
    """Once the server answers `GET /healthz` on its address, say so in one line (on stdout
    in the sandbox, after the credentials `--demo` printed; a log record in production);
    give up when `stop` is set first."""
    # A server listening on every address is asked on loopback.
    wildcards = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104
    host = wildcards.get(settings.host, settings.host)
    while not stop.wait(0.05):
        if _answers(host, settings.port):
            break
    else:
        return
    url = settings.public_url
    if settings.sandbox:
        print(
            f"Bankrail is ready on {url} (sandbox mode; console {url}/console; Ctrl-C stops it)",
            flush=True,
        )
    else:
        log.info("Bankrail is ready on %s (production mode)", url)


def _answers(host: str, port: int) -> bool:
    """Whether an HTTP server on host:port answers `GET /healthz` with 200."""
    connection = http.client.HTTPConnection(host, port, timeout=2)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


class DeferredProcess:
    """A process started once `ready()` is true (or after `longest_wait` seconds, whichever
    comes first), started again `restart_delay` seconds after it exits, and never after
    `stop`.

    A worker that cannot reach the database as it starts (an outage, or PostgreSQL
    restarting) exits with an error; it is started again until it can, and the jobs it
    finds then are the ones it would have run. One that ends as Ctrl-C or SIGTERM ends it
    (`_ASKED_TO_STOP`) was asked to stop.

    `serve` starts its background-work process this way, once an API process has built its
    application: the API processes then start with the machine's cores to themselves, so
    that the service answers sooner, and background work, which no request waits for,
    follows them. With `state_file`, its `state()` is also kept in that file (within 0.2 s
    of a change), where `serve`'s API processes read it for /readyz.
    """

    def __init__(
        self,
        command: list[str],
        ready: Callable[[], bool],
        *,
        longest_wait: float = 10.0,
        restart_delay: float = 1.0,
        state_file: Path | None = None,
    ) -> None:
        self._command = command
        self._ready = ready
        self._longest_wait = longest_wait
        self._restart_delay = restart_delay
        self._state_file = state_file
        self._published: str | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._start_when_ready, daemon=True)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Begin waiting (in a thread of this process)."""
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Ask the process to stop (SIGTERM) and wait up to `timeout` seconds for it; if it
        has not started yet, it never will."""
        with self._lock:
            self._stopping.set()
            process = self.process
        if self._thread.is_alive():
            self._thread.join()
        if process is not None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=timeout)
        self._publish()

    def state(self) -> str:
        """`ok` while the process runs; `starting` before it is started; otherwise how it
        ended (and, until `stop`, that it is being started again)."""
        process = self.process
        if process is None:
            return "stopped" if self._stopping.is_set() else "starting"
        code = process.poll()
        if code is None:
            return "ok"
        restarting = _failed(code) and not self._stopping.is_set()
        return f"exited with code {code}" + ("; restarting" if restarting else "")

    def _start_when_ready(self) -> None:
        self._publish()
        deadline = time.monotonic() + self._longest_wait
        while not self._ready() and time.monotonic() < deadline:
            if self._stopping.wait(0.02):
                return
        while self._launch():
            self._publish()
            process = self.process
            assert process is not None
            while process.poll() is None:
                if self._stopping.wait(0.2):
                    return
            self._publish()
            if not _failed(process.returncode):
                return
            log.warning(
                "the background worker exited with code %s; starting it again",
                process.returncode,
            )
            if self._stopping.wait(self._restart_delay):
                return

    def _publish(self) -> None:
        """Write `state()` to the state file, if there is one and the state changed."""
        if self._state_file is None:
            return
        state = self.state()
        if state == self._published:
            return
        # Whole or not at all: a reader never sees a half-written state.
        written = self._state_file.with_name(self._state_file.name + ".new")
        written.write_text(state)
        written.replace(self._state_file)
        self._published = state

    def _launch(self) -> bool:
        """Start the process unless stopping; whether it was started."""
        with self._lock:
            if self._stopping.is_set():
                return False
            self.process = subprocess.Popen(self._command)  # noqa: S603 (our own argv)
            return True


# The exits of a process that was asked to stop: a clean one, 130 (128 + SIGINT: what
# `bankrail worker` exits with on Ctrl-C, which reaches it through `serve`'s process group),
# or the signal itself when it came before the process handled it.
_ASKED_TO_STOP = frozenset({0, 128 + signal.SIGINT, -signal.SIGINT, -signal.SIGTERM})


def published_state(state_file: Path) -> str:
    """The state a `DeferredProcess` last wrote to `state_file` (`starting` before its
    first)."""
    try:
        return state_file.read_text()
    except FileNotFoundError:
        return "starting"


def _failed(returncode: int) -> bool:
    """Whether a process that ended with `returncode` failed, rather than was asked to
    stop."""
    return returncode not in _ASKED_TO_STOP


def api_only_app() -> Any:
    """An API process of `serve`: HTTP only, background work runs in a process of its own,
    whose state it reports at /readyz."""
    from bankrail.app import create_app

    settings = settings_from_env()
    configure_logging(production=not settings.sandbox, host=settings.host_id)
    dsn = settings.database_url
    assert dsn is not None
    app = create_app(settings, dsn)
    state_file = os.environ.get(_WORKER_STATE_FILE)
    if state_file:
        app.state.background_process = functools.partial(published_state, Path(state_file))
    tune_gc_for_serving()
    started = os.environ.get(_API_STARTED_FILE)
    if started:
        Path(started).touch()
    return app


def tune_gc_for_serving() -> None:
    """Tune the cycle collector of a serving process, once its application is built.

    What exists by then (modules, routes, schemas, settings) lives as long as the process:
    frozen, it is not traversed again by every full collection. A request's objects are
    almost all freed by reference counting, so collecting the youngest generation every 700
    allocations (the default) mostly re-examines the objects of requests still in flight;
    every 10,000 costs less and still bounds what cyclic garbage can pile up."""
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
