"""`POST /connect/token`: the OAuth 2 client credentials grant (docs/api.md).

Errors here follow RFC 6749 (`{"error": ...}`), the one exception to problem+json.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs

import orjson
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from bankrail.http.auth import (
    client_address,
    client_identity,
    record_wrong_credential,
    refuse_if_blocked,
)
from bankrail.http.pipeline import NOBODY, Call, Endpoint, routes
from bankrail.http.responses import json_response
from bankrail.security.credentials import check_client_secret


class TokenAnswer(BaseModel):
    """A granted access token."""

    access_token: str
    expires_in: int
    token_type: str
    scope: str


class OAuthError(BaseModel):
    """An RFC 6749 error answer."""

    error: str
    error_description: str | None = None


_TOKEN_REQUEST_SCHEMA = {
    "type": "object",
    "required": ["grant_type", "client_id", "client_secret"],
    "properties": {
        "grant_type": {"type": "string", "enum": ["client_credentials"]},
        "client_id": {"type": "string"},
        "client_secret": {"type": "string"},
        "scope": {"type": "string", "description": "space-separated scopes"},
    },
}


def _oauth_error(error: str, description: str, status: int = 400) -> Response:
    return json_response(
        status,
        {"error": error, "error_description": description},
        headers={"Cache-Control": "no-store"},
    )


_NOT_AN_OBJECT = "Send a form-encoded or JSON object body."


async def _read_form_or_json(request: Request) -> dict[str, Any] | str:
    """The fields of a form-encoded or JSON body, or what to say about a body that is neither
    (such as JSON sent without its content type, which reads as a form of nonsense names)."""
    raw = await request.body()
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _NOT_AN_OBJECT
        return parsed if isinstance(parsed, dict) else _NOT_AN_OBJECT
    if content_type in ("application/x-www-form-urlencoded", ""):
        if raw.lstrip().startswith(b"{"):
            sent = f"Content-Type {content_type}" if content_type else "no Content-Type"
            return (
                f"The body is JSON but was sent with {sent}: send it form-encoded "
                "(grant_type=client_credentials&client_id=...&client_secret=...) or send the "
                "JSON with the header Content-Type: application/json."
            )
        try:
            fields = parse_qs(raw.decode(), keep_blank_values=True, strict_parsing=False)
        except UnicodeDecodeError:
            return _NOT_AN_OBJECT
        return {name: values[-1] for name, values in fields.items()}
    return _NOT_AN_OBJECT


async def issue_token(call: Call[None, None]) -> Response:
    """Exchange client credentials for a bearer token valid for one hour of service time."""
    request, context = call.request, call.context
    # Requests per calling address, before anything is read (no client is known yet); wrong
    # secrets are limited apart, per address and per client (refuse_if_blocked below).
    context.token_rate_limits.take(client_address(request))
    fields = await _read_form_or_json(request)
    if isinstance(fields, str):
        return _oauth_error("invalid_request", fields)
    grant_type = fields.get("grant_type")
    client_id = fields.get("client_id")
    client_secret = fields.get("client_secret")
    scope = fields.get("scope")
    if not all(isinstance(v, str) for v in (grant_type, client_id, client_secret)):
        return _oauth_error(
            "invalid_request", "grant_type, client_id and client_secret are required strings."
        )
    # Absent is "every scope of the client"; present, it must be a string (JSON null too is
    # refused rather than read as absent).
    if "scope" in fields and not isinstance(scope, str):
        return _oauth_error("invalid_request", "scope, when given, must be a string.")
    assert isinstance(client_id, str)
    assert isinstance(client_secret, str)
    if "\x00" in client_id or "\x00" in client_secret:
        return _oauth_error("invalid_request", "Fields must not contain NUL characters.")
    if grant_type != "client_credentials":
        return _oauth_error("unsupported_grant_type", "Only client_credentials is supported.")
    refuse_if_blocked(request, client_identity(client_id))
    async with context.pool.acquire() as conn:
        client = await check_client_secret(conn, client_id, client_secret)
    if client is None:
        record_wrong_credential(request, client_identity(client_id))
        return _oauth_error("invalid_client", "Client authentication failed.")
    allowed = client.scopes
    requested = frozenset(scope.split()) if isinstance(scope, str) and scope.strip() else allowed
    if not requested <= allowed:
        return _oauth_error(
            "invalid_scope", f"Scopes not granted to this client: {sorted(requested - allowed)}."
        )
    ttl = context.settings.access_token_ttl_seconds
    token = context.tokens.issue_access_token(
        client_id, client.merchant_id, requested, context.clock.now(), timedelta(seconds=ttl)
    )
    return json_response(
        200,
        {
            "access_token": token,
            "expires_in": ttl,
            "token_type": "Bearer",
            "scope": " ".join(sorted(requested)),
        },
        headers={"Cache-Control": "no-store"},
    )


ROUTES = routes(
    # Open: the client authenticates by its body, read and checked by the handler (RFC 6749).
    Endpoint(
        "POST",
        "/connect/token",
        issue_token,
        NOBODY,
        response_model=TokenAnswer,
        errors={400: {"model": OAuthError, "description": "RFC 6749 error"}},
        tags=["auth"],
        summary="Obtain an access token (client credentials grant)",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/x-www-form-urlencoded": {"schema": _TOKEN_REQUEST_SCHEMA},
                    "application/json": {"schema": _TOKEN_REQUEST_SCHEMA},
                },
            }
        },
    ),
)
"""The token endpoint."""
