"""`serve --workers N` starts its background-work process only once the API answers."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bankrail.cli import DeferredProcess
from support.server import free_port

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def _started(deferred: DeferredProcess, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while deferred.process is None:
        assert time.monotonic() < deadline, "the process was not started"
        time.sleep(0.01)


@pytest.fixture
def server() -> Iterator[tuple[ThreadingHTTPServer, list[object]]]:
    """A loopback HTTP server answering 503 to everything; what `seen()` returned at each
    request is recorded, before the answer is sent."""
    recorded: list[object] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            recorded.append(self.server.seen())  # type: ignore[attr-defined]
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, recorded
    httpd.shutdown()
    httpd.server_close()


def test_starts_the_process_once_the_server_answers_and_stops_it(
    server: tuple[ThreadingHTTPServer, list[object]],
) -> None:
    httpd, recorded = server
    deferred = DeferredProcess(SLEEPER, ("127.0.0.1", httpd.server_address[1]))
    httpd.seen = lambda: deferred.process  # type: ignore[attr-defined]
    deferred.start()
    _started(deferred)
    # Any answer counts (here a 503), and nothing was started before the first one.
    assert recorded[0] is None
    process = deferred.process
    assert process is not None
    deferred.stop(timeout=10)
    assert process.returncode is not None


def test_stopped_before_the_server_answers_it_never_starts() -> None:
    deferred = DeferredProcess(SLEEPER, ("127.0.0.1", free_port()))
    deferred.start()
    deferred.stop(timeout=10)
    assert deferred.process is None


def test_starts_anyway_when_the_server_never_answers() -> None:
    deferred = DeferredProcess(SLEEPER, ("127.0.0.1", free_port()), longest_wait=0.2)
    deferred.start()
    _started(deferred)
    deferred.stop(timeout=10)
    assert deferred.process is not None
    assert deferred.process.returncode is not None
