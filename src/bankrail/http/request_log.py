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

import asyncpg
import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from bankrail.core.clock import ServiceClock
from bankrail.core.metrics import REQUEST_LOG_DROPPED, REQUEST_LOG_WRITTEN
from bankrail.core.redaction import redact, redact_headers, redact_json
from bankrail.db.pool import Connection
from bankrail.http.auth import access_claims
from bankrail.http.responses import ReplayedResponse
from bankrail.security.tokens import AccessClaims

__all__ = [
    "CLAIMS",
    "NOT_LOGGED",
    "RequestLog",
    "delete_request_log_before",
    "object_ids",
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

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

# One statement per batch; each column an array, every jsonb element parsed once.
_INSERT = (
    "INSERT INTO request_log (id, merchant_id, created_at, method, path, status, duration_ms,"
    " client_id, idempotency_key, replayed, request, response, object_ids)"
    " SELECT gen_random_uuid(), merchant_id, created_at, method, path, status, duration_ms,"
    " client_id, idempotency_key, replayed, request, response, object_ids::text[]"
    " FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::integer[],"
    " $6::double precision[], $7::text[], $8::text[], $9::boolean[], $10::jsonb[],"
    " $11::jsonb[], $12::text[])"
    " AS r(merchant_id, created_at, method, path, status, duration_ms, client_id,"
    " idempotency_key, replayed, request, response, object_ids)"
)
_COLUMNS = (
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
    request_body: bytes
    response_headers: list[tuple[bytes, bytes]]
    response_body: bytes | None


def object_ids(path: str, method: str, status: int, answer: Any) -> list[str]:
    """The ids an entry names: every UUID in its path (lower-cased), and the `id` of the
    object a successful POST's answer created."""
    found = [match.lower() for match in _UUID.findall(path)]
    if method == "POST" and 200 <= status < 300 and isinstance(answer, dict):
        created = answer.get("id")
        if isinstance(created, str) and created and created not in found:
            found.append(created.lower() if _UUID.fullmatch(created) else created)
    return found


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of the header `name` (lower-case, as ASGI names them)."""
    for sent, value in headers:
        if sent.lower() == name:
            return value
    return None


def _is_json(headers: list[tuple[bytes, bytes]]) -> bool:
    value = _header(headers, b"content-type")
    if value is None:
        return False
    media = value.partition(b";")[0].strip().lower()
    return media == b"application/json" or media.endswith(b"+json")


def _body(raw: bytes | None, headers: list[tuple[bytes, bytes]]) -> Any:
    """A body as the log keeps it: JSON as JSON, other text as a string, nothing as null;
    redacted."""
    if not raw:
        return None
    if _is_json(headers) and b"\\u0000" not in raw:  # PostgreSQL's jsonb holds no NUL
        try:
            return redact_json(raw)
        except orjson.JSONDecodeError:
            pass
    return redact(raw.decode("utf-8", "replace").replace("\x00", ""))


def _row(seen: _Seen) -> dict[str, Any]:
    """The entry as the table keeps it: parsed and redacted."""
    answer = _body(seen.response_body, seen.response_headers)
    key = _header(seen.request_headers, b"idempotency-key")
    return {
        "merchant_id": seen.claims.merchant_id,
        "created_at": seen.created_at,
        "method": seen.method,
        "path": seen.path,
        "status": seen.status,
        "duration_ms": round(seen.duration_ms, 3),
        "client_id": seen.claims.client_id,
        "idempotency_key": key.decode("latin-1") if key is not None else None,
        "replayed": seen.replayed,
        "request": {
            "headers": redact_headers(seen.request_headers),
            "body": _body(seen.request_body, seen.request_headers),
        },
        "response": {"headers": redact_headers(seen.response_headers), "body": answer},
        "object_ids": _array_literal(object_ids(seen.path, seen.method, seen.status, answer)),
    }


def _array_literal(items: list[str]) -> str:
    """`items` as a PostgreSQL text[] literal (`{"a","b"}`)."""
    quoted = (item.replace("\\", "\\\\").replace('"', '\\"') for item in items)
    return "{" + ",".join(f'"{item}"' for item in quoted) + "}"


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
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._capacity = capacity
        self._batch = batch
        self._interval = interval
        self._buffer: deque[_Seen] = deque()
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
        self._buffer.append(
            _Seen(
                claims=claims,
                created_at=self._clock.now(),
                method=request.method,
                path=scope["path"],
                status=status,
                duration_ms=duration_ms,
                replayed=isinstance(response, ReplayedResponse),
                request_headers=scope["headers"],
                # The body as the route read it (none when it read none: a GET)
                request_body=getattr(request, "_body", b""),
                response_headers=response.raw_headers if response is not None else [],
                # A streamed answer has no body to keep.
                response_body=bytes(body) if (body := getattr(response, "body", None)) else None,
            )
        )
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
        written. A batch whose write fails is dropped, counted and logged."""
        written = 0
        while self._buffer:
            batch = [self._buffer.popleft() for _ in range(min(self._batch, len(self._buffer)))]
            try:
                rows = [_row(seen) for seen in batch]
                columns = [[row[name] for row in rows] for name in _COLUMNS]
                async with self._pool.acquire() as conn:
                    await conn.execute(_INSERT, *columns)
            except Exception:
                REQUEST_LOG_DROPPED.labels("error").inc(len(batch))
                log.exception("could not write %d request-log entries", len(batch))
                continue
            REQUEST_LOG_WRITTEN.inc(len(batch))
            written += len(batch)
        return written


async def delete_request_log_before(conn: Connection, before: datetime, limit: int) -> int:
    """Delete up to `limit` request-log entries made at or before `before` (service time),
    oldest first, skipping rows another transaction holds; returns how many went."""
    status = await conn.execute(_DELETE_BEFORE, before, limit)
    return int(status.rpartition(" ")[2])
