"""The request log's capture and writer (DESIGN §11 "Debugging tools"; docs/api.md, "Request
log"; docs/operations.md, "Request log").

Every request a merchant's access token makes to a pipeline route (the v3 routes, their
unprefixed twins, the v1 payouts routes) is captured by `RequestLog.record`, which the
pipeline calls around the route, including the requests refused after authentication (400,
403, 404, 409, 422, 429) and the replays of a stored answer. `GET /v3/request-log` itself is not
captured: following the log would otherwise fill it.

Nothing of it runs in the request's transaction or makes the request wait: the request only
appends what it saw (the raw headers and bodies, in one `marshal` record) to a bounded
in-process buffer; every `interval` seconds, or as soon as `batch` entries wait, a background
task hands the buffer to the process's writer process (http/request_log_writer.py), which parses,
redacts (core/redaction.py) and writes it in one statement per batch on another core. When
the buffer is full the entry is dropped and counted (`bankrail_request_log_entries_dropped`);
what is buffered is written when the process stops. When the log is off (a retention of 0)
no `RequestLog` exists and the pipeline does nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import marshal
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import datetime

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from bankrail.core.clock import ServiceClock
from bankrail.core.metrics import REQUEST_LOG_DROPPED, REQUEST_LOG_WRITTEN
from bankrail.db.pool import Connection
from bankrail.http.auth import access_claims
from bankrail.http.request_log_writer import (
    BODY_LIMIT,
    NOT_STORED,
    WriterProcess,
    WriterSettings,
    object_ids,
    object_key,
)
from bankrail.http.responses import ReplayedResponse

__all__ = [
    "BODY_LIMIT",
    "BUFFER_BYTES",
    "CLAIMS",
    "NOT_LOGGED",
    "NOT_STORED",
    "RequestLog",
    "WriterSettings",
    "delete_request_log_before",
    "object_ids",
    "object_key",
]

log = logging.getLogger(__name__)

CLAIMS = "bankrail.claims"
"""The request scope's key under which the pipeline leaves the caller's access-token claims."""

NOT_LOGGED = frozenset(
    {
        "/v3/request-log",
        "/v3/webhook-listeners/{listener_id}/events",
        "/v3/webhook-listeners/{listener_id}/deliveries/{delivery_id}/answers",
    }
)
"""The declared paths whose requests are not captured: the debugging tools' own traffic
(reading the log, a `bankrail listen` stream and its answers) does not add to the log."""

BUFFER_BYTES = 64 * 1024 * 1024
"""The most bytes of captured entries (their records) the capture buffer holds at once (beside
its count of entries): past it an entry is dropped and counted, as when the buffer is full."""

FRAME_BYTES = 8 * 1024 * 1024
"""The most bytes of entries handed to the writer in one batch."""

CLOSE_SECONDS = 30.0
"""How long a stop waits for the writer to write what is buffered (a database that does not
answer must not hold the process up forever): past it, the rest is dropped and counted."""

_DELETE_BEFORE = (
    "DELETE FROM request_log WHERE id = ANY (ARRAY("
    " SELECT id FROM request_log WHERE created_at <= $1"
    " ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
)


def _kept(body: bytes | bytearray | memoryview) -> bytes | int:
    """`body` as the buffer keeps it: its bytes, or its size when it is over BODY_LIMIT."""
    return bytes(body) if len(body) <= BODY_LIMIT else len(body)


async def _rendered(request: Request, error: Exception) -> Response | None:
    """The answer the app's exception handlers give `error` (as Starlette would render it
    once it left the route), or None when no handler takes it."""
    try:
        handlers, by_status = request.scope["starlette.exception_handlers"]
    except KeyError:
        return None
    handler = by_status.get(error.status_code) if isinstance(error, HTTPException) else None
    if handler is None:
        handler = next((handlers[c] for c in type(error).__mro__ if c in handlers), None)
    if handler is None:
        return None
    response = handler(request, error)
    if inspect.isawaitable(response):
        response = await response
    return response if isinstance(response, Response) else None


class RequestLog:
    """The capture buffer of one process and its writer: `record` around each route, `start`
    once the database is ready, `close` on the way out (what is buffered is written)."""

    def __init__(
        self,
        writer: WriterSettings,
        clock: ServiceClock,
        *,
        capacity: int = 10_000,
        batch: int = 500,
        interval: float = 0.1,
        buffer_bytes: int = BUFFER_BYTES,
        close_seconds: float = CLOSE_SECONDS,
    ) -> None:
        self._writer = WriterProcess(writer)
        self._clock = clock
        self._capacity = capacity
        self._batch = batch
        self._interval = interval
        # Each entry as its request_log_writer.record.
        self._buffer: deque[bytes] = deque()
        self._buffer_bytes = buffer_bytes
        self._buffered_bytes = 0  # the bytes the buffer holds now
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._flushing = asyncio.Lock()
        self._in_flight = 0  # entries handed to the writer, not yet answered for
        self._close_seconds = close_seconds
        self._closing = False
        self._refusal_logged = False  # a capture's copy was refused and logged

    @property
    def writer_pid(self) -> int | None:
        """The process id of the writer process while it runs."""
        return self._writer.pid

    async def record(
        self, request: Request, handle: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """Run the route (`handle`) and capture its request and answer, the answer of an
        error it raised included (rendered by the app's handler, as it would have been);
        returns the route's answer unchanged. Never waits for the database."""
        started = time.perf_counter()
        try:
            response = await handle(request)
        except Exception as error:
            rendered = await _rendered(request, error)
            if rendered is None:
                await self._capture(request, started, 500, None)
                raise
            response = rendered
        await self._capture(request, started, response.status_code, response)
        return response

    async def _capture(
        self, request: Request, started: float, status: int, response: Response | None
    ) -> None:
        duration_ms = (time.perf_counter() - started) * 1000
        claims = request.scope.get(CLAIMS)
        if claims is None:
            if status != 403:
                return  # no access token, or not a valid one: no merchant to show it to
            # Refused by its authenticator (a token without the route's scope): whose it was.
            try:
                claims = access_claims(request, request.app.state.context)
            except Exception:
                return
        # Its values as they are, made into one string of bytes now, while they are in the
        # cache and before the request's objects are freed (a `record`, which the writer
        # process parses and redacts): holding the references until the batch went cost every
        # request after it more than the record does.
        scope = request.scope
        # The body as the route read it (none when it read none: a GET)
        sent = _kept(getattr(request, "_body", b""))
        answered = getattr(response, "body", None)  # a streamed answer has no body to keep
        answer = _kept(answered) if answered else None
        # Over the budget by its bodies alone: dropped before it is copied (a full buffer
        # is when copying large bodies for nothing would cost most).
        bodies = (len(sent) if type(sent) is bytes else 0) + (
            len(answer) if type(answer) is bytes else 0
        )
        if self._full(bodies):
            return
        try:
            entry = marshal.dumps(
                (
                    claims.merchant_id.bytes,
                    claims.client_id,
                    self._clock.now_us(),
                    request.method,
                    scope["path"],
                    int(status),  # marshal takes no subclass of int (an HTTPStatus)
                    duration_ms,
                    isinstance(response, ReplayedResponse),
                    scope["headers"],
                    sent,
                    response.raw_headers if response is not None else [],
                    answer,
                )
            )
        except ValueError:  # a value of a type no ASGI server gives (marshal refuses it)
            REQUEST_LOG_DROPPED.labels("error").inc()
            if not self._refusal_logged:  # once: a server that gave one would give many
                self._refusal_logged = True
                log.warning("a request-log entry of %s could not be captured", scope["path"])
            return
        if self._full(len(entry)):
            return
        self._buffered_bytes += len(entry)
        self._buffer.append(entry)
        if len(self._buffer) >= self._batch:
            self._wake.set()

    def _full(self, size: int) -> bool:
        """Whether one more entry of `size` bytes would pass the buffer's count or its byte
        budget; if so, it is counted as dropped (`full`), and the request does not wait."""
        if len(self._buffer) < self._capacity and self._buffered_bytes + size <= self._buffer_bytes:
            return False
        REQUEST_LOG_DROPPED.labels("full").inc()
        return True

    def start(self) -> None:
        """Start the background task that hands the buffer to the writer process."""
        self._task = asyncio.create_task(self._run(), name="request-log-writer")

    async def close(self) -> None:
        """Stop the writer once it has written everything buffered, waiting `close_seconds`
        at most: past it, what is not written is dropped and counted."""
        self._closing = True
        self._wake.set()
        try:
            async with asyncio.timeout(self._close_seconds):
                if self._task is not None:
                    await self._task  # its last turn writes what was buffered
                await self.flush()  # and this what came meanwhile
        except TimeoutError:
            lost = self._in_flight + len(self._buffer)
            REQUEST_LOG_DROPPED.labels("error").inc(lost)
            log.error(
                "the request-log writer did not write %d entries within %s s",
                lost,
                self._close_seconds,
            )
            await self._writer.close(wait=0)
        else:
            await self._writer.close()

    async def _run(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
            self._wake.clear()
            await self.flush()

    def _take(self) -> list[bytes]:
        """The next batch off the buffer: `batch` entries, or fewer holding FRAME_BYTES (one
        at least), so that no batch makes a frame of tens of megabytes at once."""
        taken = [self._buffer.popleft()]
        held = len(taken[0])
        while (
            self._buffer and len(taken) < self._batch and held + len(self._buffer[0]) <= FRAME_BYTES
        ):
            entry = self._buffer.popleft()
            held += len(entry)
            taken.append(entry)
        self._buffered_bytes -= held
        return taken

    async def flush(self) -> int:
        """Have the writer process write what is buffered now, one statement per batch, and
        wait for it; returns how many entries were written. An entry the database or the
        encoder refuses is kept without its bodies, and costs its batch nothing; a batch whose
        write fails otherwise (the database out of reach, the writer gone) is dropped, counted
        and logged."""
        written = 0
        async with self._flushing:
            while self._buffer:
                taken = self._take()
                # Counted as not written if a stop's time runs out meanwhile (`close`).
                self._in_flight = len(taken)
                try:
                    kept, refused = await self._writer.write(taken)
                except Exception:
                    self._in_flight = 0
                    REQUEST_LOG_DROPPED.labels("error").inc(len(taken))
                    log.exception("could not write %d request-log entries", len(taken))
                    continue
                self._in_flight = 0
                if refused:
                    REQUEST_LOG_DROPPED.labels("error").inc(refused)
                REQUEST_LOG_WRITTEN.inc(kept)
                written += kept
        return written


async def delete_request_log_before(conn: Connection, before: datetime, limit: int) -> int:
    """Delete up to `limit` request-log entries made at or before `before` (service time),
    oldest first, skipping rows another transaction holds; returns how many went."""
    status = await conn.execute(_DELETE_BEFORE, before, limit)
    return int(status.rpartition(" ")[2])
