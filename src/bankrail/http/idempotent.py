"""Answering a request idempotently: the route-level face of `security.idempotency`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from fastapi import Request, Response

from bankrail.context import AppContext
from bankrail.core.jsonbody import dumps
from bankrail.core.problems import IDEMPOTENCY_REUSE, ProblemType
from bankrail.db.pool import Connection
from bankrail.http.problems import render_problem_bytes
from bankrail.http.responses import answer_response
from bankrail.security.headers import request_headers
from bankrail.security.idempotency import fingerprint, run_idempotent

Effect = Callable[[Connection], Awaitable[tuple[int, Any]]]


def idempotency_key(request: Request) -> str | None:
    """The request's `Idempotency-Key`, the same value its signature was verified over
    (security/headers.py); RepeatedHeader (400) when the header was sent more than once."""
    return request_headers(request.scope).get("idempotency-key")


async def respond_once(
    context: AppContext,
    request: Request,
    *,
    scope: str,
    key: str | None,
    body: bytes,
    effect: Effect,
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE,
    ttl: timedelta | None = None,
    store_client_errors: bool = True,
) -> Response:
    """Run `effect` in one transaction and answer its (status, JSON value).

    With a key, the answer is stored with the effect and replayed byte for byte to a repeat
    of the same request within the validity window (docs/api.md). Answers under a scope that
    `security.idempotency.EXPIRING_SCOPES` matches (v3, sandbox, console) are deleted once the
    configured validity ends, so such a scope takes no `ttl` of its own; the scopes that do
    (v1 payouts, legacy deposits) lie outside it and keep their keys for good.

    A request that repeats the `Idempotency-Key` header is refused (400) here too, whatever
    its key is taken from, before anything runs or is stored.
    """
    request_headers(request.scope).require_once(("Idempotency-Key",))
    now = context.clock.now()

    async def handler(conn: Connection) -> tuple[int, bytes]:
        status, value = await effect(conn)
        return status, dumps(value)

    async with context.pool.acquire() as conn, conn.transaction():
        if key is None:
            status, payload = await handler(conn)
        else:
            status, payload = await run_idempotent(
                conn,
                scope=scope,
                key=key,
                request_fingerprint=fingerprint(request.method, request.url.path, body),
                now=now,
                ttl=ttl or timedelta(seconds=context.settings.idempotency_ttl_seconds),
                handler=handler,
                render_problem=lambda e: render_problem_bytes(e, context.settings.public_url),
                reuse_problem=reuse_problem,
                store_client_errors=store_client_errors,
            )
    return answer_response(status, payload)
