"""The one place that turns errors into problem+json responses (docs/api.md)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import asyncpg
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from bankrail.core.jsonbody import PROBLEM_MEDIA_TYPE, dumps
from bankrail.core.problems import (
    INVALID_PARAMETERS,
    UNKNOWN_ERROR,
    ProblemError,
    ProblemType,
    problem_title_var,
    problem_type_for_status,
)
from bankrail.core.tracing import trace_id_var
from bankrail.ledger.models import BalanceOverflow

log = logging.getLogger(__name__)


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


def validation_errors(exc: RequestValidationError, body_model: Any = None) -> dict[str, list[str]]:
    """Map each failing field's JSON path to its messages, each saying what to send: a
    missing `type` of a tagged object names the allowed values (read from `body_model`, the
    route's body annotation, when given)."""
    errors: dict[str, list[str]] = {}
    body = getattr(exc, "body", None)
    for item in exc.errors():
        if item.get("type") == "json_invalid":
            errors.setdefault("body", []).append("Malformed JSON: " + str(item.get("msg", "")))
            continue
        path = _json_path(item.get("loc", ()), body)
        message = str(item.get("msg", "invalid"))
        if item.get("type") == "union_tag_not_found":
            message = _missing_tag_message(item, body_model)
        if message not in errors.get(path, []):
            errors.setdefault(path, []).append(message)
    return errors


def _missing_tag_message(item: Mapping[str, Any], body_model: Any) -> str:
    tag = str(item.get("ctx", {}).get("discriminator", "type")).strip("'")
    location = [p for p in item.get("loc", ())[1:] if not (isinstance(p, str) and "[" in p)]
    tags = allowed_tags(body_model, location, tag) if body_model is not None else []
    if not tags:
        return f"`{tag}` is required."
    return f"`{tag}` is required: one of {', '.join(repr(t) for t in tags)}."


def _unwrap(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _members(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) in (Union, UnionType):
        return tuple(_unwrap(m) for m in get_args(annotation) if m is not type(None))
    return ()


def _tag_values(model: Any, tag: str) -> list[str]:
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    field = model.model_fields.get(tag)
    if field is None or get_origin(field.annotation) is not Literal:
        return []
    return [str(value) for value in get_args(field.annotation)]


def allowed_tags(annotation: Any, location: Sequence[int | str], tag: str) -> list[str]:
    """The values of `tag` that the tagged union at `location` (a pydantic error location
    under the body) of the body annotation accepts; empty when none is found there."""
    for part in location:
        annotation = _unwrap(annotation)
        members = _members(annotation)
        if len(members) == 1:
            annotation, members = members[0], ()
        if members:  # a tagged union: pydantic names the member by its tag
            chosen = [m for m in members if str(part) in _tag_values(m, tag)]
            if len(chosen) != 1:
                return []
            annotation = chosen[0]
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = annotation.model_fields
            field = fields.get(str(part)) or next(
                (f for f in fields.values() if f.alias == part), None
            )
            if field is None:
                return []
            annotation = field.annotation
        elif get_origin(annotation) in (list, tuple, set, frozenset) and isinstance(part, int):
            annotation = get_args(annotation)[0]
        else:
            return []
    return [value for member in _members(_unwrap(annotation)) for value in _tag_values(member, tag)]


def _json_content_type(content_type: str) -> bool:
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _not_json_detail(request: Request, exc: RequestValidationError) -> str | None:
    """What to say when a body was sent without a JSON content type, which is why FastAPI
    did not read it as JSON; None otherwise."""
    content_type = request.headers.get("content-type", "")
    if _json_content_type(content_type):
        return None
    for item in exc.errors():
        if tuple(item.get("loc", ())) == ("body",) and item.get("type") in (
            "model_attributes_type",
            "dict_type",
            "model_type",
        ):
            sent = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
            return (
                f"The body was sent with {sent}, so it was not read as JSON: send it as a "
                "JSON object with the header `Content-Type: application/json`."
            )
    return None


def _body_model(request: Request) -> Any:
    """The body annotation of the route that answered, if it has one (a pipeline route's
    `body_model`, a FastAPI route's body field)."""
    route = request.scope.get("route")
    declared = getattr(route, "body_model", None)
    if declared is not None:
        return declared
    field = getattr(route, "body_field", None)
    return getattr(getattr(field, "field_info", None), "annotation", None)


def _public_url(request: Request) -> str:
    context = getattr(request.app.state, "context", None)
    if context is not None:
        return str(context.settings.public_url)
    return str(getattr(request.app.state, "public_url", ""))


def validation_problem(request: Request, exc: RequestValidationError) -> Response:
    """The 400 Invalid Parameters answer to a request that failed validation: what to send
    instead when the body was not sent as JSON, else each failing field with its messages."""
    not_json = _not_json_detail(request, exc)
    if not_json is not None:
        return problem_response(
            INVALID_PARAMETERS, not_json, _public_url(request), errors={"body": [not_json]}
        )
    errors = validation_errors(exc, _body_model(request))
    fields = "; ".join(f"{path}: {' '.join(errors[path])}" for path in sorted(errors))
    return problem_response(
        INVALID_PARAMETERS,
        f"The request is invalid: {fields.rstrip('.')}.",
        _public_url(request),
        errors=errors,
    )


async def _on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProblemError)
    return problem_response(
        exc.problem,
        exc.detail,
        _public_url(request),
        errors=exc.errors,
        headers=dict(exc.headers),
    )


async def _on_http(request: Request, exc: Exception) -> Response:
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


async def _on_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return validation_problem(request, exc)


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    # Not reached under create_app, whose stack leaves out the ServerErrorMiddleware that
    # calls it: ServiceMiddleware answers what escapes (503 for a database outage, 500
    # otherwise). Kept for the application served without that stack.
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem_response(UNKNOWN_ERROR, "An unexpected error occurred.", _public_url(request))


async def _on_overflow(request: Request, exc: Exception) -> Response:
    return problem_response(
        INVALID_PARAMETERS,
        "The amount would take a balance beyond the largest amount the service holds "
        f"({2**63 - 1} minor units).",
        _public_url(request),
        errors={"amount_in_minor": ["too large for the account's balance"]},
    )


async def _on_unstorable_text(request: Request, exc: Exception) -> Response:
    # PostgreSQL cannot store U+0000 in text or jsonb; no field of the API needs it.
    return problem_response(
        INVALID_PARAMETERS,
        "Text fields must not contain the NUL character (U+0000).",
        _public_url(request),
    )


def install_problem_handlers(app: FastAPI) -> None:
    """Register handlers so that every error, framework-made or ours, is problem+json."""
    app.add_exception_handler(asyncpg.exceptions.CharacterNotInRepertoireError, _on_unstorable_text)
    app.add_exception_handler(asyncpg.exceptions.UntranslatableCharacterError, _on_unstorable_text)
    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(BalanceOverflow, _on_overflow)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(Exception, _on_unexpected)
