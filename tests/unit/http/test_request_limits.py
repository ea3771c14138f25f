"""Unit tests for the request deadline and the outage classification of
bankrail.http.middleware.ServiceMiddleware: a request that runs past the request timeout is
cancelled (so its work stops, and an open transaction rolls back) and answered 503
problem+json with `Retry-After`; a database that cannot be reached is a 503 too; but an
error that merely looks like a network error (an OSError raised outside asyncpg) is a bug and
must be answered 500, never a retryable 503 that hides it.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import httpx
import pytest
from starlette.types import Receive, Scope, Send

from bankrail.db.outage import is_database_outage
from bankrail.http.middleware import ServiceMiddleware

PUBLIC_URL = "http://bankrail.test"
Handler = Callable[[], Awaitable[None]]


def _app(handler: Handler) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An ASGI app that runs `handler`, then answers 200 {}."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await handler()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b"{}"})

    return app


async def _call(handler: Handler, *, timeout: float = 5.0) -> httpx.Response:
    middleware = ServiceMiddleware(
        _app(handler), public_url=PUBLIC_URL, max_body_bytes=1024, request_timeout=timeout
    )
    transport = httpx.ASGITransport(app=middleware)
    async with httpx.AsyncClient(transport=transport, base_url=PUBLIC_URL) as client:
        return await asyncio.wait_for(client.post("/v3/payouts", json={"a": 1}), 30)


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["trace_id"] == response.headers["svc-trace-id"]
    assert body["type"].startswith(f"{PUBLIC_URL}/errors#")
    return body


async def test_a_request_past_the_timeout_is_cancelled_and_answered_503() -> None:
    events: list[str] = []

    async def slow() -> None:
        events.append("started")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise
        events.append("finished")

    loop = asyncio.get_running_loop()
    began = loop.time()
    answer = await _call(slow, timeout=0.2)
    elapsed = loop.time() - began
    body = _problem(answer, 503)
    assert answer.headers["retry-after"] == "1"
    assert body["title"] == "Service Unavailable"
    assert "did not complete within 0.2 s" in body["detail"]
    assert "Idempotency-Key" in body["detail"]
    assert events == ["started", "cancelled"]  # the work was stopped, not left running
    assert 0.2 <= elapsed < 10


async def test_a_request_within_the_timeout_is_answered_normally() -> None:
    async def quick() -> None:
        await asyncio.sleep(0.01)

    answer = await _call(quick, timeout=5.0)
    assert answer.status_code == 200
    assert answer.json() == {}
    assert answer.headers["svc-trace-id"]


async def test_an_oserror_raised_outside_asyncpg_is_a_500() -> None:
    async def buggy() -> None:
        raise ConnectionRefusedError(111, "Connection refused")  # e.g. an outgoing HTTP call

    answer = await _call(buggy)
    body = _problem(answer, 500)
    assert "retry-after" not in answer.headers
    assert body["detail"] == "An unexpected error occurred."


async def test_a_file_not_found_outside_asyncpg_is_a_500() -> None:
    async def buggy() -> None:
        open("/nonexistent/bankrail/template.html").close()

    answer = await _call(buggy)
    _problem(answer, 500)
    assert "retry-after" not in answer.headers


async def test_a_timeout_error_of_the_route_itself_is_a_500_not_a_deadline_503() -> None:
    async def buggy() -> None:
        raise TimeoutError("an outgoing call's own timeout")

    answer = await _call(buggy, timeout=30.0)
    _problem(answer, 500)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_unreachable_database_is_a_503_with_retry_after() -> None:
    port = _closed_port()

    async def needs_the_database() -> None:
        await asyncpg.connect(f"postgresql://bankrail@127.0.0.1:{port}/bankrail", timeout=5)

    answer = await _call(needs_the_database)
    body = _problem(answer, 503)
    assert answer.headers["retry-after"] == "1"
    assert body["detail"] == "The database is unreachable; retry shortly."


async def test_a_lost_database_connection_is_a_503() -> None:
    async def connection_lost() -> None:
        raise asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed")

    answer = await _call(connection_lost)
    _problem(answer, 503)
    assert answer.headers["retry-after"] == "1"


def test_outage_classification_looks_at_where_a_socket_error_was_raised() -> None:
    # The same exception counts as an outage only when it was raised inside asyncpg.
    namespace: dict[str, Any] = {"__name__": "asyncpg.connect_utils"}
    exec("def connect():\n    raise ConnectionRefusedError(111, 'refused')\n", namespace)  # noqa: S102
    with pytest.raises(ConnectionRefusedError) as inside:
        namespace["connect"]()
    assert is_database_outage(inside.value)

    def elsewhere() -> None:
        raise ConnectionRefusedError(111, "refused")

    with pytest.raises(ConnectionRefusedError) as outside:
        elsewhere()
    assert not is_database_outage(outside.value)
    assert not is_database_outage(OSError("never raised"))
    assert is_database_outage(asyncpg.exceptions.CannotConnectNowError("starting up"))
    assert not is_database_outage(ValueError("bug"))


async def _call_raw(
    app: Callable[[Scope, Receive, Send], Awaitable[None]],
    messages: list[dict[str, Any]],
    headers: list[tuple[bytes, bytes]],
    *,
    timeout: float,
) -> tuple[int, dict[bytes, bytes], dict[str, Any]]:
    """Run ServiceMiddleware around `app` for a POST whose body is `messages`, after which
    receive() waits for good, as for a client that stops sending; (status, headers, body)."""
    middleware = ServiceMiddleware(
        app, public_url=PUBLIC_URL, max_body_bytes=1024, request_timeout=timeout
    )
    pending = list(messages)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v3/payouts", "headers": headers}
    await asyncio.wait_for(middleware(scope, receive, send), 30)  # type: ignore[arg-type]
    start, body = sent[0], sent[1]
    return start["status"], dict(start["headers"]), json.loads(body["body"])


async def _reads_body(scope: Scope, receive: Receive, send: Send) -> None:
    """An application that reads the whole body, then answers 200 {}."""
    while True:
        message = await receive()
        if not message.get("more_body", False):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def test_a_chunked_body_that_stops_arriving_is_408_within_the_deadline() -> None:
    first = {"type": "http.request", "body": b'{"a":', "more_body": True}
    chunked = [(b"transfer-encoding", b"chunked")]
    loop = asyncio.get_running_loop()
    began = loop.time()
    status, headers, body = await _call_raw(_reads_body, [first], chunked, timeout=0.2)
    assert status == 408
    assert headers[b"connection"] == b"close"  # the rest of the body may still be coming
    assert body["title"] == "Request Timeout"
    assert body["detail"] == "The request body did not arrive within 0.2 s."
    assert loop.time() - began < 10


async def test_a_body_of_declared_length_that_stops_arriving_is_408() -> None:
    first = {"type": "http.request", "body": b'{"a":', "more_body": True}
    declared = [(b"content-length", b"100")]
    status, _, body = await _call_raw(_reads_body, [first], declared, timeout=0.2)
    assert status == 408
    assert body["title"] == "Request Timeout"


async def test_a_wait_after_the_whole_body_past_the_deadline_is_503_not_408() -> None:
    async def waits_for_disconnect(scope: Scope, receive: Receive, send: Send) -> None:
        assert (await receive())["more_body"] is False
        await receive()  # as a route that watches for the client going away

    whole = {"type": "http.request", "body": b"{}", "more_body": False}
    status, _, body = await _call_raw(
        waits_for_disconnect, [whole], [(b"content-length", b"2")], timeout=0.2
    )
    assert status == 503
    assert body["title"] == "Service Unavailable"


async def test_a_cancellation_that_is_not_the_deadline_is_not_answered() -> None:
    # A disconnect or a shutdown cancels the request's task: that is not a timed-out
    # request, and must not be turned into a 503 written to a connection going away.
    sent: list[Any] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(30)

    middleware = ServiceMiddleware(
        app, public_url=PUBLIC_URL, max_body_bytes=1024, request_timeout=30.0
    )
    scope = {"type": "http", "method": "GET", "path": "/v3/payouts", "headers": []}

    async def send(message: Any) -> None:
        sent.append(message)

    task = asyncio.ensure_future(middleware(scope, _never, send))  # type: ignore[arg-type]
    while not middleware.deadlines._due:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sent == []
    assert not middleware.deadlines._due  # nothing left to watch


async def _never() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_a_request_answered_after_its_deadline_leaves_its_task_uncancelled() -> None:
    cancelling: list[int] = []

    async def slow() -> None:
        await asyncio.sleep(30)

    async def answer_and_look() -> httpx.Response:
        answer = await _call(slow, timeout=0.1)
        task = asyncio.current_task()
        assert task is not None
        cancelling.append(task.cancelling())
        await asyncio.sleep(0)  # a task still cancelling would be cancelled again here
        return answer

    answer = await answer_and_look()
    _problem(answer, 503)
    assert cancelling == [0]


def test_the_deadline_holds_on_each_event_loop_in_turn() -> None:
    # One application object served by one loop after another (as tests do): each loop's
    # requests are still held to the deadline.
    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(30)

    middleware = ServiceMiddleware(
        slow, public_url=PUBLIC_URL, max_body_bytes=1024, request_timeout=0.1
    )

    async def one_request() -> int:
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": "/v3/payouts", "headers": []}
        await asyncio.wait_for(middleware(scope, _never, send), 10)  # type: ignore[arg-type]
        return int(sent[0]["status"])

    assert asyncio.run(one_request()) == 503
    assert asyncio.run(one_request()) == 503


async def test_metrics_see_the_answers_the_middleware_gives_itself() -> None:
    observed: list[tuple[str, int]] = []

    def metrics(scope: Scope, status: int, began: float) -> None:
        observed.append((scope["path"], status))

    async def never_called(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("the body is refused before the application")

    middleware = ServiceMiddleware(
        never_called, public_url=PUBLIC_URL, max_body_bytes=4, metrics=metrics
    )
    transport = httpx.ASGITransport(app=middleware)
    async with httpx.AsyncClient(transport=transport, base_url=PUBLIC_URL) as client:
        answer = await client.post("/v3/payouts", content=b"0123456789")
    _problem(answer, 413)
    assert observed == [("/v3/payouts", 413)]
