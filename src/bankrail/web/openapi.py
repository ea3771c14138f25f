"""OpenAPI documentation of the error answers each route can give (DESIGN §6)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    type: str
    title: str
    status: int
    detail: str
    trace_id: str
    errors: dict[str, list[str]] | None = None


def _problem(description: str) -> dict[str, Any]:
    return {
        "model": Problem,
        "description": description,
        "content": {"application/problem+json": {}},
    }


Responses = dict[int | str, dict[str, Any]]

_400: Responses = {400: _problem("Invalid Parameters")}
_401: Responses = {401: _problem("Unauthenticated")}
_403: Responses = {403: _problem("Forbidden (InvalidAudience: token lacks the payments scope)")}
_404: Responses = {404: _problem("Not Found")}
_409: Responses = {409: _problem("Conflict, or Idempotency-Key Concurrency Conflict")}
_413: Responses = {413: _problem("Payload Too Large")}
_422: Responses = {422: _problem("Idempotency-Key Reuse")}

ERRORS_AUTH: Responses = {**_400, **_401, **_403}
ERRORS_AUTH_NOT_FOUND: Responses = {**ERRORS_AUTH, **_404}
ERRORS_SIGNED_POST: Responses = {
    **ERRORS_AUTH_NOT_FOUND,
    **_409,
    **_413,
    **_422,
}
ERRORS_ADMIN: Responses = {**_400, **_401, **_404, **_409, **_413}
ERRORS_ADMIN_IDEMPOTENT: Responses = {**ERRORS_ADMIN, **_422}

_EVERY_ROUTE = (
    ("408", "Request Timeout (the head or body did not arrive in time)"),
    ("429", "Rate Limit Exceeded"),
    ("431", "Request Header Fields Too Large"),
    ("503", "Service Unavailable (retry after Retry-After)"),
)


def problem_json_openapi(app: Any) -> Any:
    """An `app.openapi` that documents every error answer as problem+json.

    FastAPI puts response models under `application/json` and adds a 422 "Validation Error"
    to every route with input; Bankrail answers errors as `application/problem+json` and
    validation errors as 400, so the schema is rewritten to say exactly that.
    """
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return dict(app.openapi_schema)
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
        )
        problem: dict[str, Any] = {
            "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        }
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                responses = operation.get("responses", {})
                if responses.get("422", {}).get("description") == "Validation Error":
                    del responses["422"]
                # Any route may be rate limited, meet a database outage, or get a request
                # too slow or too large (web/connection_guard.py, web/middleware.py).
                for code, title in _EVERY_ROUTE:
                    responses.setdefault(code, {"description": title, "content": problem})
                if path == "/connect/token":
                    continue  # RFC 6749 errors: the one documented exception
                for code, answer in responses.items():
                    if code.isdigit() and int(code) >= 400:
                        answer["content"] = problem
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.setdefault("Problem", Problem.model_json_schema())
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        app.openapi_schema = schema
        return schema

    return openapi
