"""Unit tests of bankrail.http.pipeline.ApiRouter and PipelineRoute's own answer: a request
whose first full match is a pipeline route is served by it directly, with and without `/v3`;
one whose first match is another route (or none) goes to the framework's stack; an error a
step raises is answered by the application's handler for it, and an error without one
propagates (to ServiceMiddleware); a route added to the table after the first request is
found."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route, Router
from starlette.types import Receive, Scope, Send

from bankrail.core.problems import NotFound, ProblemError
from bankrail.http.pipeline import NOBODY, ApiRouter, Call, Endpoint, PipelineRoute

BASE = "http://bankrail.test"


async def _answer(call: Call[None, None]) -> Response:
    return PlainTextResponse(f"pipeline {call.params.get('thing_id', '-')}")


async def _missing(call: Call[None, None]) -> Response:
    raise NotFound("No such thing.")


async def _broken(call: Call[None, None]) -> Response:
    raise RuntimeError("a bug")


async def _page(request: Request) -> Response:
    return PlainTextResponse("page")


async def _on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProblemError)
    return PlainTextResponse(f"problem {exc.problem.status}", exc.problem.status)


class _Rest:
    """The framework's stack, as far as these tests see it: records what reached it."""

    def __init__(self, router: Router) -> None:
        self.stack = ExceptionMiddleware(router)
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.paths.append(scope["path"])
        await self.stack(scope, receive, send)


def _served(routes: list[Any]) -> tuple[httpx.AsyncClient, _Rest, Router]:
    app = Starlette()
    # No service behind these routes: a context without a request log (http/request_log.py).
    app.state.context = SimpleNamespace(request_log=None)
    router = Router(routes)
    rest = _Rest(router)
    api = ApiRouter(router, rest, ({ProblemError: _on_problem}, {}))

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = app
        await api(scope, receive, send)

    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url=BASE)
    return client, rest, router


def _route(path: str, handler: Any = _answer) -> PipelineRoute:
    return PipelineRoute(Endpoint("GET", path, handler, NOBODY))


async def test_a_pipeline_route_is_served_directly_with_and_without_the_prefix() -> None:
    client, rest, _ = _served([Route("/pages/{x}", _page), _route("/v3/things/{thing_id}")])
    async with client:
        assert (await client.get("/v3/things/7")).text == "pipeline 7"
        assert (await client.get("/things/8")).text == "pipeline 8"
        assert (await client.get("/pages/1")).text == "page"
        assert (await client.get("/nowhere")).status_code == 404
    assert rest.paths == ["/pages/1", "/nowhere"]


async def test_the_first_route_of_the_table_to_match_wins() -> None:
    client, rest, _ = _served([Route("/v3/things/special", _page), _route("/v3/things/{thing_id}")])
    async with client:
        assert (await client.get("/v3/things/special")).text == "page"
        assert (await client.get("/v3/things/other")).text == "pipeline other"
    assert rest.paths == ["/v3/things/special"]


async def test_a_route_whose_first_segment_is_a_parameter_is_tried_for_every_path() -> None:
    client, _, _ = _served([_route("/{thing_id}/x"), _route("/v3/things/{thing_id}")])
    async with client:
        assert (await client.get("/anything/x")).text == "pipeline anything"
        assert (await client.get("/v3/things/1")).text == "pipeline 1"


async def test_an_error_with_a_handler_is_answered_by_it_and_one_without_propagates() -> None:
    client, _, _ = _served([_route("/v3/missing", _missing), _route("/v3/broken", _broken)])
    async with client:
        answer = await client.get("/v3/missing")
        assert (answer.status_code, answer.text) == (404, "problem 404")
        with pytest.raises(RuntimeError, match="a bug"):
            await client.get("/v3/broken")


async def test_a_route_added_after_the_first_request_is_found() -> None:
    client, rest, router = _served([_route("/v3/things/{thing_id}")])
    async with client:
        assert (await client.get("/v3/things/1")).status_code == 200
        router.routes.append(_route("/v3/others/{thing_id}"))
        assert (await client.get("/others/2")).text == "pipeline 2"
    assert rest.paths == []
