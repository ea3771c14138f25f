"""Answering a request idempotently: the route-level face of `security.idempotency`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from fastapi import Request, Response

from bankrail.core.jsonbody import dumps
from bankrail.core.problems import IDEMPOTENCY_REUSE, ProblemType
from bankrail.db.pool import Connection
from bankrail.http.auth import accepted_signature
from bankrail.http.context import AppContext
from bankrail.http.responses import answer_response
from bankrail.security.headers import request_headers
from bankrail.security.idempotency import Handler, KeyedRequest, fingerprint
from bankrail.security.idempotent_commit import IdempotentWork, LockedEffect

Effect = Callable[[Connection], Awaitable[tuple[int, Any]]]
"""A request's effect: its answer's (status, JSON value)."""


async def _encoded(answer: Awaitable[tuple[int, Any]]) -> tuple[int, bytes]:
    """An effect's answer with its JSON value encoded, as the batch stores and sends it."""
    status, value = await answer
    return status, dumps(value)


def keyed_request(
    context: AppContext,
    request: Request,
    *,
    scope: str,
    key: str,
    body: bytes,
    ttl: timedelta | None = None,
) -> KeyedRequest:
    """The request under its key in `scope`: told apart from another by its method, path and
    `body` (the signed bytes, or a form's canonical encoding), its answer kept for `ttl`, by
    default the configured validity, with its signature if one was accepted
    (`http.auth.accepted_signature`): a signed request takes effect once."""
    return KeyedRequest(
        scope=scope,
        key=key,
        fingerprint=fingerprint(request.method, request.url.path, body),
        ttl=ttl or timedelta(seconds=context.settings.idempotency_ttl_seconds),
        signature=accepted_signature(request),
    )


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
    effect: Effect | LockedEffect[tuple[int, Any]],
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE,
    ttl: timedelta | None = None,
    store_client_errors: bool = True,
) -> Response:
    """Run `effect` once and answer its (status, JSON value): in a transaction committed with
    the other requests of the moment (security/idempotent_commit.py); its failure undoes its
    own writes only. It may run again before its batch commits, only the committed run
    counting, so it acts only through `conn` (count or announce anything else once this
    returns). An effect on one row (`LockedEffect`) is given that row when its batch read
    and locked it and nothing of the batch can have changed it since, else None (it reads
    the row itself).

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

    handler: Handler | LockedEffect[tuple[int, bytes]]
    if isinstance(effect, LockedEffect):
        act = effect.effect
        handler = replace(effect, effect=lambda conn, row: _encoded(act(conn, row)))
    else:
        run = effect

        def plain(conn: Connection) -> Awaitable[tuple[int, bytes]]:
            return _encoded(run(conn))

        handler = plain
    keyed = None
    if key is not None:
        keyed = keyed_request(context, request, scope=scope, key=key, body=body, ttl=ttl)
    work = IdempotentWork(keyed, handler, now, reuse_problem, store_client_errors)
    status, payload = await context.idempotent_commit.accept(work)
    return answer_response(status, payload)
