"""Limits on what a client may hold of a serving process before its request reaches the
application: the size of a request's head, the time to send it, and the number of open
connections.

uvicorn bounds none of these with the httptools parser: a head may grow without limit (llhttp
has none, and httptools gathers a header's pieces in memory), a connection that trickles its
head, or that sends nothing, is kept open for good, and `limit_concurrency` answers 503 in
plain text. So `bankrail serve` runs uvicorn on an event loop (uvicorn's documented `loop`
option, `guarded_event_loop` in _serve.py, a `GuardedLoop`) whose servers put a `ConnectionGuard` in
front of each connection's HTTP protocol. The guard is an `asyncio.Protocol` that sees the
bytes before the protocol does: it runs them through a parser of its own (httptools, with no
per-header callbacks, so it keeps nothing of them) to know where each request's head begins and
ends, and hands them on unchanged; what the protocol writes goes through `JoinedWrites`
(http/joined_writes.py), one write per iteration of the loop. It answers itself, with
problem+json and `Connection: close`:

- 431 when a head passes `max_head_bytes` (the request line and headers, up to and including
  the blank line after them), as soon as it does: the rest of it is read and dropped (a head
  that begins in the same read as the end of an earlier request is counted from the next
  read on, so it may pass the limit by up to one read);
- 408 when a head began but is not complete `head_timeout` seconds later (or after the
  answer to the requests before it on the connection, if that came later);
- 503 with `Retry-After` when the connection would be one more than `max_connections`: it
  never reaches the application.

It closes, without an answer, a connection that sends nothing for `head_timeout` seconds
while no request of it is being answered (uvicorn's keep-alive timeout, shorter by default,
usually does it first), and one whose body is still arriving after the application answered
and the request timeout passed. The time to send a body is otherwise the application's to
bound: http/middleware.py answers 408 when the request's deadline passes while the body is
still arriving.

The guard makes the connection's HTTP protocol only when the connection's first request head
is complete, and hands it the bytes so far then. So a server that stops (SIGTERM) closes only
connections that are idle between requests, never one whose first request is still arriving:
uvicorn's graceful shutdown closes every connection with no request under way, and would
otherwise reset a client whose request it had accepted but not yet read. The event loop that
puts guards in front of connections, and drains them when the server stops, is in
http/guarded_loop.py.

The guard writes an answer only when every request it handed on has been answered (the
service middleware tells it, through `request_finished_var`), so an answer never lands inside
another on a connection that pipelines; after it, it stops writing, reads and drops what the
client still sends for up to `LINGER_SECONDS` (a client that is still sending would otherwise
get a reset instead of the answer), then closes. Deadlines are checked by one timer per
process every `SWEEP_FRACTION` of the shortest one.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, cast

import httptools

from bankrail.core.problems import (
    HEADERS_TOO_LARGE,
    REQUEST_TIMEOUT,
    SERVICE_UNAVAILABLE,
    ProblemType,
)
from bankrail.core.tracing import trace_id_var
from bankrail.http.joined_writes import JoinedWrites
from bankrail.http.middleware import (
    TRACE_HEADER,
    new_trace_id,
    problem_answer,
    request_finished_var,
)

__all__ = ["ConnectionGuard", "Connections", "Limits"]

log = logging.getLogger(__name__)

# How long a connection that was answered by the guard is read (and what arrives dropped)
# before it is closed, when the client does not close it first.
LINGER_SECONDS = 2.0
# The deadlines are checked this often, as a fraction of the shortest of them.
SWEEP_FRACTION = 0.1
# While a server drains, how long a connection it accepted may take to begin its first request
# before the drain stops waiting for it.
FIRST_REQUEST_GRACE = 1.0

_END_OF_HEAD = b"\r\n\r\n"

# What a connection is waiting for.
_IDLE = 0  # the start of a request (none begun since the last one ended)
_HEAD = 1  # the rest of a request's head
_BODY = 2  # the rest of a request's body
_ANSWERED = 3  # nothing: the guard answered, or is about to, and the connection will close
_BROKEN = 4  # nothing: the bytes are not HTTP; the protocol answers 400 and closes


@dataclass(frozen=True)
class Limits:
    """What one serving process allows each connection, and how many of them."""

    max_head_bytes: int
    head_timeout: float
    request_timeout: float
    max_connections: int
    public_url: str


class Connections:
    """The guarded connections of one event loop, and the timer that checks their
    deadlines (running while there is any)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limits: Limits) -> None:
        self.loop = loop
        self.limits = limits
        self.open: set[ConnectionGuard] = set()
        self._interval = SWEEP_FRACTION * min(limits.head_timeout, limits.request_timeout)
        self._timer: asyncio.TimerHandle | None = None

    def add(self, guard: ConnectionGuard) -> bool:
        """Count `guard`'s connection; False when that makes one too many."""
        self.open.add(guard)
        if self._timer is None:
            self._timer = self.loop.call_later(self._interval, self._sweep)
        return len(self.open) <= self.limits.max_connections

    def discard(self, guard: ConnectionGuard) -> None:
        """Stop counting `guard`'s connection."""
        self.open.discard(guard)
        if not self.open and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _sweep(self) -> None:
        now = self.loop.time()
        for guard in list(self.open):
            guard.check(now)
        self._timer = self.loop.call_later(self._interval, self._sweep) if self.open else None


class ConnectionGuard(asyncio.Protocol):
    """Stands in front of one connection's HTTP protocol (made by `make_protocol`), enforcing
    `Limits` on it; see the module's description."""

    def __init__(self, make_protocol: Callable[[], asyncio.BaseProtocol], connections: Connections):
        self._make_protocol = make_protocol
        self._connections = connections
        self._limits = connections.limits
        self._loop = connections.loop
        self._protocol: Any = None  # the HTTP protocol, made when the first head is complete
        self._admitted = False  # False for a connection one over `max_connections`
        self._early: list[bytes] = []  # what arrived before the protocol was made
        self._transport: JoinedWrites | None = None  # what the guard and protocol write to
        self._parser = httptools.HttpRequestParser(self)
        # As uvicorn's protocol does, so that both parsers read the same bytes alike.
        self._parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self._context = contextvars.copy_context()
        self._state = _IDLE
        self._since = 0.0  # when the wait for what `_state` names began
        self._now = 0.0  # the time the bytes being parsed arrived
        self._head_bytes = 0  # bytes received of the head being read, where known
        self._tail = b""  # the last bytes received of the head being read
        self._begun = 0  # requests begun in the bytes being parsed
        self._heads = 0  # heads completed in the bytes being parsed
        self._handed_on = 0  # requests handed to the protocol
        self._answered = 0  # of those, answered by the application
        self._answer: bytes | None = None  # the guard's own answer, until written

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transport is no subclass of asyncio.Transport, but has its methods.
        self._transport = JoinedWrites(cast(asyncio.Transport, transport), self._loop)
        self._since = self._loop.time()
        self._admitted = self._connections.add(self)

    def data_received(self, data: bytes) -> None:
        state = self._state
        if state >= _ANSWERED:
            return  # dropped: the connection is closing
        self._now = now = self._loop.time()
        carried = self._head_bytes if state == _HEAD else -1
        self._begun = self._heads = 0
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # uvicorn's protocol drops the rest of these bytes too
        except httptools.HttpParserError:
            self._state, self._since = _BROKEN, now
            if self._admitted:
                self._hand_on(data)  # the protocol answers 400 and closes
            else:
                self._close()
            return
        limit = self._limits.max_head_bytes
        if (
            self._heads
            and (carried >= 0 or len(data) > limit)  # else no head in `data` can be too long
            and self._first_head_size(data, carried, state == _IDLE) > limit
        ):
            self._too_large()
            return
        if self._state == _HEAD:
            if not self._begun:
                self._head_bytes = carried + len(data)
            elif self._begun == 1 and state == _IDLE:
                self._head_bytes = len(data)
            else:
                self._head_bytes = 0  # began after a body in these bytes: counted from the next
            if self._head_bytes > limit:
                self._too_large()
                return
            self._tail = data[-3:]
        if not self._admitted:
            if self._heads:
                self._refuse()
            return
        self._handed_on += self._heads
        if self._protocol is None and not self._heads:
            self._early.append(data)  # the first head is still arriving
            return
        self._hand_on(data)

    def eof_received(self) -> bool | None:
        if self._protocol is None or self._state == _ANSWERED:
            return None  # close: no request was begun, or the guard answered
        result: bool | None = self._protocol.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        self._state = _ANSWERED
        if self._protocol is not None:
            self._protocol.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._protocol is not None:
            self._protocol.pause_writing()

    def resume_writing(self) -> None:
        if self._protocol is not None:
            self._protocol.resume_writing()

    # httptools callbacks (no per-header ones: the guard keeps nothing of a head)

    def on_message_begin(self) -> None:
        self._state, self._since = _HEAD, self._now
        self._begun += 1

    def on_headers_complete(self) -> None:
        self._state, self._since = _BODY, self._now
        self._heads += 1

    def on_message_complete(self) -> None:
        self._state, self._since = _IDLE, self._now

    # The deadlines

    def check(self, now: float) -> None:
        """Act on whichever deadline of the connection has passed at `now`."""
        state, waited = self._state, now - self._since
        limits = self._limits
        # Whether no request handed on is still being answered; one that the service
        # middleware never reported (a bug) is taken as answered once it surely would be.
        idle = (
            self._answered == self._handed_on
            or waited > limits.request_timeout + limits.head_timeout
        )
        if state == _HEAD:
            # Counted from when the requests before it were answered: until then the
            # protocol may not be reading it.
            if idle and waited > limits.head_timeout:
                detail = f"The request head did not arrive within {limits.head_timeout:g} s."
                self._answer_with(REQUEST_TIMEOUT, detail, {})
        elif state == _IDLE:
            if idle and waited > limits.head_timeout:
                self._close()
        elif state == _BODY:
            if idle and waited > limits.request_timeout:
                self._close()  # answered already, and the rest of the body is overdue
        elif self._answer is not None:
            if waited > limits.request_timeout + limits.head_timeout:
                self._close()  # a request handed on was never reported answered
        elif waited > (LINGER_SECONDS if state == _ANSWERED else limits.head_timeout):
            self._close()

    # Helpers

    def _first_head_size(self, data: bytes, carried: int, began_idle: bool) -> int:
        """The size of the first head completed in `data`, where it can be known: one that
        began in earlier bytes, or at the start of `data`; 0 otherwise."""
        if carried >= 0:
            edge = (self._tail + data[:3]).find(_END_OF_HEAD)
            if edge >= 0:
                return carried + edge + len(_END_OF_HEAD) - len(self._tail)
            return carried + data.find(_END_OF_HEAD) + len(_END_OF_HEAD)
        if began_idle:
            return data.find(_END_OF_HEAD) + len(_END_OF_HEAD)
        return 0

    def _hand_on(self, data: bytes) -> None:
        # In the guard's context, so that the requests the protocol starts report back.
        if self._protocol is None:
            self._context.run(request_finished_var.set, self._request_finished)
            self._protocol = self._make_protocol()
            self._context.run(self._protocol.connection_made, self._transport)
            if self._early:
                data = b"".join((*self._early, data))
                self._early.clear()
        self._context.run(self._protocol.data_received, data)

    def busy(self, now: float) -> bool:
        """Whether the connection has a request that is still arriving or not yet answered
        (or the guard's own answer not yet written) at `now`; one that has sent nothing yet
        counts as busy for `FIRST_REQUEST_GRACE` seconds after it was accepted."""
        if self._state == _ANSWERED:
            return self._answer is not None
        if self._state != _IDLE or self._answered < self._handed_on:
            return True
        return self._protocol is None and now - self._since < FIRST_REQUEST_GRACE

    def _request_finished(self) -> None:
        self._answered += 1
        if self._answered == self._handed_on:
            if self._answer is not None:
                self._write_answer()
            elif self._state in (_IDLE, _HEAD):
                self._since = self._loop.time()  # the wait for the next request starts now

    def _too_large(self) -> None:
        detail = f"The request line and headers exceed {self._limits.max_head_bytes} bytes."
        self._answer_with(HEADERS_TOO_LARGE, detail, {})

    def _refuse(self) -> None:
        detail = (
            f"The service has {self._limits.max_connections} connections open, as many as it "
            "accepts; retry shortly."
        )
        self._answer_with(SERVICE_UNAVAILABLE, detail, {"retry-after": "1"})

    def _answer_with(self, problem: ProblemType, detail: str, extra: dict[str, str]) -> None:
        """Answer with `problem` as soon as no request handed on is still being answered;
        then close the connection."""
        self._state, self._since = _ANSWERED, self._loop.time()
        trace_id = new_trace_id()
        token = trace_id_var.set(trace_id)
        try:
            headers, body = problem_answer(problem, detail, self._limits.public_url, extra)
        finally:
            trace_id_var.reset(token)
        headers += [(TRACE_HEADER, trace_id.encode()), (b"connection", b"close")]
        status = HTTPStatus(problem.status)
        lines = [f"HTTP/1.1 {status.value} {status.phrase}".encode()]
        lines += [name + b": " + value for name, value in headers]
        self._answer = b"\r\n".join(lines) + b"\r\n\r\n" + body
        log.warning("%d answered by the connection guard: %s", problem.status, detail)
        if self._answered == self._handed_on:
            self._write_answer()

    def _write_answer(self) -> None:
        transport, answer = self._transport, self._answer
        self._answer = None
        self._since = self._loop.time()  # lingers from now on
        if transport is None or answer is None or transport.is_closing():
            return
        transport.write(answer)
        if transport.can_write_eof():
            transport.write_eof()
        else:
            transport.close()

    def _close(self) -> None:
        self._state = _ANSWERED
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
