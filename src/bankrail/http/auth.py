"""FastAPI dependencies that authenticate callers and verify request signatures (docs/api.md)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Annotated

from fastapi import Depends, Request

from bankrail.context import AppContext
from bankrail.core.problems import Forbidden, Unauthenticated
from bankrail.core.threadlane import CRYPTO
from bankrail.http.deps import get_context
from bankrail.http.openapi import Needs, documents
from bankrail.security.headers import RequestHeaders, request_headers
from bankrail.security.signing import (
    SignatureError,
    mismatch,
    parse_signature,
    verification_inputs,
    verify_any,
)
from bankrail.security.tokens import AccessClaims, TokenError, hash_secret

__all__ = [
    "Admin",
    "AuthenticatedClient",
    "MandateClient",
    "Merchant",
    "SignedBody",
    "access_claims",
    "bearer_of",
    "bearer_token",
    "is_operator_token",
    "may_use_mandates",
    "require_mandate_scope",
    "require_operator",
    "require_payments_audience",
    "signed_body",
]

PAYMENTS_SCOPE = "payments"


def bearer_token(request: Request) -> str | None:
    """The bearer token of the Authorization header, if any."""
    return bearer_of(request.headers.get("authorization"))


def bearer_of(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer ...` header value, if it is one."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def access_claims(authorization: str | None, context: AppContext) -> AccessClaims:
    """The claims of the access token in an Authorization header value; raises
    Unauthenticated (401) when it is missing or invalid. Does not charge the rate limit."""
    token = bearer_of(authorization)
    if token is None:
        raise Unauthenticated("Missing bearer access token.")
    try:
        return context.tokens.read_access_token(token, context.clock.now())
    except TokenError as exc:
        if is_operator_token(token, context):
            raise Unauthenticated(
                "Invalid access token: this is an operator token; use a merchant access token "
                "from /connect/token."
            ) from exc
        raise Unauthenticated(f"Invalid access token: {exc}.") from exc


def is_operator_token(token: str, context: AppContext) -> bool:
    """Whether `token` is the operator token (compared in constant time)."""
    expected = context.admin_token_hash
    return expected is not None and hmac.compare_digest(hash_secret(token), expected)


async def read_access_claims(request: Request, context: AppContext) -> AccessClaims:
    """The caller's access-token claims, charged to the caller's rate limit; 401 when the
    token is missing or invalid, 429 when the client is over its rate."""
    claims = access_claims(request.headers.get("authorization"), context)
    context.rate_limits.take(claims.client_id)
    return claims


def require_payments_audience(claims: AccessClaims) -> AccessClaims:
    """403 InvalidAudience unless the token may call the payments and payouts APIs."""
    if PAYMENTS_SCOPE not in claims.audiences:
        raise Forbidden(
            "InvalidAudience: the access token's audience does not include this API; "
            "request a token with the `payments` scope."
        )
    return claims


# Each of these is one flat dependency (it takes only the request): FastAPI's cost grows with
# every level of nested dependencies, and these run on every merchant request.


@documents(Needs(schemes=("merchantToken",)))
async def _access_claims(request: Request) -> AccessClaims:
    return await read_access_claims(request, get_context(request))


AuthenticatedClient = Annotated[AccessClaims, Depends(_access_claims)]


@documents(Needs(schemes=("merchantToken",)))
async def _payments_client(request: Request) -> AccessClaims:
    return require_payments_audience(await read_access_claims(request, get_context(request)))


Merchant = Annotated[AccessClaims, Depends(_payments_client)]

MANDATE_SCOPES = {
    "sweeping": "recurring_payments:sweeping",
    "commercial": "recurring_payments:commercial",
}


def may_use_mandates(claims: AccessClaims, mandate_type: str) -> bool:
    """True when the token's audience covers mandates of this type: the type's
    `recurring_payments:*` scope, or `payments`."""
    return bool({PAYMENTS_SCOPE, MANDATE_SCOPES[mandate_type]} & claims.audiences)


def require_mandate_scope(claims: AccessClaims, mandate_type: str) -> None:
    """403 InvalidAudience unless the token may act on mandates of this type."""
    if not may_use_mandates(claims, mandate_type):
        raise Forbidden(
            f"InvalidAudience: the access token's audience does not include {mandate_type} "
            f"mandates; request a token with the `{MANDATE_SCOPES[mandate_type]}` or "
            "`payments` scope."
        )


@documents(Needs(schemes=("merchantToken",)))
async def _mandates_client(request: Request) -> AccessClaims:
    claims = await read_access_claims(request, get_context(request))
    if not any(may_use_mandates(claims, kind) for kind in MANDATE_SCOPES):
        raise Forbidden(
            "InvalidAudience: the access token's audience does not include this API; request "
            "a token with the `recurring_payments:sweeping`, `recurring_payments:commercial` "
            "or `payments` scope."
        )
    return claims


MandateClient = Annotated[AccessClaims, Depends(_mandates_client)]
"""A caller of the mandate API: a token with a `recurring_payments:*` scope or `payments`;
`require_mandate_scope` then checks the one a mandate's type needs."""


async def require_operator(request: Request, context: AppContext) -> None:
    """401 unless the request carries the operator token."""
    token = bearer_token(request)
    if token is None:
        raise Unauthenticated("Missing operator bearer token.")
    if not is_operator_token(token, context):
        raise Unauthenticated("Invalid operator token.")


@documents(Needs(schemes=("operatorToken",)))
async def _admin(request: Request) -> None:
    await require_operator(request, get_context(request))


Admin = Annotated[None, Depends(_admin)]


async def verify_signature(
    request: Request,
    context: AppContext,
    claims: AccessClaims,
    *,
    names: tuple[str, ...] = ("Svc-Signature", "X-SVC-Signature"),
    require_idempotency_key: bool = True,
    allow_body_only: bool = False,
) -> bytes:
    """Verify the request's signature with the caller's registered key; returns the body.

    The headers are the request's `RequestHeaders` (security/headers.py), the very values the
    idempotency layer reads: a repeated signature header, `Idempotency-Key`, or header named
    in the signature's `tl_headers` is 400 before anything is verified or stored."""
    headers = request_headers(request.scope)
    headers.require_once((*names, "Idempotency-Key"))
    body = await request.body()
    raw_path = request.scope.get("raw_path")
    await _verify_signed_request(
        context,
        claims,
        method=request.method,
        path=raw_path.decode("latin-1") if raw_path else request.url.path,
        headers=headers,
        signature=next((headers[n] for n in names if n in headers), None),
        body=body,
        names=names,
        require_idempotency_key=require_idempotency_key,
        allow_body_only=allow_body_only,
    )
    return body


async def _verify_signed_request(
    context: AppContext,
    claims: AccessClaims,
    *,
    method: str,
    path: str,
    headers: RequestHeaders,
    signature: str | None,
    body: bytes,
    names: tuple[str, ...] = ("Svc-Signature", "X-SVC-Signature"),
    require_idempotency_key: bool = True,
    allow_body_only: bool = False,
) -> None:
    """Check `signature` (the value of the first of `names` present) over the request with
    the caller's registered key; raises Unauthenticated (401) when it does not verify, and
    RepeatedHeader (400) when a header the signature covers was sent more than once.

    `path` is the path as sent."""
    if signature is None:
        raise Unauthenticated(f"Invalid request signature: the {names[0]} header is missing.")
    try:
        parsed = parse_signature(signature)
    except SignatureError as exc:
        raise Unauthenticated(_sentence(f"Invalid request signature: {exc}")) from exc
    if require_idempotency_key and not headers.get("idempotency-key"):
        raise Unauthenticated("Invalid request signature: the Idempotency-Key header is missing.")
    headers.require_once(parsed.header.tl_headers)
    try:
        key = await context.public_keys.get(context.pool, claims.merchant_id, parsed.header.kid)
        if key is None:
            raise SignatureError(f"no signing key with kid {parsed.header.kid!r}")
        der, inputs = verification_inputs(
            parsed,
            method=method,
            path=path,
            headers=headers,
            body=body,
            required_headers=("Idempotency-Key",) if require_idempotency_key else (),
            allow_body_only=allow_body_only,
        )
        if context.verifier is not None:
            verified = await context.verifier.verify(key.der, der, inputs)
        else:
            verified = await CRYPTO.run(partial(verify_any, key.key, der, inputs))
        if not verified:
            raise mismatch(parsed)
    except SignatureError as exc:
        raise Unauthenticated(_sentence(f"Invalid request signature: {exc}")) from exc


def _sentence(text: str) -> str:
    return text if text.endswith(("?", ".", "!")) else text + "."


def signed_body(
    *,
    header: str = "Svc-Signature",
    require_idempotency_key: bool = True,
    allow_body_only: bool = False,
) -> Callable[..., Awaitable[bytes]]:
    """A dependency that verifies the request signature and returns the raw body.

    Any of `Svc-Signature` / `X-SVC-Signature` is read (the named one first). A missing or
    unparsable signature, an unknown kid, a mismatch, or a mandatory Idempotency-Key that is
    absent from the request or from `tl_headers` is 401 "Invalid request signature". A
    signature header, `Idempotency-Key` or `tl_headers` header sent more than once is 400.
    """
    names = (header, "X-SVC-Signature" if header == "Svc-Signature" else "Svc-Signature")

    @documents(
        Needs(signature=header, idempotency_key="required" if require_idempotency_key else None)
    )
    async def dependency(request: Request, claims: Merchant) -> bytes:
        return await verify_signature(
            request,
            get_context(request),
            claims,
            names=names,
            require_idempotency_key=require_idempotency_key,
            allow_body_only=allow_body_only,
        )

    return dependency


SignedBody = Annotated[bytes, Depends(signed_body())]
