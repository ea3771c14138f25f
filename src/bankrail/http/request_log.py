"""The request log's capture and writer (DESIGN §11 "Debugging tools"; docs/api.md, "Request
log"; docs/operations.md, "Request log").

Every request a merchant's access token makes to a pipeline route (the v3 routes, their
unprefixed twins, the v1 payouts routes) is captured by `RequestLog.record`, which the
pipeline calls around the route, including the requests refused after authentication (400,
403, 404, 409, 422, 429) and the replays of a stored answer. `GET /v3/request-log` itself is not
captured: following the log would otherwise fill it.

Nothing of it runs in the request's transaction or makes the request wait: the request only
appends what it saw (the raw headers and bodies, as references) to a bounded in-process
buffer; a background task parses, redacts (core/redaction.py) and writes the buffer in one
statement per batch, every `interval` seconds or as soon as `batch` entries wait. When the
buffer is full the entry is dropped and counted (`bankrail_request_log_entries_dropped`);
what is buffered is written when the process stops. When the log is off (a retention of 0)
no `RequestLog` exists and the pipeline does nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl

import asyncpg
import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from bankrail.core.clock import ServiceClock
from bankrail.core.ids import new_id
from bankrail.core.metrics import REQUEST_LOG_DROPPED, REQUEST_LOG_WRITTEN
from bankrail.core.redaction import MASKED, redact, redact_headers, redact_json, redact_value
from bankrail.db.pool import Connection
from bankrail.http.auth import access_claims
from bankrail.http.responses import ReplayedResponse
from bankrail.security.tokens import AccessClaims

__all__ = [
    "BODY_LIMIT",
    "BUFFER_BYTES",
    "CLAIMS",
    "NOT_LOGGED",
    "NOT_STORED",
    "RequestLog",
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

BODY_LIMIT = 256 * 1024
"""The largest body (bytes) an entry keeps; a larger one is kept as a note of its size, so
that neither the buffer nor the table holds megabytes per request."""

BUFFER_BYTES = 64 * 1024 * 1024
"""The most bytes of bodies and request headers the capture buffer holds at once (beside its
count of entries): past it an entry is dropped and counted, as when the buffer is full."""

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

# One COPY per batch, in the binary format (db/pool.py gives json its binary codec): PostgreSQL
# parses no arrays and no statement, which an INSERT ... unnest(...) of the same rows made it do.
_COLUMNS = (
    "id",
    "merchant_id",
    "created_at",
    "method",
    "path",
    "status",
    "duration_ms",
    "client_id",
    "idempotency_key",
    "replayed",
    "request",
    "response",
    "object_ids",
)
_DELETE_BEFORE = (
    "DELETE FROM request_log WHERE id = ANY (ARRAY("
    " SELECT id FROM request_log WHERE created_at <= $1"
    " ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
)


@dataclass(slots=True)
class _Seen:
    """One request as the pipeline saw it, unparsed: what the request pays for."""

    claims: AccessClaims
    created_at: datetime
    method: str
    path: str
    status: int
    duration_ms: float
    replayed: bool
    request_headers: list[tuple[bytes, bytes]]
    # The body, or its size in bytes when it is over BODY_LIMIT (not kept).
    request_body: bytes | int
    response_headers: list[tuple[bytes, bytes]]
    response_body: bytes | int | None

    def size(self) -> int:
        """The bytes of the client's this entry holds in the buffer: the bodies and the
        request's headers (the answer's are Bankrail's own, a few)."""
        sizes = (self.request_body, self.response_body)
        held = sum(len(body) for body in sizes if isinstance(body, bytes))
        return held + sum(len(name) + len(value) for name, value in self.request_headers)


def object_key(object_id: str) -> str:
    """How the log keeps and looks up an object's id: a UUID lower-cased (`ABC…` and `abc…`
    are the same UUID), any other id as it is."""
    return object_id.lower() if _UUID.fullmatch(object_id) else object_id


def object_ids(path: str, method: str, status: int, answer: Any) -> list[str]:
    """The ids an entry names (each as `object_key` keeps it): every UUID in its path, and
    the `id` of the object a successful POST's answer created."""
    found = [match.lower() for match in _UUID.findall(path)]
    if method == "POST" and 200 <= status < 300 and isinstance(answer, dict):
        created = answer.get("id")
        if isinstance(created, str) and created:
            key = object_key(created)
            if key not in found:
                found.append(key)
    return found


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of the header `name` (lower-case, as ASGI names them)."""
    for sent, value in headers:
        if sent.lower() == name:
            return value
    return None


def _media(headers: list[tuple[bytes, bytes]]) -> bytes:
    """The body's media type, lower-case, without parameters (b"" when not said)."""
    value = _header(headers, b"content-type")
    return b"" if value is None else value.partition(b";")[0].strip().lower()


def _is_json(media: bytes) -> bool:
    return media == b"application/json" or media.endswith(b"+json")


def _without_nul(value: Any) -> Any:
    """`value` with every NUL character taken out of its texts (PostgreSQL's jsonb holds
    none)."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value


def _form(raw: bytes) -> str:
    """A form body (`a=1&b=2`) with the rule applied to each field by its name."""
    pairs = parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)
    return "&".join(f"{name}={redact_value({name: value})[name]}" for name, value in pairs)


def _body(raw: bytes | int | None, headers: list[tuple[bytes, bytes]], *, sent: bool) -> Any:
    """A body as the log keeps it, redacted: JSON as JSON, a form by its fields, other text as
    a string, nothing as null, one over BODY_LIMIT as a note of its size.

    The rule goes by field names, so a body the client `sent` is read as JSON whatever its
    Content-Type said (a JSON document sent as text/plain has its names masked too), and one
    that is neither JSON with names nor a form (free text, a bare JSON string) is not kept:
    it may hold anything, a name or an IBAN included, under no name the rule knows. An
    answer is Bankrail's own: its text is kept (credentials redacted)."""
    if raw is None or raw == b"":
        return None
    if isinstance(raw, int):
        return f"[not kept: {raw} bytes, over the {BODY_LIMIT}-byte limit]"
    media = _media(headers)
    if sent or _is_json(media):
        try:
            value = redact_json(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            if not (sent and isinstance(value, str)):
                return _without_nul(value) if b"\\u0000" in raw else value
    if media == b"application/x-www-form-urlencoded":
        return _without_nul(_form(raw))
    if sent:
        return f"{MASKED} {len(raw)} bytes, not JSON: not kept"
    return redact(raw.decode("utf-8", "replace").replace("\x00", ""))


def _kept(body: bytes | bytearray | memoryview) -> bytes | int:
    """`body` as the buffer keeps it: its bytes, or its size when it is over BODY_LIMIT."""
    return bytes(body) if len(body) <= BODY_LIMIT else len(body)


_LISTING = b'{"items":'


def _answer(seen: _Seen) -> Any:
    """The answer as the log keeps it: a successful listing as its items' ids and its
    pagination, since each item can be read again by id (walking fifty documents to redact
    them was half of a page's cost, and storing them tripled PostgreSQL's); any other answer
    whole, redacted."""
    raw = seen.response_body
    if (
        isinstance(raw, bytes)
        and seen.method == "GET"
        and 200 <= seen.status < 300
        and raw.startswith(_LISTING)
    ):
        try:
            page = orjson.loads(raw)
        except orjson.JSONDecodeError:
            page = None
        if isinstance(page, dict) and isinstance(page.get("items"), list):
            kept: dict[str, Any] = {
                "items": [
                    redact_value({"id": item.get("id")}) if isinstance(item, dict) else None
                    for item in page["items"]
                ]
            }
            if "pagination" in page:
                kept["pagination"] = redact_value(page["pagination"])
            return kept
    return _body(raw, seen.response_headers, sent=False)


NOT_STORED = "[not kept: the log could not store this body]"
"""What an entry keeps of a body PostgreSQL or the JSON encoder refused (nested past their
limits, say), so that the rest of the entry, and the rest of its batch, are kept."""


def _row(seen: _Seen, *, bodies: bool = True) -> tuple[Any, ...]:
    """The entry as the table keeps it (`_COLUMNS`, in order): parsed and redacted; its
    bodies as `NOT_STORED` when not `bodies`."""
    answer = _answer(seen) if bodies else NOT_STORED
    key = _header(seen.request_headers, b"idempotency-key")
    # PostgreSQL's text holds no NUL; a client may send one in the path (`%00`).
    path = seen.path.replace("\x00", "") if "\x00" in seen.path else seen.path
    return (
        new_id(),  # time-ordered: a batch's ids land together at the end of the index
        seen.claims.merchant_id,
        seen.created_at,
        seen.method,
        path,
        seen.status,
        round(seen.duration_ms, 3),
        seen.claims.client_id,
        key.decode("latin-1").replace("\x00", "") if key is not None else None,
        seen.replayed,
        {
            "headers": redact_headers(seen.request_headers),
            "body": _body(seen.request_body, seen.request_headers, sent=True)
            if bodies
            else NOT_STORED,
        },
        {"headers": redact_headers(seen.response_headers), "body": answer},
        object_ids(path, seen.method, seen.status, answer),
    )


def _entry(seen: _Seen) -> tuple[Any, ...]:
    """The entry's row; without its bodies when they cannot be redacted (a body nested past
    the redaction's recursion limit)."""
    try:
        return _row(seen)
    except RecursionError:
        return _row(seen, bodies=False)


# What one entry's own content makes a write fail with: PostgreSQL refusing a value (a
# data exception), or the JSON encoder refusing one (nested past its limit).
_ENTRY_ERRORS = (asyncpg.exceptions.DataError, TypeError, ValueError)


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
    once the pool is open, `close` before it closes (what is buffered is written)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        clock: ServiceClock,
        *,
        capacity: int = 10_000,
        batch: int = 500,
        interval: float = 0.1,
        buffer_bytes: int = BUFFER_BYTES,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._capacity = capacity
        self._batch = batch
        self._interval = interval
        self._buffer: deque[_Seen] = deque()
        self._buffer_bytes = buffer_bytes
        self._buffered_bytes = 0  # the bytes the buffer holds now (`_Seen.size`)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

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
        if len(self._buffer) >= self._capacity:
            REQUEST_LOG_DROPPED.labels("full").inc()
            return
        # References only: what the route read and answered is parsed and redacted later.
        scope = request.scope
        # A streamed answer has no body to keep.
        answered = getattr(response, "body", None)
        seen = _Seen(
            claims=claims,
            created_at=self._clock.now(),
            method=request.method,
            path=scope["path"],
            status=status,
            duration_ms=duration_ms,
            replayed=isinstance(response, ReplayedResponse),
            request_headers=scope["headers"],
            # The body as the route read it (none when it read none: a GET)
            request_body=_kept(getattr(request, "_body", b"")),
            response_headers=response.raw_headers if response is not None else [],
            response_body=_kept(answered) if answered else None,
        )
        size = seen.size()
        if self._buffered_bytes + size > self._buffer_bytes:
            REQUEST_LOG_DROPPED.labels("full").inc()
            return
        self._buffered_bytes += size
        self._buffer.append(seen)
        if len(self._buffer) >= self._batch:
            self._wake.set()

    def start(self) -> None:
        """Start the background writer."""
        self._task = asyncio.create_task(self._run(), name="request-log-writer")

    async def close(self) -> None:
        """Stop the writer once it has written everything buffered."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()

    async def _run(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
            self._wake.clear()
            await self.flush()

    async def flush(self) -> int:
        """Write what is buffered now, one statement per batch; returns how many entries were
        written. An entry the database or the encoder refuses is kept without its bodies, and
        costs its batch nothing; a batch whose write fails otherwise (the database out of
        reach) is dropped, counted and logged."""
        written = 0
        while self._buffer:
            batch = [self._buffer.popleft() for _ in range(min(self._batch, len(self._buffer)))]
            self._buffered_bytes -= sum(seen.size() for seen in batch)
            try:
                rows = []
                for n, seen in enumerate(batch, 1):
                    rows.append(_entry(seen))
                    if n % 50 == 0:
                        await asyncio.sleep(0)  # the requests of the loop go on meanwhile
                kept = await self._write(batch, rows)
            except Exception:
                REQUEST_LOG_DROPPED.labels("error").inc(len(batch))
                log.exception("could not write %d request-log entries", len(batch))
                continue
            if kept < len(batch):
                REQUEST_LOG_DROPPED.labels("error").inc(len(batch) - kept)
            REQUEST_LOG_WRITTEN.inc(kept)
            written += kept
        return written

    async def _write(self, batch: list[_Seen], rows: list[tuple[Any, ...]]) -> int:
        """Write the batch's rows in one COPY; when an entry's content makes it fail, entry by
        entry, one refused again kept without its bodies. Returns how many were written."""
        async with self._pool.acquire() as conn:
            try:
                await conn.copy_records_to_table("request_log", records=rows, columns=_COLUMNS)
                return len(rows)
            except _ENTRY_ERRORS:
                log.warning("a request-log batch was refused: writing its entries one by one")
            kept = 0
            for seen, row in zip(batch, rows, strict=True):
                for attempt in (row, _row(seen, bodies=False)):
                    try:
                        await conn.copy_records_to_table(
                            "request_log", records=[attempt], columns=_COLUMNS
                        )
                    except _ENTRY_ERRORS:
                        continue
                    kept += 1
                    break
            return kept


async def delete_request_log_before(conn: Connection, before: datetime, limit: int) -> int:
    """Delete up to `limit` request-log entries made at or before `before` (service time),
    oldest first, skipping rows another transaction holds; returns how many went."""
    status = await conn.execute(_DELETE_BEFORE, before, limit)
    return int(status.rpartition(" ")[2])
