"""The fast lane's dispatch (`web/fastlane.py`) as plain ASGI: which requests a fast handler
sees, what it answers, and that a request handed on reaches the router whole, body included.
(Its answers are held to the router's over HTTP in tests/e2e/test_fast_lane_http.py.)"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from bankrail.web.fastlane import FastAnswer, FastLane, FastRequest, FastRoute, HandOn

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
