"""`/healthz` (the process answers) and `/readyz` (it can do its work)."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel
from starlette.responses import Response

from bankrail.db.migrations import pending_migrations
from bankrail.http.pipeline import NOBODY, Call, Endpoint, routes
from bankrail.http.responses import json_response


class Health(BaseModel):
    """Liveness."""

    status: str


class Readiness(BaseModel):
    """Readiness, check by check."""

    status: str
    checks: dict[str, str]


async def healthz(call: Call[None, None]) -> Response:
    """The process is up and serving HTTP."""
    return json_response(200, {"status": "ok"})


async def readyz(call: Call[None, None]) -> Response:
    """Ready when the database answers, every migration is applied, and (in an API process of
    `serve`, which runs background work in a worker process of its own) the worker is
    running; 503 otherwise."""
    request, context = call.request, call.context
    checks: dict[str, str] = {}
    try:
        async with context.pool.acquire(timeout=2) as conn:
            await conn.fetchval("SELECT 1")
            pending = await pending_migrations(conn)
        checks["database"] = "ok"
        checks["migrations"] = "ok" if not pending else f"pending: {', '.join(pending)}"
    except (OSError, TimeoutError, Exception) as exc:
        checks["database"] = f"unreachable: {type(exc).__name__}"
    background_process: Callable[[], str] | None = getattr(
        request.app.state, "background_process", None
    )
    if background_process is not None:
        state = background_process()
        checks["workers"] = "ok" if state == "ok" else f"not running: {state}"
    ready = all(value == "ok" for value in checks.values())
    return json_response(
        200 if ready else 503,
        {"status": "ready" if ready else "not_ready", "checks": checks},
        headers=None if ready else {"Retry-After": "1"},
    )


ROUTES = routes(
    Endpoint("GET", "/healthz", healthz, NOBODY, response_model=Health, tags=["operations"]),
    Endpoint(
        "GET",
        "/readyz",
        readyz,
        NOBODY,
        response_model=Readiness,
        responses={503: {"model": Readiness}},
        tags=["operations"],
    ),
)
"""Liveness and readiness, for anyone."""
