"""The fast lane: the hottest operations answered without FastAPI's per-request machinery.

It runs in one of two places. Under `bankrail serve`, the HTTP protocol itself
(web/http_protocol.py) asks `ServedFastLane` to answer before any ASGI application runs:
no uvicorn response cycle, proxy-headers, Starlette, metrics or service middleware per
request; `ServedFastLane` does their part for its answers itself (trace id, deadline, error
answers, metrics, access log) with their own functions. Anywhere else (the application
driven in-process), `FastLane` below does the same as ASGI middleware inside the service
middleware.

A signed `POST /v3/payouts` or a `GET /v3/payouts/{id}` spends more CPU in the framework
(routing, dependency resolution, validation wrappers, exception middleware) than in Bankrail.
As ASGI middleware, the fast lane sits inside ServiceMiddleware (so trace ids, the body
limit, the request deadline and metrics apply as to any request) and in front of the router.
For the routes it knows, a handler runs the same checks the FastAPI route runs, through the
same functions, and answers the common, successful case itself.

Anything else is handed on, untouched, to the router: an unknown route, a request with
anything unusual (duplicate headers, another content type, a root path), and every request
that fails a check. The route then runs every check again and gives the answer it always
gave, so each error still comes from exactly one place. A handler hands a request on only
before it has changed anything, apart from charging the client's rate limit, which it marks
in the scope (security.auth.charge_rate_limit) so that the route does not charge it twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bankrail.context import AppContext
from bankrail.core.jsonbody import JSON_MEDIA_TYPE
from bankrail.core.tracing import trace_id_var
from bankrail.web.metrics import observe_request
from bankrail.web.middleware import (
    DEADLINE_AT,
    TRACE_HEADER,
    RequestTimedOut,
    failure_problem,
    log_access,
    new_trace_id,
    problem_answer,
    replay,
)

__all__ = [
    "FastAnswer",
    "FastLane",
    "FastReply",
    "FastRequest",
    "FastRoute",
    "HandOn",
    "ServedFastLane",
    "route_of",
]

_HANDED_ON = "bankrail.handed_on"  # scope key: the served lane already tried this request
_JSON_CONTENT_TYPE = (b"content-type", JSON_MEDIA_TYPE.encode())


class HandOn(Exception):
    """Raised by a fast handler: the router answers this request (nothing was changed)."""


@dataclass
class FastRequest:
    """What a fast handler sees of a request."""

    scope: Scope
    context: AppContext
    headers: dict[str, str]
    """Lower-cased names; only requests without repeated header names reach a handler."""
    path_params: list[str]
    body: bytes = b""

    @property
    def method(self) -> str:
        """The HTTP method."""
        method: str = self.scope["method"]
        return method

    @property
    def raw_path(self) -> str:
        """The path exactly as sent (what a signature covers)."""
        raw: bytes | None = self.scope.get("raw_path")
        return raw.decode("latin-1") if raw else str(self.scope["path"])


@dataclass(frozen=True)
class FastAnswer:
    """A fast handler's answer: `body`, already JSON, with `status`."""

    status: int
    body: bytes


FastHandler = Callable[[FastRequest], Awaitable[FastAnswer]]


@dataclass(frozen=True)
class FastRoute:
    """One operation of the fast lane: `method` and a path of fixed segments and `{}`
    placeholders, each matching one non-empty segment; `route` is the router's route of the
    same operation (its template labels the request in metrics and logs)."""

    method: str
    pattern: str
    handler: FastHandler
    route: BaseRoute
    reads_body: bool = False
    _segments: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_segments", tuple(self.pattern.split("/")))

    @property
    def template(self) -> str:
        """The path template that labels this operation in metrics and logs."""
        return str(getattr(self.route, "path", self.pattern))

    def match(self, method: str, path: str) -> list[str] | None:
        """The placeholder values if this route takes the request, else None."""
        if method != self.method:
            return None
        parts = path.split("/")
        if len(parts) != len(self._segments):
            return None
        params: list[str] = []
        for part, expected in zip(parts, self._segments, strict=True):
            if expected == "{}":
                if not part:
                    return None
                params.append(part)
            elif part != expected:
                return None
        return params


class FastLane:
    """ASGI middleware that answers the common case of a few routes itself and hands
    everything else to the application it wraps."""

    def __init__(self, app: ASGIApp, *, routes: list[FastRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("root_path") or scope.get(_HANDED_ON):
            await self.app(scope, receive, send)
            return
        matched = match_route(self.routes, scope["method"], scope["path"])
        if matched is None:
            await self.app(scope, receive, send)
            return
        await self._serve(*matched, scope, receive, send)

    async def _serve(
        self, route: FastRoute, params: list[str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        headers = _unique_headers(scope)
        state = getattr(scope.get("app"), "state", None)
        context: AppContext | None = getattr(state, "context", None)
        if headers is None or context is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = route.route
        request = FastRequest(scope, context, headers, params)
        consumed: list[Message] = []
        if route.reads_body:
            request.body, consumed = await _read_body(receive)
            if consumed[-1]["type"] != "http.request":
                await self.app(scope, replay(consumed, receive), send)
                return
        try:
            answer = await route.handler(request)
        except HandOn:
            await self.app(scope, replay(consumed, receive), send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": answer.status,
                "headers": _json_headers(answer.body),
            }
        )
        await send({"type": "http.response.body", "body": answer.body})


def _unique_headers(scope: Scope) -> dict[str, str] | None:
    """The request's headers by lower-cased name; None when a name is repeated (a handler
    sees only requests without repeats)."""
    raw: list[tuple[bytes, bytes]] = scope["headers"]
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in raw}
    return headers if len(headers) == len(raw) else None


def _json_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    """The headers of a fast answer whose body is `body`, JSON."""
    return [(b"content-length", str(len(body)).encode()), _JSON_CONTENT_TYPE]


def match_route(
    routes: list[FastRoute], method: str, path: str
) -> tuple[FastRoute, list[str]] | None:
    """The first of `routes` that takes the request, with its placeholder values."""
    for route in routes:
        params = route.match(method, path)
        if params is not None:
            return route, params
    return None


@dataclass(frozen=True)
class FastReply:
    """A whole answer of the served lane: status, headers (content-length included), body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


BodyReader = Callable[[], Awaitable[bytes | None]]
"""Waits for the whole request body; None if the client went away first."""


class ServedFastLane:
    """The fast lane as the HTTP protocol serves it, ahead of the ASGI application.

    The protocol asks `take` whether a request is the lane's, then `answer` for the whole
    answer. None from `answer` means "hand it on": the application gets the request as
    sent (the body is left where the protocol holds it), and it is answered, traced and
    counted there; nothing was changed but the rate-limit mark (FastLane above).
    """

    def __init__(
        self,
        routes: list[FastRoute],
        context: AppContext,
        *,
        public_url: str,
        max_body_bytes: int,
        request_timeout: float,
        access_log: bool,
    ) -> None:
        self.routes = routes
        self.context = context
        self.public_url = public_url
        self.max_body_bytes = max_body_bytes
        self.request_timeout = request_timeout
        self.access_log = access_log

    def take(self, scope: Scope) -> tuple[FastRoute, list[str]] | None:
        """The route and placeholder values of a request this lane answers, else None.

        It takes only plain requests: no root path, no repeated header names, and a body
        (where the route reads one) announced by a Content-Length within the limit, with no
        `Expect: 100-continue`; anything else is the application's from the start."""
        if scope.get("root_path"):
            return None
        matched = match_route(self.routes, scope["method"], scope["path"])
        if matched is None:
            return None
        if matched[0].reads_body:
            length = None
            for name, value in scope["headers"]:
                if name == b"content-length":
                    if length is not None or not value.isdigit():
                        return None
                    length = int(value)
                elif name in (b"transfer-encoding", b"expect"):
                    return None
            if length is None or length > self.max_body_bytes:
                return None
        return matched

    async def answer(
        self, route: FastRoute, params: list[str], scope: Scope, read_body: BodyReader
    ) -> FastReply | None:
        """The whole answer to a request `take` accepted, committed where it changes
        anything; None to hand it on to the application."""
        headers = _unique_headers(scope)
        if headers is None:
            return None
        began = time.perf_counter()
        trace_id = new_trace_id()
        token = trace_id_var.set(trace_id)
        status = 0
        try:
            deadline = asyncio.timeout(self.request_timeout)
            try:
                async with deadline:
                    body = b""
                    if route.reads_body:
                        whole = await read_body()
                        if whole is None:
                            return None  # the application sees the disconnect
                        body = whole
                    scope["route"] = route.route
                    request = FastRequest(scope, self.context, headers, params, body)
                    try:
                        fast = await route.handler(request)
                    except HandOn:
                        scope[_HANDED_ON] = True
                        scope[DEADLINE_AT] = deadline.when()
                        return None
                reply = FastReply(fast.status, _json_headers(fast.body), fast.body)
            except Exception as exc:
                if isinstance(exc, TimeoutError) and deadline.expired():
                    exc = RequestTimedOut()
                problem, detail, extra = failure_problem(exc, scope, self.request_timeout)
                problem_headers, problem_body = problem_answer(
                    problem, detail, self.public_url, extra
                )
                reply = FastReply(problem.status, problem_headers, problem_body)
            reply.headers.append((TRACE_HEADER, trace_id.encode()))
            status = reply.status
            return reply
        finally:
            if status:
                observe_request(scope["method"], route.template, status, began)
                if self.access_log:
                    log_access(scope, status, began)
            trace_id_var.reset(token)


async def _read_body(receive: Receive) -> tuple[bytes, list[Message]]:
    """The whole request body and the messages it came in (the last one is not an
    `http.request` when the client went away first)."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks), messages


def route_of(routes: list[BaseRoute], endpoint: Callable[..., Any]) -> BaseRoute:
    """The application's route whose endpoint is `endpoint`."""
    for route in routes:
        if getattr(route, "endpoint", None) is endpoint:
            return route
    raise LookupError(f"no route serves {endpoint.__qualname__}")
