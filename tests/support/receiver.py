"""A webhook receiver on loopback that records what it is sent and answers as told."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class Answer:
    """How to answer one request: a status, or a fault."""

    status: int = 200
    delay: float = 0.0
    reset: bool = False
    body_size: int = 0
    location: str | None = None


Behaviour = Callable[[Received, int], Answer]


def always(status: int) -> Behaviour:
    """Answer every request with `status`."""
    return lambda _request, _index: Answer(status)


@dataclass
class WebhookReceiver:
    """A threaded HTTP server recording every request; `behaviour` decides each answer."""

    behaviour: Behaviour = field(default_factory=lambda: always(200))
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                request = Received(self.path, {k: v for k, v in self.headers.items()}, body)
                with receiver._lock:
                    index = len(receiver.received)
                    receiver.received.append(request)
                answer = receiver.behaviour(request, index)
                if answer.delay:
                    time.sleep(answer.delay)
                if answer.reset:
                    # SO_LINGER 0 makes close() send a RST; every reference to the socket
                    # (the buffered reader and writer too) must be closed for it to happen.
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.close_connection = True
                    self.rfile.close()
                    self.wfile.close()
                    self.connection.close()
                    return
                payload = b"x" * answer.body_size
                self.send_response(answer.status)
                if answer.location:
                    self.send_header("Location", answer.location)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(payload)

        ThreadingHTTPServer.request_queue_size = 1024  # a whole batch connects at once
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The receiver's base URL."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def snapshot(self) -> list[Received]:
        """What has been received so far."""
        with self._lock:
            return list(self.received)

    def wait_for(
        self, predicate: Callable[[list[Received]], bool], timeout: float = 20.0
    ) -> list[Received]:
        """Poll until `predicate(received)` holds; fail after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = self.snapshot()
            if predicate(seen):
                return seen
            time.sleep(0.02)
        raise AssertionError(f"condition not met; received {len(self.snapshot())} requests")

    def events(self) -> list[Any]:
        """Bodies received, parsed."""
        return [r.json() for r in self.snapshot()]

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


class HangingReceiver:
    """A loopback endpoint that accepts every connection, reads what it is sent and never
    answers; it counts the connections open at once. `close` drops them all."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self._listener.settimeout(0.2)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._open: set[socket.socket] = set()
        self.accepted = 0
        self.most_open = 0
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        """The receiver's base URL."""
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}"

    @property
    def open_now(self) -> int:
        """Connections open at this moment."""
        with self._lock:
            return len(self._open)

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._open.add(conn)
                self.accepted += 1
                self.most_open = max(self.most_open, len(self._open))
            thread = threading.Thread(target=self._hold, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _hold(self, conn: socket.socket) -> None:
        # Read until the sender gives up (or `close`), never answering.
        with contextlib.suppress(OSError):
            while conn.recv(65536):
                pass
        with self._lock:
            self._open.discard(conn)
        conn.close()

    def close(self) -> None:
        """Stop accepting and drop every connection."""
        self._stopping.set()
        self._listener.close()
        with self._lock:
            held = list(self._open)
        for conn in held:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout=5)
