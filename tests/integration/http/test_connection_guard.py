"""The connection guard (`http/connection_guard.py`) on a real uvicorn server and socket: an
answer of its own never lands inside the answer to an earlier request of the connection (one
that pipelines), the time to send a head counts from when the requests before it were
answered, and a server that stops answers the requests of every connection it had accepted
or had waiting in its backlog. (Its limits as `bankrail serve` applies them:
tests/e2e/test_slow_requests_http.py; rolling restarts: tests/e2e/test_rolling_restart.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO

import uvicorn
from starlette.types import Receive, Scope, Send

from bankrail.http.connection_guard import Limits
from bankrail.http.guarded_loop import GuardedLoop
from bankrail.http.middleware import ServiceMiddleware
from support.server import free_port
from support.waiting import wait_for

HEAD_TIMEOUT = 0.5
MAX_HEAD = 1024
BOUND = 20.0


class SlowApp:
    """Answers 200; `/slow` only once released (from the test's thread); `/stall` holds the
    whole event loop until `unstall` is set."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.release = asyncio.Event()
        self.stalled = threading.Event()
        self.unstall = threading.Event()
        self.after_stall: Callable[[], None] = lambda: None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/slow":
            self.loop = asyncio.get_running_loop()
            self.started.set()
            await self.release.wait()
        if scope["path"] == "/stall":
            self.stalled.set()
            self.unstall.wait(BOUND)  # blocks the loop: nothing is accepted or read meanwhile
            self.after_stall()
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    def finish(self) -> None:
        """Let `/slow` answer."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self.release.set)


@contextlib.contextmanager
def serving(app: SlowApp) -> Iterator[int]:
    """uvicorn serving `app` behind the service middleware, on a guarded event loop in a
    thread of its own; yields the port."""
    with server_for(app) as (_server, port):
        yield port


@contextlib.contextmanager
def server_for(app: SlowApp) -> Iterator[tuple[uvicorn.Server, int]]:
    """As `serving`, yielding the server too; once it has stopped, the loop drains as the
    application's shutdown does (app.py)."""
    port = free_port()
    limits = Limits(
        max_head_bytes=MAX_HEAD,
        head_timeout=HEAD_TIMEOUT,
        request_timeout=30.0,
        max_connections=10,
        public_url=f"http://127.0.0.1:{port}",
    )
    wrapped = ServiceMiddleware(
        app, public_url=limits.public_url, max_body_bytes=1024, request_timeout=30.0
    )
    config = uvicorn.Config(
        wrapped,
        host="127.0.0.1",
        port=port,
        http="httptools",
        ws="none",
        lifespan="off",
        log_level="error",
    )
    server = uvicorn.Server(config)

    async def serve_then_drain() -> None:
        await server.serve()
        loop = asyncio.get_running_loop()
        assert isinstance(loop, GuardedLoop)
        await loop.drain()

    def run() -> None:
        with asyncio.Runner(loop_factory=lambda: GuardedLoop(limits)) as runner:
            runner.run(serve_then_drain())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=BOUND, what="the server to start")
    try:
        yield server, port
    finally:
        server.should_exit = True
        thread.join(BOUND)


@contextlib.contextmanager
def guard_says(prefix: str) -> Iterator[threading.Event]:
    """An event set once the guard logs a message starting with `prefix`."""
    said = threading.Event()

    class Listener(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith(prefix):
                said.set()

    logger = logging.getLogger("bankrail.http.connection_guard")
    listener = Listener(logging.WARNING)
    logger.addHandler(listener)
    try:
        yield said
    finally:
        logger.removeHandler(listener)


def read_answer(stream: BinaryIO) -> tuple[int, bytes]:
    """The status and body of the next answer on `stream`."""
    status = int(stream.readline().split()[1])
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, stream.read(length)


@contextlib.contextmanager
def connection(port: int) -> Iterator[tuple[socket.socket, BinaryIO]]:
    """A socket connected to `port`, and a buffered reader of it."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=BOUND) as sock,
        sock.makefile("rb") as stream,
    ):
        yield sock, stream


SLOW = b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"


def test_a_431_waits_for_the_answer_to_the_request_before_it() -> None:
    app = SlowApp()
    with serving(app) as port, connection(port) as (sock, stream), guard_says("431") as said:
        sock.sendall(SLOW)
        assert app.started.wait(BOUND)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * MAX_HEAD + b"\r\n\r\n")
        assert said.wait(BOUND)  # the guard has decided to answer 431
        app.finish()
        assert read_answer(stream) == (200, b"ok")
        status, body = read_answer(stream)
        assert status == 431, body
        assert stream.read() == b""  # then closed


def test_the_head_timeout_counts_from_the_answer_to_the_request_before() -> None:
    app = SlowApp()
    with serving(app) as port, connection(port) as (sock, stream):
        sock.sendall(SLOW)
        assert app.started.wait(BOUND)
        sock.sendall(b"GET / HTTP/1.1\r\n")  # the next head, begun while /slow is answered
        time.sleep(3 * HEAD_TIMEOUT)  # longer than the head timeout, while /slow runs
        app.finish()
        assert read_answer(stream) == (200, b"ok")
        answered = time.monotonic()
        status, body = read_answer(stream)
        assert status == 408, body
        assert time.monotonic() - answered >= HEAD_TIMEOUT * 0.9


def refused(port: int) -> bool:
    """Whether a connection to `port` is refused (the server has closed its socket)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=BOUND).close()
    except ConnectionRefusedError:
        return True
    return False


def test_a_request_that_arrives_after_the_server_began_to_stop_is_answered() -> None:
    # uvicorn's graceful shutdown closes every connection with no request under way; one
    # accepted whose request had not arrived yet would be reset.
    app = SlowApp()
    with server_for(app) as (server, port), connection(port) as (sock, stream):
        sock.sendall(SLOW)  # a request in flight keeps the server from finishing at once
        assert app.started.wait(BOUND)
        with connection(port) as (late, late_stream):
            wait_for(lambda: len(server.server_state.connections) == 1, timeout=BOUND)
            server.should_exit = True
            wait_for(lambda: refused(port), timeout=BOUND, what="the server to stop listening")
            late.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_answer(late_stream) == (200, b"ok")
        app.finish()
        assert read_answer(stream) == (200, b"ok")


def test_a_connection_waiting_in_the_backlog_when_the_server_stops_is_answered() -> None:
    # Closing a listening socket resets the connections in its backlog.
    app = SlowApp()
    with server_for(app) as (server, port), connection(port) as (sock, stream):

        def stop() -> None:
            # What uvicorn's shutdown does first, before the loop can accept anything more.
            for listening in server.servers:
                listening.close()
            server.should_exit = True

        app.after_stall = stop
        sock.sendall(b"GET /stall HTTP/1.1\r\nHost: x\r\n\r\n")
        assert app.stalled.wait(BOUND)
        # The loop is held: this connection completes its handshake in the kernel only.
        with connection(port) as (waiting, waiting_stream):
            waiting.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            app.unstall.set()
            assert read_answer(stream) == (200, b"ok")
            assert read_answer(waiting_stream) == (200, b"ok")
