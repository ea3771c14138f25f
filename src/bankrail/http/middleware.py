"""The one ASGI middleware of an API process: trace ids, body-size limit, request deadline,
the last-resort error answer, metrics and the access record (docs/architecture.md, "The
request pipeline")."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bankrail.core.jsonbody import PROBLEM_MEDIA_TYPE, dumps
from bankrail.core.problems import (
    PAYLOAD_TOO_LARGE,
    REQUEST_TIMEOUT,
    SERVICE_UNAVAILABLE,
    UNKNOWN_ERROR,
    ProblemType,
    problem_title_var,
    problem_type_for_status,
)
from bankrail.core.tracing import trace_id_var
from bankrail.db.outage import is_database_outage
from bankrail.http.problems import problem_document

log = logging.getLogger(__name__)
access_log = logging.getLogger("bankrail.access")

TRACE_HEADER = b"svc-trace-id"

request_finished_var: ContextVar[Callable[[], None] | None] = ContextVar(
    "request_finished", default=None
)
"""Set by the connection guard (http/connection_guard.py) for the requests of a connection it
watches: called once a request has been answered, so that the guard knows when it may write
on the connection itself."""


class RequestTimedOut(Exception):
    """The request's deadline passed and it was cancelled."""


class RequestBodyTimedOut(Exception):
    """The request's deadline passed while its body was still being received."""


class _BodyTooLarge(Exception):
    pass


AccessLog = Callable[[Scope, int, float], None]
"""Writes the access record of a request: (scope, status, began), `began` as
time.perf_counter() when the request arrived."""


class ServiceMiddleware:
    """Adds `Svc-Trace-Id` to every response, caps request bodies, answers problem+json
    for anything that escapes the routes (503 when the database is unreachable), and hands
    each answered request, its own answers included, to `metrics` (http/metrics.py
    `observe`, or None) and to `access_log` (`log_access`, an `access_line`, or None).

    It is the only layer between the server and the routes that every request passes
    (app.py puts it outside the framework's own), so it is the one place these happen."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        public_url: str,
        max_body_bytes: int,
        request_timeout: float = 30.0,
        access_log: AccessLog | None = None,
        metrics: AccessLog | None = None,
    ) -> None:
        self.access_log = access_log
        self.metrics = metrics
        self.app = app
        self.public_url = public_url
        self.max_body_bytes = max_body_bytes
        self.request_timeout = request_timeout
        self.deadlines = Deadlines(request_timeout)

    # Long on purpose: the hot path of every request; helpers would add calls to each one.
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        trace_id, token = _begin_request()
        started = False
        status = 0
        began = time.perf_counter()

        async def send_with_trace(message: Message) -> None:
            nonlocal started, status
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), trace_header]}
            await send(message)

        trace_header = (TRACE_HEADER, trace_id.encode())
        try:
            declared = _content_length(scope)
            if declared is not None and declared > self.max_body_bytes:
                await self._problem(send_with_trace, PAYLOAD_TOO_LARGE, self._too_large())
                return
            body = _Body(receive, self.max_body_bytes)
            # The deadline covers receiving the body as well: a client that sends it too
            # slowly does not hold the request (nor its connection) past it.
            task = self.deadlines.enter()
            try:
                receive = body.receive
                if declared is None and _has_chunked_body(scope):
                    # Without a length, read the body here: an error raised from receive()
                    # inside the framework would be turned into a 400, not the 413 it is.
                    whole: Message = {
                        "type": "http.request",
                        "body": await _read_body(body.receive),
                        "more_body": False,
                    }
                    receive = replay([whole], body.receive)
                await self.app(scope, receive, send_with_trace)
            except asyncio.CancelledError as exc:
                if not self.deadlines.expired(task):
                    raise  # the server's own cancellation (a disconnect, a shutdown)
                if body.waited_out:
                    raise RequestBodyTimedOut from exc
                # The deadline cancelled the request: an open transaction was rolled back,
                # so nothing is half-done; a retry with the same Idempotency-Key is safe.
                raise RequestTimedOut from exc
            finally:
                self.deadlines.leave(task)
        except _BodyTooLarge:
            if not started:
                await self._problem(send_with_trace, PAYLOAD_TOO_LARGE, self._too_large())
        except Exception as exc:
            problem, detail, extra = failure_problem(exc, scope, self.request_timeout)
            if not started:
                await self._problem(send_with_trace, problem, detail, extra)
        finally:
            if self.metrics is not None:
                self.metrics(scope, status, began)
            if self.access_log is not None:
                self.access_log(scope, status, began)
            trace_id_var.reset(token)
            finished = request_finished_var.get()
            if finished is not None:
                finished()

    def _too_large(self) -> str:
        return f"The request body exceeds {self.max_body_bytes} bytes."

    async def _problem(
        self,
        send: Send,
        problem: ProblemType,
        detail: str,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        headers, body = problem_answer(problem, detail, self.public_url, extra_headers)
        await send({"type": "http.response.start", "status": problem.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class Deadlines:
    """The request deadline of the requests in flight on an event loop: each is cancelled
    once it has run `timeout` seconds (within a tenth of it, at most a second later).

    One timer, while any request is in flight, checks them all every `period`: a request
    costs two dictionary operations rather than a timer of its own (asyncio.timeout was a
    twentieth of a small request's CPU, docs/performance.md). It serves one event loop at a
    time (a process's server loop; in tests, each loop in turn)."""

    __slots__ = ("_due", "_expired", "_loop", "_timer", "period", "timeout")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.period = min(1.0, timeout / 10)
        self._due: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def enter(self) -> asyncio.Task[Any]:
        """Start the current task's deadline; returns the task, for `expired` and `leave`."""
        task = asyncio.current_task()
        assert task is not None, "a request runs in a task"
        loop = task.get_loop()
        if loop is not self._loop:  # a new loop: the old one's timer died with it
            self._loop, self._due, self._expired, self._timer = loop, {}, set(), None
        self._due[task] = loop.time() + self.timeout
        if self._timer is None:
            self._timer = loop.call_later(self.period, self._sweep)
        return task

    def expired(self, task: asyncio.Task[Any]) -> bool:
        """Whether `task` was cancelled by its deadline (it is then no longer cancelling: the
        request goes on to answer that)."""
        if task not in self._expired:
            return False
        self._expired.discard(task)
        task.uncancel()
        return True

    def leave(self, task: asyncio.Task[Any]) -> None:
        """The task's request is over: no deadline for it any more."""
        self._due.pop(task, None)
        if task in self._expired:  # cancelled, but the cancellation was swallowed
            self._expired.discard(task)
            task.uncancel()

    def _sweep(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        for task, due in list(self._due.items()):
            if due <= now:
                del self._due[task]
                self._expired.add(task)
                task.cancel()
        self._timer = self._loop.call_later(self.period, self._sweep) if self._due else None


class _Body:
    """A request's receive(): raises _BodyTooLarge as soon as the body passes `limit`, and
    notes whether the request was cancelled while it waited for more of the body."""

    __slots__ = ("_complete", "_limit", "_receive", "_seen", "waited_out")

    def __init__(self, receive: Receive, limit: int) -> None:
        self._receive = receive
        self._limit = limit
        self._seen = 0
        self._complete = False
        self.waited_out = False

    async def receive(self) -> Message:
        """The next message of the request."""
        try:
            message = await self._receive()
        except asyncio.CancelledError:
            # A wait for the end of the body, not for a disconnect after it.
            self.waited_out = not self._complete
            raise
        if message["type"] == "http.request":
            self._seen += len(message.get("body", b""))
            if self._seen > self._limit:
                raise _BodyTooLarge
            self._complete = not message.get("more_body", False)
        return message


async def _read_body(receive: Receive) -> bytes:
    """The whole body (`receive` raises _BodyTooLarge as soon as it passes the limit)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _begin_request() -> tuple[str, Token[str]]:
    """A new trace id, set as the current one (with the token that resets it), and no
    problem title yet: the request's own, whatever ran before in its context (the connection
    guard answers some requests itself)."""
    trace_id = new_trace_id()
    problem_title_var.set(None)
    return trace_id, trace_id_var.set(trace_id)


_RANDOM = bytearray()  # os.urandom read ahead, 16 bytes per trace id


def new_trace_id() -> str:
    """A fresh trace id: 32 hex digits, unique per request (from os.urandom, read 4 KiB
    at a time: one system call per 256 requests rather than one each)."""
    if not _RANDOM:
        _RANDOM.extend(os.urandom(4096))
    trace_id = _RANDOM[-16:].hex()
    del _RANDOM[-16:]
    return trace_id


# A forked child must not hand out the trace ids its parent has read ahead.
os.register_at_fork(after_in_child=_RANDOM.clear)


def failure_problem(
    exc: Exception, scope: Scope, request_timeout: float
) -> tuple[ProblemType, str, dict[str, str]]:
    """The problem a request is answered with when handling it raised `exc` (logged here):
    408 when the deadline passed while the body was still arriving, 503 with Retry-After when
    it passed otherwise or the database is unreachable (nothing half-done: a retry with the
    same Idempotency-Key is safe), else 500."""
    method, path = scope["method"], scope["path"]
    if isinstance(exc, RequestBodyTimedOut):
        # Nothing was done: the request was still waiting for its body. The connection is
        # closed after the answer, since the rest of the body may still be on its way.
        log.warning("request body not received in time: %s %s", method, path)
        detail = f"The request body did not arrive within {request_timeout:g} s."
        return REQUEST_TIMEOUT, detail, {"connection": "close"}
    if isinstance(exc, RequestTimedOut):
        log.warning("request timed out: %s %s", method, path)
        detail = (
            f"The request did not complete within {request_timeout:g} s and was "
            "abandoned; retry it with the same Idempotency-Key."
        )
        return SERVICE_UNAVAILABLE, detail, {"retry-after": "1"}
    if is_database_outage(exc):
        log.warning("database unavailable for %s %s", method, path)
        detail = "The database is unreachable; retry shortly."
        return SERVICE_UNAVAILABLE, detail, {"retry-after": "1"}
    log.error("unhandled error on %s %s", method, path, exc_info=exc)
    return UNKNOWN_ERROR, "An unexpected error occurred.", {}


def problem_answer(
    problem: ProblemType, detail: str, public_url: str, extra_headers: dict[str, str] | None
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The headers and body of a problem+json answer."""
    body = dumps(problem_document(problem, detail, public_url))
    headers = [
        (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    headers += [(k.encode(), v.encode()) for k, v in (extra_headers or {}).items()]
    return headers, body


def log_access(scope: Scope, status: int, began: float) -> None:
    """One access-log line for a request answered with `status`, begun at `began`
    (time.perf_counter)."""
    access_log.info(
        "%s %s %s",
        scope["method"],
        scope["path"],
        status,
        extra={
            "method": scope["method"],
            "path": scope["path"],  # never the query string: it may hold tokens
            "status": status,
            "duration_ms": round((time.perf_counter() - began) * 1000, 2),
        },
    )


def access_line(write: Callable[[str], None]) -> AccessLog:
    """The sandbox's access record of a request: one line handed to `write`, with method,
    path, status, milliseconds and, for a 4xx or 5xx, the title of the problem it was
    answered with (as its renderer, or the batch that decided or replayed it, noted it; the
    catalogue's title for the status when none was noted)."""

    def log_access_line(scope: Scope, status: int, began: float) -> None:
        ms = (time.perf_counter() - began) * 1000
        if status < 400:
            write(f"{scope['method']} {scope['path']} {status} {ms:.1f} ms")
            return
        title = problem_title_var.get() or problem_type_for_status(status).title
        write(f"{scope['method']} {scope['path']} {status} {ms:.1f} ms {title}")

    return log_access_line


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _has_chunked_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"transfer-encoding" and b"chunked" in value.lower():
            return True
    return False


def replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive() that gives back `messages` (already read) in order, then defers to the
    real one."""
    pending = list(messages)

    async def replaying() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replaying
