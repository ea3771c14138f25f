"""The fast lane: the hottest operations answered without FastAPI's per-request machinery.

A signed `POST /v3/payouts` or a `GET /v3/payouts/{id}` spends more CPU in the framework
(routing, dependency resolution, validation wrappers, exception middleware) than in Bankrail.
The fast lane sits inside ServiceMiddleware (so trace ids, the body limit, the request
deadline and metrics apply as to any request) and in front of the router. For the routes it
knows, a handler runs the same checks the FastAPI route runs, through the same functions, and
answers the common, successful case itself.

Anything else is handed on, untouched, to the router: an unknown route, a request with
anything unusual (duplicate headers, another content type, a root path), and every request
that fails a check. The route then runs every check again and gives the answer it always
gave, so each error still comes from exactly one place. A handler hands a request on only
before it has changed anything, apart from charging the client's rate limit, which it marks
in the scope (security.auth.charge_rate_limit) so that the route does not charge it twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bankrail.context import AppContext
from bankrail.core.jsonbody import JSON_MEDIA_TYPE
from bankrail.web.middleware import replay

__all__ = ["FastAnswer", "FastLane", "FastRequest", "FastRoute", "HandOn", "route_of"]


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
        if scope["type"] != "http" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        for route in self.routes:
            params = route.match(method, path)
            if params is not None:
                await self._serve(route, params, scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _serve(
        self, route: FastRoute, params: list[str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        raw_headers: list[tuple[bytes, bytes]] = scope["headers"]
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in raw_headers}
        state = getattr(scope.get("app"), "state", None)
        context: AppContext | None = getattr(state, "context", None)
        if len(headers) != len(raw_headers) or context is None:
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
                "headers": [
                    (b"content-length", str(len(answer.body)).encode()),
                    (b"content-type", JSON_MEDIA_TYPE.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": answer.body})


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
