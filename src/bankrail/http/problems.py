"""The one place that turns errors into problem+json responses (docs/api.md)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

import asyncpg
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from bankrail.core.jsonbody import PROBLEM_MEDIA_TYPE, dumps
from bankrail.core.problems import (
    INVALID_PARAMETERS,
    UNKNOWN_ERROR,
    ProblemError,
    ProblemType,
    problem_type_for_status,
)
from bankrail.core.tracing import trace_id_var
from bankrail.ledger.models import BalanceOverflow

log = logging.getLogger(__name__)

problem_title_var: ContextVar[str | None] = ContextVar("problem_title", default=None)
"""The title of the last problem rendered for the request being served (what the sandbox's
access line names), so that nothing reads the answer's body again to find it."""


def problem_document(
    problem: ProblemType,
    detail: str,
    public_url: str,
    errors: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The problem+json body for an error, carrying the current trace id; notes its title
    for the request's access line (`problem_title_var`)."""
    problem_title_var.set(problem.title)
    body: dict[str, Any] = {
        "type": f"{public_url}/errors#{problem.anchor}",
        "title": problem.title,
        "status": problem.status,
        "detail": detail,
        "trace_id": trace_id_var.get(),
    }
    if errors:
        body["errors"] = errors
    return body


def render_problem_bytes(error: ProblemError, public_url: str) -> bytes:
    """Serialised problem body for a ProblemError (used for idempotent storage too)."""
    return dumps(problem_document(error.problem, error.detail, public_url, error.errors))


def problem_response(
    problem: ProblemType,
    detail: str,
    public_url: str,
    *,
    errors: dict[str, list[str]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """A problem+json response."""
    body = dumps(problem_document(problem, detail, public_url, errors))
    return Response(body, problem.status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


_MISSING = object()


def _json_path(location: Sequence[int | str], body: Any) -> str:
    """The JSON path of a failing field in the request as sent.

    pydantic's locations also name union members and discriminator tags (for example
    `beneficiary.external_account.reference`); walking the actual body tells those apart
    from real keys, so the path is the one the client wrote: `beneficiary.reference`.
    """
    parts = list(location)
    source = parts[0] if parts else "body"
    parts = (
        parts[1:] if parts and parts[0] in ("body", "query", "path", "header", "cookie") else parts
    )
    node: Any = body if source == "body" else _MISSING
    kept: list[int | str] = []
    for part in parts:
        if isinstance(part, str) and "[" in part:
            continue  # a validator marker such as function-after[...]
        if isinstance(node, dict):
            if part in node:
                kept.append(part)
                node = node[part]
            elif node.get("type") == part:
                continue  # the tag of a discriminated union
            else:
                kept.append(part)
                node = _MISSING
        elif isinstance(node, list) and isinstance(part, int):
            kept.append(part)
            node = node[part] if 0 <= part < len(node) else _MISSING
        elif node is _MISSING or source != "body":
            kept.append(part)
        # else: node is a scalar, so `part` names a union member tried against it
    path = ""
    for part in kept:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "body"


def validation_errors(exc: RequestValidationError) -> dict[str, list[str]]:
    """Map each failing field's JSON path to its messages."""
    errors: dict[str, list[str]] = {}
    body = getattr(exc, "body", None)
    for item in exc.errors():
        if item.get("type") == "json_invalid":
            errors.setdefault("body", []).append("Malformed JSON: " + str(item.get("msg", "")))
            continue
        path = _json_path(item.get("loc", ()), body)
        message = str(item.get("msg", "invalid"))
        if message not in errors.get(path, []):
            errors.setdefault(path, []).append(message)
    return errors


def _public_url(request: Request) -> str:
    context = getattr(request.app.state, "context", None)
    if context is not None:
        return str(context.settings.public_url)
    return str(getattr(request.app.state, "public_url", ""))


def install_problem_handlers(app: FastAPI) -> None:
    """Register handlers so that every error, framework-made or ours, is problem+json."""

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProblemError)
        return problem_response(
            exc.problem,
            exc.detail,
            _public_url(request),
            errors=exc.errors,
            headers=dict(exc.headers),
        )

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        problem = problem_type_for_status(exc.status_code)
        detail = exc.detail if isinstance(exc.detail, str) else problem.title
        if exc.status_code == 404:
            detail = f"No route matches {request.method} {request.url.path}."
        elif exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}."
        if problem.status != exc.status_code:  # an uncatalogued status keeps its own code
            problem = ProblemType(problem.anchor, exc.status_code, problem.title, "")
        headers = dict(exc.headers) if exc.headers else None
        return problem_response(problem, detail, _public_url(request), headers=headers)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = validation_errors(exc)
        fields = ", ".join(sorted(errors))
        return problem_response(
            INVALID_PARAMETERS,
            f"The request is invalid: {fields}.",
            _public_url(request),
            errors=errors,
        )

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        # Rarely reached: ServiceMiddleware, inside this handler's ServerErrorMiddleware,
        # answers route errors itself (503 for a database outage, 500 otherwise).
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem_response(
            UNKNOWN_ERROR, "An unexpected error occurred.", _public_url(request)
        )

    async def on_overflow(request: Request, exc: Exception) -> Response:
        return problem_response(
            INVALID_PARAMETERS,
            "The amount would take a balance beyond the largest amount the service holds "
            f"({2**63 - 1} minor units).",
            _public_url(request),
            errors={"amount_in_minor": ["too large for the account's balance"]},
        )

    async def on_unstorable_text(request: Request, exc: Exception) -> Response:
        # PostgreSQL cannot store U+0000 in text or jsonb; no field of the API needs it.
        return problem_response(
            INVALID_PARAMETERS,
            "Text fields must not contain the NUL character (U+0000).",
            _public_url(request),
        )

    app.add_exception_handler(asyncpg.exceptions.CharacterNotInRepertoireError, on_unstorable_text)
    app.add_exception_handler(asyncpg.exceptions.UntranslatableCharacterError, on_unstorable_text)
    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(BalanceOverflow, on_overflow)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(Exception, on_unexpected)
