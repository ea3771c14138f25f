"""The request pipeline of every API route (docs/architecture.md, "The request pipeline").

A route is one `Endpoint` declaration: method, path, who may call it, whether it is signed,
whether it takes an Idempotency-Key, its body and query models, its answer and errors. It is
served by a plain Starlette route whose endpoint runs, in this order:

1. authenticate: the declaration's `Authenticator` turns the bearer token into the caller
   (merchant claims and scopes, the operator, a resource token...);
2. rate limit: a caller with an access token is charged to its client's rate limit
   (security/ratelimit.py), and a client revoked since is refused;
3. verify the signature, where the route is signed (`Signed`): the raw body is read here;
4. read the Idempotency-Key (400 when repeated, or missing/too long where required);
5. parse and validate the path parameters, the query and the body once, with pydantic
   `TypeAdapter`s built when the declaration is made (400 naming each failing field);
6. call the handler with one `Call` (context, caller, body, raw bytes, key, params, query),
   which calls the area's service and renders the answer.

An error raised by any step is answered through the application's exception handlers
(http/problems.py) by the route itself. `ApiRouter` serves the pipeline routes straight from
the router's table, inside the one service middleware (http/middleware.py) and outside the
framework's own layers, which serve only the rest (the HTML pages).

Every path under `/v3` also answers without the prefix (fidelity.md A): the same route, one
handler, matched by one pattern. The OpenAPI document is built from these declarations
(`openapi_routes`), not from a second list.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, TypeVar

import orjson
from fastapi import Header, Query
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.convertors import StringConvertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from bankrail.http.auth import (
    access_claims,
    charge_cached_client,
    confirm_client,
    require_mandates_audience,
    require_operator,
    require_payments_audience,
    verify_signature,
)
from bankrail.http.deps import AppContext
from bankrail.http.openapi import Needs, Responses, documents
from bankrail.http.request_log import CLAIMS, NOT_LOGGED, RequestLog
from bankrail.security.headers import request_headers
from bankrail.security.tokens import AccessClaims

__all__ = [
    "CLIENT",
    "MANDATES",
    "MERCHANT",
    "NOBODY",
    "OPERATOR",
    "ApiRouter",
    "Authenticator",
    "Call",
    "Endpoint",
    "PipelineRoute",
    "Signed",
    "openapi_routes",
    "routes",
]

BodyT = TypeVar("BodyT")
QueryT = TypeVar("QueryT")

MAX_IDEMPOTENCY_KEY_LENGTH = 200
VERSION_PREFIX = "/v3"


@dataclass(frozen=True)
class Authenticator:
    """Step 1: who the caller is. `run(request, context)` returns the caller (what handlers
    read as `call.caller`: AccessClaims for a token, which step 2 charges), or raises the
    401/403/429 problem; `needs` is what the OpenAPI
    document says the route requires. `at_once`, when given, is the same check without a
    coroutine (it reads nothing from the database), and the pipeline calls it instead."""

    run: Callable[[Request, AppContext], Awaitable[Any]]
    needs: Needs = field(default_factory=Needs)
    at_once: Callable[[Request, AppContext], Any] | None = None

    @classmethod
    def of(cls, check: Callable[[Request, AppContext], Any], needs: Needs) -> Authenticator:
        """The authenticator of a check that reads nothing from the database."""

        async def run(request: Request, context: AppContext) -> Any:
            return check(request, context)

        return cls(run, needs, check)


def _nobody(request: Request, context: AppContext) -> None:
    return None


def _merchant(request: Request, context: AppContext) -> AccessClaims:
    return require_payments_audience(access_claims(request, context))


def _mandates(request: Request, context: AppContext) -> AccessClaims:
    return require_mandates_audience(access_claims(request, context))


_MERCHANT_TOKEN = Needs(schemes=("merchantToken",))
NOBODY = Authenticator.of(_nobody, Needs())
"""Open to anyone."""
CLIENT = Authenticator.of(access_claims, _MERCHANT_TOKEN)
"""Any valid access token (whatever its scopes), charged to its client's rate limit."""
MERCHANT = Authenticator.of(_merchant, _MERCHANT_TOKEN)
"""An access token with the `payments` scope (payments, payouts, merchant accounts)."""
MANDATES = Authenticator.of(_mandates, _MERCHANT_TOKEN)
"""An access token with a `recurring_payments:*` scope or `payments`."""
OPERATOR = Authenticator(require_operator, Needs(schemes=("operatorToken",)))
"""The operator token."""


@dataclass(frozen=True)
class Signed:
    """Step 3: the route's request signature. `header` is read first (the other of
    `Svc-Signature`/`X-SVC-Signature` too); `only_with_access_token`: verified only when the
    caller authenticated with an access token (payment actions the hosted page also calls
    with a resource token)."""

    header: str = "Svc-Signature"
    require_idempotency_key: bool = True
    allow_body_only: bool = False
    only_with_access_token: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        """The signature headers read, in order."""
        other = "X-SVC-Signature" if self.header == "Svc-Signature" else "Svc-Signature"
        return (self.header, other)


SIGNED = Signed()


@dataclass(frozen=True)
class Call(Generic[BodyT, QueryT]):
    """What a handler is given: everything the pipeline read, validated, in one object."""

    request: Request
    context: AppContext
    caller: Any
    body: BodyT
    raw: bytes
    key: str | None
    params: Mapping[str, Any]
    query: QueryT

    @property
    def merchant(self) -> AccessClaims:
        """The caller's access-token claims (routes authenticated by CLIENT, MERCHANT or
        MANDATES)."""
        assert isinstance(self.caller, AccessClaims)
        return self.caller


Handler = Callable[[Call[Any, Any]], Awaitable[Response]]


@dataclass(frozen=True)
class Endpoint:
    """One API route, declared: what it routes, what runs before its handler, and what the
    OpenAPI document says of it. `params` types the path parameters (default `str`);
    `idempotency` is "required", "optional" or None; `errors` are its documented problems."""

    method: str
    path: str
    handler: Handler
    auth: Authenticator
    signed: Signed | None = None
    idempotency: Literal["required", "optional"] | None = None
    body: Any = None
    body_required: bool = True
    query: type[BaseModel] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    status_code: int = 200
    response_model: Any = None
    errors: Responses = field(default_factory=dict)
    tags: Sequence[str] = ()
    summary: str | None = None
    operation_id: str | None = None
    response_class: Any = None
    responses: Responses = field(default_factory=dict)
    deprecated: bool = False
    openapi_extra: dict[str, Any] | None = None


def _claims_of(caller: Any) -> AccessClaims | None:
    """The access-token claims the caller authenticated with, if any (the caller itself, or
    its `claims`, as a payment's caller carries them)."""
    if isinstance(caller, AccessClaims):
        return caller
    claims = getattr(caller, "claims", None)
    return claims if isinstance(claims, AccessClaims) else None


def _read_key(request: Request, mode: str | None) -> str | None:
    """Step 4: the Idempotency-Key, as the signature check read it; the errors of a required
    key as a validation problem names them."""
    if mode is None:
        return None
    key = request_headers(request.scope).get("idempotency-key")
    error: dict[str, Any] | None = None
    if key is None:
        if mode == "required":
            error = {"type": "missing", "msg": "Field required", "input": None}
    elif not key and mode == "required":
        error = {"type": "string_too_short", "msg": "String should have at least 1 character"}
    elif len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
        error = {
            "type": "string_too_long",
            "msg": f"String should have at most {MAX_IDEMPOTENCY_KEY_LENGTH} characters",
        }
    if error is not None:
        raise RequestValidationError([{**error, "loc": ("header", "idempotency-key")}])
    return key


def _json_media(content_type: str | None) -> bool:
    """True for `application/json` and `application/*+json`; a body sent with no
    Content-Type is not read as JSON (the problem then says which header to send)."""
    if not content_type:
        return False
    media = content_type.partition(";")[0].strip().lower()
    main, _, sub = media.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def _errors(exc: ValidationError, *where: str) -> list[dict[str, Any]]:
    return [{**e, "loc": (*where, *e["loc"])} for e in exc.errors(include_url=False)]


class PipelineRoute(Route):
    """A plain Starlette route running the pipeline for one `Endpoint`; a path under `/v3`
    matches with or without the prefix."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.declared = endpoint
        self.body_model = endpoint.body
        super().__init__(endpoint.path, self._serve, methods=[endpoint.method])
        self.app = self._respond
        if endpoint.path.startswith(VERSION_PREFIX + "/"):
            pattern = self.path_regex.pattern
            assert pattern.startswith("^" + VERSION_PREFIX + "/"), pattern
            self.path_regex = re.compile("^(?:/v3)?" + pattern[1 + len(VERSION_PREFIX) :])
        self._params = {
            name: TypeAdapter(endpoint.params.get(name, str)) for name in self.param_convertors
        }
        self._methods = frozenset(self.methods or ())
        # The path's convertors that change what they match (`{name}` is a string as is).
        self._convertors = [
            (name, convertor)
            for name, convertor in self.param_convertors.items()
            if not isinstance(convertor, StringConvertor)
        ]
        self._body = TypeAdapter(endpoint.body) if endpoint.body is not None else None
        # A signature that covers the Idempotency-Key makes the key required (optional when
        # only an access token's caller signs).
        self._idempotency = _needs(endpoint).idempotency_key
        # Query parameters that may be repeated: every value is kept (the last one otherwise).
        self._list_params = frozenset(
            info.alias or name
            for name, info in (endpoint.query.model_fields if endpoint.query else {}).items()
            if "list[" in str(info.annotation)
        )

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """Starlette's match, naming this route in the scope (metrics label by its path)."""
        if scope["type"] != "http":
            return Match.NONE, {}
        found = self.path_regex.match(_route_path(scope))
        if found is None:
            return Match.NONE, {}
        params = found.groupdict()
        for name, convertor in self._convertors:
            params[name] = convertor.convert(params[name])
        if "path_params" in scope:  # under a mount
            params = {**scope["path_params"], **params}
        child = {"endpoint": self.endpoint, "path_params": params, "route": self}
        return (Match.FULL if scope["method"] in self._methods else Match.PARTIAL), child

    async def _respond(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The route's ASGI app: the pipeline's answer, or the answer the application's
        exception handler gives to the error it raised (one without a handler propagates,
        to ServiceMiddleware)."""
        request = Request(scope, receive, send)
        try:
            response = await self._serve(request)
        except Exception as exc:
            handler = _exception_handler(scope, exc)
            if handler is None:
                raise
            response = await handler(request, exc)
            exc.__traceback__ = None  # a reused exception would gather tracebacks
        await response(scope, receive, send)

    async def _serve(self, request: Request) -> Response:
        """The pipeline, recorded in the request log when it is on (http/request_log.py)."""
        journal: RequestLog | None = request.app.state.context.request_log
        if journal is None or self.declared.path in NOT_LOGGED:
            return await self._run(request)
        return await journal.record(request, self._run)

    async def _run(self, request: Request) -> Response:
        """The pipeline: authenticate, rate limit, verify the signature, read the key,
        parse, handle (the handler renders)."""
        declared = self.declared
        context: AppContext = request.app.state.context
        auth = declared.auth
        if auth.at_once is not None:
            caller = auth.at_once(request, context)
        else:
            caller = await auth.run(request, context)
        claims = _claims_of(caller)
        if claims is not None:
            request.scope[CLAIMS] = claims
            # The client's active state from the process's cache when it is fresh; else read.
            if not charge_cached_client(context, claims):
                await confirm_client(context, claims)
        signed = declared.signed
        if signed is not None and (not signed.only_with_access_token or claims is not None):
            assert claims is not None, "a signed route authenticates an access token"
            raw = await verify_signature(
                request,
                context,
                claims,
                names=signed.names,
                require_idempotency_key=signed.require_idempotency_key,
                allow_body_only=signed.allow_body_only,
            )
        elif self._body is not None:
            raw = await request.body()
        else:
            raw = b""
        key = _read_key(request, self._idempotency)
        params, query, body = self._parse(request, raw)
        return await declared.handler(Call(request, context, caller, body, raw, key, params, query))

    def _parse(self, request: Request, raw: bytes) -> tuple[dict[str, Any], Any, Any]:
        """Step 5: path parameters, query and body, validated once; every failing field
        of the three in one 400."""
        errors: list[dict[str, Any]] = []
        params: dict[str, Any] = {}
        for name, adapter in self._params.items():
            try:
                params[name] = adapter.validate_python(request.path_params[name])
            except ValidationError as exc:
                errors += _errors(exc, "path", name)
        query = None
        if self.declared.query is not None:
            sent = request.query_params
            values = {
                name: sent.getlist(name) if name in self._list_params else sent[name]
                for name in sent
            }
            try:
                query = self.declared.query.model_validate(values)
            except ValidationError as exc:
                errors += _errors(exc, "query")
        body, sent = self._parse_body(request, raw, errors)
        if errors:
            raise RequestValidationError(errors, body=sent)
        return params, query, body

    def _parse_body(self, request: Request, raw: bytes, errors: list[dict[str, Any]]) -> Any:
        """(the validated body, the body as sent) as FastAPI read it: JSON when the
        Content-Type says so, the bytes otherwise, None when empty."""
        if self._body is None:
            return None, None
        sent: Any = None
        if raw:
            if _json_media(request.headers.get("content-type")):
                try:
                    sent = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    errors.append(
                        {
                            "type": "json_invalid",
                            "loc": ("body", exc.pos),
                            "msg": "JSON decode error",
                            "input": {},
                            "ctx": {"error": exc.msg},
                        }
                    )
                    return None, None
            else:
                sent = raw
        if sent is None and self.declared.body_required:
            errors.append({"type": "missing", "loc": ("body",), "msg": "Field required"})
            return None, None
        if sent is None:
            return None, None
        try:
            return self._body.validate_python(sent), sent
        except ValidationError as exc:
            errors += _errors(exc, "body")
            return None, sent


ExceptionHandlers = tuple[Mapping[Any, Any], Mapping[int, Any]]
"""(handlers by exception class, handlers by HTTP status), as Starlette's ExceptionMiddleware
keeps them in the scope under `starlette.exception_handlers`."""


def _exception_handler(scope: Scope, exc: Exception) -> Any:
    """The handler the application registered for `exc` (by status for an HTTPException,
    else by the nearest class), or None."""
    by_class, by_status = scope.get("starlette.exception_handlers", ({}, {}))
    if isinstance(exc, HTTPException) and exc.status_code in by_status:
        return by_status[exc.status_code]
    for cls in type(exc).__mro__:
        if cls in by_class:
            return by_class[cls]
    return None


def _route_path(scope: Scope) -> str:
    """The request's path below the application's root path (as Starlette's routes read it)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("", "/"):
        return path[len(root) :]
    return path


def _section(path: str) -> str:
    """The first segment of `path` after the version prefix, if any: `/v3/payouts/1` and
    `/payouts/1` are both in `payouts`."""
    if path.startswith(VERSION_PREFIX) and path[len(VERSION_PREFIX) : len(VERSION_PREFIX) + 1] in (
        "",
        "/",
    ):
        path = path[len(VERSION_PREFIX) :]
    return path[1:].partition("/")[0]


def _route_section(route: BaseRoute) -> str | None:
    """The section every path `route` matches is in; None when it may match any path (a
    parameter in its first segment, a mount, a host)."""
    if not isinstance(route, Route):
        return None
    section = _section(route.path)
    return None if "{" in section else section


class ApiRouter:
    """Serves a request whose route (the first in `router`'s table to match it fully) is a
    pipeline route by calling that route directly, with the application's exception
    `handlers`; every other request, and anything but HTTP, goes to `rest` (the
    framework's own stack around the same router).

    It tries only the routes that can match the path's section (`_section`: `payouts` for
    `/v3/payouts/{id}`), in the table's order, rather than every route."""

    def __init__(self, router: Router, rest: ASGIApp, handlers: ExceptionHandlers) -> None:
        self.router = router
        self.rest = rest
        self.handlers = handlers
        self._indexed: tuple[int, int] = (0, -1)
        self._sections: dict[str, list[BaseRoute]] = {}
        self._anywhere: list[BaseRoute] = []

    def _candidates(self, path: str) -> list[BaseRoute]:
        """The routes that may match `path`, in the table's order (the index is made again
        whenever the table changed)."""
        table = self.router.routes
        if self._indexed != (id(table), len(table)):
            self._index(table)
        return self._sections.get(_section(path), self._anywhere)

    def _index(self, table: list[BaseRoute]) -> None:
        sections = {key for key in map(_route_section, table) if key is not None}
        self._sections = {key: [] for key in sections}
        self._anywhere = []
        for route in table:
            key = _route_section(route)
            for section, candidates in self._sections.items():
                if key is None or key == section:
                    candidates.append(route)
            if key is None:
                self._anywhere.append(route)
        self._indexed = (id(table), len(table))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for route in self._candidates(_route_path(scope)):
                match, child = route.matches(scope)
                if match is Match.FULL:
                    if isinstance(route, PipelineRoute):
                        scope.update(child)
                        scope["router"] = self.router
                        scope["starlette.exception_handlers"] = self.handlers
                        await route.app(scope, receive, send)
                        return
                    break
        await self.rest(scope, receive, send)


def routes(*endpoints: Endpoint | PipelineRoute) -> list[PipelineRoute]:
    """The Starlette routes serving `endpoints`, in order (routes made already, such as
    another module's, are kept as they are)."""
    return [e if isinstance(e, PipelineRoute) else PipelineRoute(e) for e in endpoints]


# --- The OpenAPI document, from the same declarations -------------------------------------


def _needs(endpoint: Endpoint) -> Needs:
    """What the document says a request must carry: the authenticator's bearer schemes, the
    signature, the Idempotency-Key."""
    signed = endpoint.signed
    auth = endpoint.auth.needs
    idempotency = endpoint.idempotency
    if signed is not None and signed.require_idempotency_key and idempotency is None:
        idempotency = "optional" if signed.only_with_access_token else "required"
    return Needs(
        schemes=auth.schemes,
        anonymous=auth.anonymous,
        signature=signed.header if signed else None,
        signature_required=not (signed and signed.only_with_access_token),
        idempotency_key=idempotency,
    )


def _stub(endpoint: Endpoint, path: str) -> Callable[..., Any]:
    """A never-called function whose signature tells FastAPI's schema generator the route's
    inputs, named and documented as the handler is."""
    parameters = []
    for name in re.findall(r"{(\w+)(?::\w+)?}", path):
        annotation = endpoint.params.get(name, str)
        parameters.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation)
        )
    if endpoint.idempotency == "required":
        header = Header(
            alias="idempotency-key", min_length=1, max_length=MAX_IDEMPOTENCY_KEY_LENGTH
        )
        parameters.append(
            inspect.Parameter(
                "idempotency_key", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[str, header]
            )
        )
    if endpoint.query is not None:
        parameters.append(
            inspect.Parameter(
                "query_",
                inspect.Parameter.KEYWORD_ONLY,
                annotation=Annotated[endpoint.query, Query()],
            )
        )
    if endpoint.body is not None:
        parameters.append(
            inspect.Parameter(
                "body",
                inspect.Parameter.KEYWORD_ONLY,
                annotation=endpoint.body if endpoint.body_required else endpoint.body | None,
                default=inspect.Parameter.empty if endpoint.body_required else None,
            )
        )

    async def stub(**kwargs: Any) -> None:
        raise AssertionError("documentation only")

    stub.__name__ = endpoint.handler.__name__
    stub.__doc__ = endpoint.handler.__doc__
    stub.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    documents(_needs(endpoint))(stub)
    return stub


def _documented(endpoint: Endpoint) -> Iterator[APIRoute]:
    """The routes FastAPI's generator documents for `endpoint`: its path and, under `/v3`,
    the same path without the prefix (one handler answers both)."""
    paths = [endpoint.path]
    if endpoint.path.startswith(VERSION_PREFIX + "/"):
        paths.append(endpoint.path[len(VERSION_PREFIX) :])
    for index, path in enumerate(paths):
        operation_id = endpoint.operation_id
        if operation_id and index:
            operation_id = f"{operation_id}_alias{index}"
        options: dict[str, Any] = {}
        if endpoint.response_class is not None:
            options["response_class"] = endpoint.response_class
        yield APIRoute(
            path,
            _stub(endpoint, path),
            methods=[endpoint.method],
            status_code=endpoint.status_code,
            response_model=endpoint.response_model,
            responses={**endpoint.errors, **endpoint.responses},
            tags=list(endpoint.tags),
            summary=endpoint.summary,
            operation_id=operation_id,
            deprecated=endpoint.deprecated or None,
            openapi_extra=endpoint.openapi_extra,
            **options,
        )


def openapi_routes(app_routes: Sequence[Any]) -> list[Any]:
    """The app's routes as the OpenAPI generator reads them: each pipeline route replaced,
    in place, by the documentation of its declaration."""
    found: list[Any] = []
    for route in app_routes:
        if isinstance(route, PipelineRoute):
            found.extend(_documented(route.declared))
        else:
            found.append(route)
    return found
