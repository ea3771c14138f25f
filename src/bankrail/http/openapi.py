"""OpenAPI documentation of the error answers each route can give (docs/api.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

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
    ("429", "Rate Limit Exceeded (retry after Retry-After)"),
    ("431", "Request Header Fields Too Large"),
    ("503", "Service Unavailable (retry after Retry-After)"),
)

# Every 429 says when to come back.
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Whole seconds after which the request may pass.",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}
# What a 429 means on an operation that checks a credential (security.ratelimit).
_CREDENTIAL_429 = (
    "Rate Limit Exceeded: too many requests from the client, or too many wrong credentials "
    "from the calling address or for the identity claimed (retry after Retry-After)"
)


# Beyond the errors, the document says who may call each operation (bearer schemes), the
# signature and Idempotency-Key headers it takes, and the webhooks (docs/api.md).

# The bearer schemes of `components.securitySchemes`.
SECURITY_SCHEMES: dict[str, dict[str, str]] = {
    "merchantToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "A merchant's access token from POST /connect/token (client credentials).",
    },
    "operatorToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "The operator token (BANKRAIL_ADMIN_TOKEN, or <data-dir>/admin-token).",
    },
    "resourceToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "A payment's resource_token (what the hosted payment page uses).",
    },
    "mockBankToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "The token carried by the mock bank's redirect uri.",
    },
}


@dataclass(frozen=True)
class Needs:
    """What a request must carry, as a dependency (or route) requires it: one of the bearer
    `schemes`, the `signature` header (`signature_required`: always, or only with a
    merchant token), and an `Idempotency-Key` (`idempotency_key`: "required",
    "optional" or None). `anonymous`: the schemes are needed only in some mode."""

    schemes: tuple[str, ...] = ()
    anonymous: bool = False  # also callable with no token (in some mode)
    signature: str | None = None
    signature_required: bool = True
    idempotency_key: str | None = None


_NEEDS: dict[Any, Needs] = {}
_Call = TypeVar("_Call", bound=Callable[..., Any])


def documents(needs: Needs) -> Callable[[_Call], _Call]:
    """Record what a dependency (or an endpoint) requires, for the OpenAPI document."""

    def record(call: _Call) -> _Call:
        _NEEDS[call] = needs
        return call

    return record


def _calls(dependant: Any) -> Iterator[Any]:
    for dependency in dependant.dependencies:
        yield dependency.call
        yield from _calls(dependency)


def _route_needs(route: Any) -> Needs:
    """Everything the route's dependencies (and the route itself) are recorded to need."""
    found = [_NEEDS[c] for c in (route.endpoint, *_calls(route.dependant)) if c in _NEEDS]
    schemes: list[str] = []
    anonymous = any(needs.anonymous for needs in found)
    signature: Needs | None = None
    idempotency: str | None = None
    for needs in found:
        for scheme in needs.schemes:
            if scheme not in schemes:
                schemes.append(scheme)
        if needs.signature and (signature is None or needs.signature_required):
            signature = needs
        if needs.idempotency_key == "required" or idempotency is None:
            idempotency = needs.idempotency_key or idempotency
    return Needs(
        schemes=tuple(schemes),
        anonymous=anonymous,
        signature=signature.signature if signature else None,
        signature_required=signature.signature_required if signature else True,
        idempotency_key=idempotency,
    )


_SIGNATURE_HELP = (
    "ES512 detached JWS over the method, path, the headers named in tl_headers and the body "
    "(docs/api.md, Request signatures)."
)
_IDEMPOTENCY_HELP = (
    "A key that makes retries safe (6 hours); it must be among the signed tl_headers."
)


def _header_parameter(operation: dict[str, Any], name: str, required: bool, help: str) -> None:
    parameters: list[dict[str, Any]] = operation.setdefault("parameters", [])
    for parameter in parameters:
        if parameter.get("in") == "header" and parameter["name"].lower() == name.lower():
            parameter["name"] = name
            parameter["required"] = required or bool(parameter.get("required"))
            parameter.setdefault("description", help)
            parameter["schema"] = {"type": "string", "maxLength": 200}
            return
    parameters.append(
        {
            "name": name,
            "in": "header",
            "required": required,
            "description": help,
            "schema": {"type": "string"},
        }
    )


def _api_routes(routes: Any) -> Iterator[tuple[str, Any]]:
    """(path as published, route) for every route, included routers' too: FastAPI 0.16x
    includes routers lazily (`iter_route_contexts`); earlier versions copy their routes."""
    from fastapi import routing

    iterate = getattr(routing, "iter_route_contexts", None)
    if iterate is None:
        for route in routes:
            yield getattr(route, "path_format", ""), route
        return
    for context in iterate(routes):
        yield context.path_format or "", context.original_route


def _document_needs(schema: dict[str, Any], routes: Any) -> None:
    """`security` and the signature and Idempotency-Key header parameters on every
    operation, from what its dependencies are recorded to need."""
    paths = schema.get("paths", {})
    for path, route in _api_routes(routes):
        if not getattr(route, "include_in_schema", False) or not hasattr(route, "dependant"):
            continue
        needs = _route_needs(route)
        for method in route.methods or ():
            operation = paths.get(path, {}).get(method.lower())
            if operation is None:
                continue
            if needs.schemes:
                anyone: list[dict[str, list[str]]] = [{}] if needs.anonymous else []
                operation["security"] = anyone + [{scheme: []} for scheme in needs.schemes]
                operation["responses"]["429"]["description"] = _CREDENTIAL_429
            if method in ("GET", "HEAD"):
                continue  # only requests with a body are signed
            if needs.signature:
                _header_parameter(
                    operation, needs.signature, needs.signature_required, _SIGNATURE_HELP
                )
            if needs.idempotency_key:
                _header_parameter(
                    operation,
                    "Idempotency-Key",
                    needs.idempotency_key == "required",
                    _IDEMPOTENCY_HELP,
                )


def _one_spelling_per_enum(node: Any) -> None:
    """Drop enum values that repeat another after case folding (the first spelling stays):
    the server accepts both, but client generators make one name of each."""
    if isinstance(node, dict):
        values = node.get("enum")
        if isinstance(values, list):
            seen: set[str] = set()
            kept = []
            for value in values:
                folded = value.casefold() if isinstance(value, str) else repr(value)
                if folded not in seen:
                    seen.add(folded)
                    kept.append(value)
            node["enum"] = kept
        for child in node.values():
            _one_spelling_per_enum(child)
    elif isinstance(node, list):
        for child in node:
            _one_spelling_per_enum(child)


# A webhook of the document: its name → (where it is sent, its payload model).
Webhooks = Mapping[str, tuple[str, type[BaseModel]]]


def _webhooks(components: dict[str, Any], webhooks: Webhooks) -> dict[str, Any]:
    """The top-level `webhooks` (OpenAPI 3.1): each event's payload and headers."""
    from pydantic.json_schema import models_json_schema

    models: list[tuple[type[BaseModel], Literal["serialization"]]] = [
        (model, "serialization") for _, model in webhooks.values()
    ]
    refs, definitions = models_json_schema(models, ref_template="#/components/schemas/{model}")
    for name, definition in definitions.get("$defs", {}).items():
        if components.setdefault(name, definition) != definition:
            raise ValueError(f"webhook schema {name} clashes with a component of that name")
    headers = [
        {
            "name": "Svc-Signature",
            "in": "header",
            "required": True,
            "description": "ES512 detached JWS (tl_headers X-SVC-Webhook-Timestamp,"
            "Content-Type; jku the service's /.well-known/jwks).",
            "schema": {"type": "string"},
        },
        {
            "name": "X-SVC-Webhook-Timestamp",
            "in": "header",
            "required": True,
            "description": "When this attempt was sent (ISO 8601 UTC, seconds, Z).",
            "schema": {"type": "string"},
        },
    ]
    documented: dict[str, Any] = {}
    for name, (destination, model) in webhooks.items():
        documented[name] = {
            "post": {
                "summary": f"{name.removeprefix('v1.')}, sent to the merchant's {destination}",
                "description": (model.__doc__ or "").strip(),
                "operationId": "webhook_" + name.replace(".", "_"),
                "parameters": headers,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": refs[(model, "serialization")]}},
                },
                "responses": {"200": {"description": "Any 2xx answer within 10 s is a delivery."}},
            }
        }
    return documented


def problem_json_openapi(
    app: Any,
    webhooks: Webhooks | None = None,
    documented: Callable[[Any], Any] = list,
) -> Any:
    """An `app.openapi` that documents every error answer as problem+json, and `webhooks`.
    `documented(app.routes)` gives the routes as the generator reads them (the pipeline's
    routes replaced by their declarations' documentation: http/pipeline.py).

    FastAPI puts response models under `application/json` and adds a 422 "Validation Error"
    to every route with input; Bankrail answers errors as `application/problem+json` and
    validation errors as 400, so the schema is rewritten to say exactly that.
    """
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return dict(app.openapi_schema)
        routes = documented(app.routes)
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=routes,
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
                # too slow or too large (http/connection_guard.py, http/middleware.py).
                for code, title in _EVERY_ROUTE:
                    responses.setdefault(code, {"description": title, "content": problem})
                responses["429"].setdefault("headers", _RETRY_AFTER)
                if path == "/connect/token":
                    responses["429"]["description"] = _CREDENTIAL_429
                    continue  # RFC 6749 errors: the one documented exception
                for code, answer in responses.items():
                    if code.isdigit() and int(code) >= 400:
                        answer["content"] = problem
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.setdefault("Problem", Problem.model_json_schema())
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        schema["components"]["securitySchemes"] = SECURITY_SCHEMES
        _document_needs(schema, routes)
        schema["webhooks"] = _webhooks(components, webhooks or {})
        _one_spelling_per_enum(schema)
        app.openapi_schema = schema
        return schema

    return openapi
