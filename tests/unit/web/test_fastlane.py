"""The fast lane's dispatch (`web/fastlane.py`): as plain ASGI, which requests a fast handler
sees, what it answers, and that a request handed on reaches the router whole, body included;
as the HTTP protocol serves it (`ServedFastLane`), which requests it takes and the whole
answer it gives, errors included. (Its answers are held to the router's over HTTP in
tests/e2e/test_fast_lane_http.py, and the protocol's side in
tests/e2e/test_served_fast_lane_http.py.)"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest
from asyncpg.exceptions import CannotConnectNowError
from starlette.types import Message, Receive, Scope, Send

from bankrail.core.problems import SERVICE_UNAVAILABLE, UNKNOWN_ERROR
from bankrail.core.tracing import trace_id_var
from bankrail.web.fastlane import (
    FastAnswer,
    FastLane,
    FastReply,
    FastRequest,
    FastRoute,
    HandOn,
    ServedFastLane,
)
from bankrail.web.middleware import ServiceMiddleware

CONTEXT = object()
ROUTE = SimpleNamespace(path="/v3/things/{thing_id}")


class Router:
    """The application behind the fast lane: records what reached it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Scope, list[Message]]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        received = [await receive()]
        while received[-1]["type"] == "http.request" and received[-1].get("more_body"):
            received.append(await receive())
        self.calls.append((scope, received))
        await send({"type": "http.response.start", "status": 418, "headers": []})
        await send({"type": "http.response.body", "body": b"router"})


class Handler:
    """A fast handler that answers, or hands on when told to."""

    def __init__(self, hand_on: bool = False) -> None:
        self.hand_on = hand_on
        self.seen: list[FastRequest] = []

    async def __call__(self, request: FastRequest) -> FastAnswer:
        self.seen.append(request)
        if self.hand_on:
            raise HandOn
        return FastAnswer(201, b'{"ok":true}')


def _lane(handler: Handler, router: Router, *, reads_body: bool = True) -> FastLane:
    route = FastRoute("POST", "/v3/things/{}", handler, ROUTE, reads_body=reads_body)  # type: ignore[arg-type]
    return FastLane(router, routes=[route])


def _scope(
    path: str = "/v3/things/abc",
    method: str = "POST",
    headers: list[tuple[bytes, bytes]] | None = None,
    **extra: Any,
) -> Scope:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "headers": headers if headers is not None else [(b"content-type", b"application/json")],
        "app": SimpleNamespace(state=SimpleNamespace(context=CONTEXT)),
        **extra,
    }


def _run(lane: FastLane, scope: Scope, messages: list[Message]) -> list[Message]:
    pending = list(messages)
    sent: list[Message] = []

    async def receive() -> Message:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(lane(scope, receive, send))
    return sent


CHUNKED = [
    {"type": "http.request", "body": b'{"a":', "more_body": True},
    {"type": "http.request", "body": b"1}", "more_body": False},
]


def test_a_matching_request_is_answered_by_its_handler_with_the_whole_body() -> None:
    handler, router = Handler(), Router()
    scope = _scope()
    sent = _run(_lane(handler, router), scope, CHUNKED)
    assert router.calls == []
    request = handler.seen[0]
    assert request.body == b'{"a":1}'
    assert request.path_params == ["abc"]
    assert request.headers == {"content-type": "application/json"}
    assert request.context is CONTEXT
    assert scope["route"] is ROUTE  # metrics and logs label it with the router's template
    assert sent[0] == {
        "type": "http.response.start",
        "status": 201,
        "headers": [(b"content-length", b"11"), (b"content-type", b"application/json")],
    }
    assert sent[1] == {"type": "http.response.body", "body": b'{"ok":true}'}


def test_a_request_handed_on_reaches_the_router_with_its_body_intact() -> None:
    handler, router = Handler(hand_on=True), Router()
    sent = _run(_lane(handler, router), _scope(), CHUNKED)
    assert len(handler.seen) == 1
    [(_, received)] = router.calls
    assert received == CHUNKED
    assert sent[0]["status"] == 418


@pytest.mark.parametrize(
    "scope",
    [
        _scope(path="/v3/things"),
        _scope(path="/v3/things/"),
        _scope(path="/v3/things/abc/more"),
        _scope(path="/v3/others/abc"),
        _scope(method="GET"),
        _scope(root_path="/mounted"),
        _scope(headers=[(b"idempotency-key", b"a"), (b"idempotency-key", b"b")]),
        _scope(app=SimpleNamespace(state=SimpleNamespace())),  # not started: no context
        {k: v for k, v in _scope().items() if k != "app"},  # mounted without an application
        {"type": "websocket", "path": "/v3/things/abc", "headers": []},
    ],
    ids=[
        "shorter path",
        "empty segment",
        "longer path",
        "other path",
        "other method",
        "root path",
        "repeated header",
        "no context",
        "no application",
        "websocket",
    ],
)
def test_anything_else_goes_to_the_router_untouched(scope: Scope) -> None:
    handler, router = Handler(), Router()
    _run(_lane(handler, router), scope, CHUNKED)
    assert handler.seen == []
    [(reached, received)] = router.calls
    assert reached is scope
    assert received == CHUNKED


def test_a_request_the_served_lane_handed_on_is_not_tried_again() -> None:
    handler, router = Handler(), Router()
    scope = _scope()
    served = _served(Handler(hand_on=True))
    assert asyncio.run(served.answer(served.routes[0], ["abc"], scope, _body(b"{}"))) is None
    _run(_lane(handler, router), scope, CHUNKED)
    assert handler.seen == []  # a signature is not verified twice
    assert router.calls[0][0] is scope


def test_a_client_gone_before_its_body_arrived_goes_to_the_router() -> None:
    handler, router = Handler(), Router()
    messages: list[Message] = [
        {"type": "http.request", "body": b'{"a":', "more_body": True},
        {"type": "http.disconnect"},
    ]
    _run(_lane(handler, router), _scope(), messages)
    assert handler.seen == []
    assert router.calls[0][1] == messages


def test_a_handler_that_reads_no_body_leaves_it_to_the_router() -> None:
    handler, router = Handler(hand_on=True), Router()
    _run(_lane(handler, router, reads_body=False), _scope(), CHUNKED)
    assert handler.seen[0].body == b""
    assert router.calls[0][1] == CHUNKED


# --- as the HTTP protocol serves it ------------------------------------------------------------


class Failing:
    """A fast handler that raises `error`, or sleeps past any deadline."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error

    async def __call__(self, request: FastRequest) -> FastAnswer:
        if self.error is None:
            await asyncio.sleep(60)
        raise self.error or AssertionError


def _served(handler: Any, timeout: float = 5.0) -> ServedFastLane:
    route = FastRoute("POST", "/v3/things/{}", handler, ROUTE, reads_body=True)  # type: ignore[arg-type]
    return ServedFastLane(
        [route],
        CONTEXT,  # type: ignore[arg-type]
        public_url="https://bankrail.test",
        max_body_bytes=100,
        request_timeout=timeout,
        access_log=False,
    )


def _body(body: bytes | None) -> Any:
    async def read() -> bytes | None:
        return body

    return read


def _answer(lane: ServedFastLane, scope: Scope, body: bytes | None = b"{}") -> FastReply | None:
    taken = lane.take(scope)
    assert taken is not None
    return asyncio.run(lane.answer(*taken, scope, _body(body)))


def _headers(reply: FastReply) -> dict[bytes, bytes]:
    names = [name for name, _ in reply.headers]
    assert len(names) == len(set(names))
    return dict(reply.headers)


SIZED = [(b"content-type", b"application/json"), (b"content-length", b"2")]


def test_the_served_lane_answers_whole_with_a_trace_id() -> None:
    handler = Handler()
    reply = _answer(_served(handler), _scope(headers=SIZED))
    assert reply is not None
    assert (reply.status, reply.body) == (201, b'{"ok":true}')
    headers = _headers(reply)
    assert headers[b"content-length"] == b"11"
    assert headers[b"content-type"] == b"application/json"
    assert len(headers[b"svc-trace-id"]) == 32
    assert handler.seen[0].body == b"{}"
    assert trace_id_var.get() == ""  # the request's trace id does not outlive it


@pytest.mark.parametrize(
    "scope",
    [
        _scope(headers=[(b"content-type", b"application/json")]),  # no length: chunked
        _scope(headers=[*SIZED[:1], (b"content-length", b"101")]),  # over the limit: 413
        _scope(headers=[*SIZED, (b"expect", b"100-continue")]),
        _scope(headers=[*SIZED, (b"transfer-encoding", b"chunked")]),
        _scope(headers=[*SIZED, (b"content-length", b"2")]),
        _scope(headers=[*SIZED[:1], (b"content-length", b"+2")]),
        _scope(headers=SIZED, root_path="/mounted"),
        _scope(headers=SIZED, method="GET"),
    ],
    ids=[
        "no length",
        "too long",
        "expect",
        "chunked",
        "two lengths",
        "signed length",
        "root path",
        "other method",
    ],
)
def test_the_served_lane_leaves_unusual_requests_to_the_application(scope: Scope) -> None:
    assert _served(Handler()).take(scope) is None


@pytest.mark.parametrize(
    ("body", "handler"),
    [(b"{}", Handler(hand_on=True)), (None, Handler())],
    ids=["handed on", "client gone"],
)
def test_the_served_lane_hands_on_having_answered_nothing(
    body: bytes | None, handler: Handler
) -> None:
    scope = _scope(headers=SIZED)
    assert _answer(_served(handler), scope, body) is None
    assert trace_id_var.get() == ""


def test_the_served_lane_hands_on_repeated_headers() -> None:
    handler = Handler()
    scope = _scope(headers=[*SIZED, (b"idempotency-key", b"a"), (b"idempotency-key", b"b")])
    assert _answer(_served(handler), scope) is None
    assert handler.seen == []


@pytest.mark.parametrize(
    ("lane", "problem", "retry_after"),
    [
        (lambda: _served(Failing(None), timeout=0.05), SERVICE_UNAVAILABLE, b"1"),
        (lambda: _served(Failing(CannotConnectNowError())), SERVICE_UNAVAILABLE, b"1"),
        (lambda: _served(Failing(RuntimeError("bug"))), UNKNOWN_ERROR, None),
    ],
    ids=["deadline passed", "database unreachable", "a bug"],
)
def test_the_served_lane_answers_failures_as_the_service_middleware_does(
    lane: Any, problem: Any, retry_after: bytes | None
) -> None:
    reply = _answer(lane(), _scope(headers=SIZED))
    assert reply is not None
    assert reply.status == problem.status
    headers = _headers(reply)
    assert headers[b"content-type"] == b"application/problem+json"
    assert headers.get(b"retry-after") == retry_after
    assert len(headers[b"svc-trace-id"]) == 32
    document = json.loads(reply.body)
    assert document["type"] == f"https://bankrail.test/errors#{problem.anchor}"
    assert document["trace_id"] == headers[b"svc-trace-id"].decode()


class SlowHandOn:
    """A fast handler that works a while and then hands the request on."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def __call__(self, request: FastRequest) -> FastAnswer:
        await asyncio.sleep(self.seconds)
        raise HandOn


def test_a_request_handed_on_keeps_the_deadline_it_started_with() -> None:
    """The time the served lane spent counts: the application does not start a fresh
    deadline, so no request runs for up to twice BANKRAIL_REQUEST_TIMEOUT_SECONDS."""
    timeout = 0.5
    sent: list[Message] = []

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(0.35)  # within a fresh deadline, not within what is left
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"late"})

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def serve() -> None:
        scope = _scope(headers=SIZED)
        lane = _served(SlowHandOn(0.3), timeout=timeout)
        taken = lane.take(scope)
        assert taken is not None
        assert await lane.answer(*taken, scope, _body(b"{}")) is None
        middleware = ServiceMiddleware(
            application,
            public_url="https://bankrail.test",
            max_body_bytes=100,
            request_timeout=timeout,
        )
        await middleware(scope, receive, send)

    asyncio.run(serve())
    assert sent[0]["status"] == SERVICE_UNAVAILABLE.status
    assert b"did not complete within 0.5 s" in sent[-1]["body"]
