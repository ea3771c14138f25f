"""FastAPI dependencies that authenticate callers and verify request signatures (docs/api.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Annotated

from fastapi import Depends, Request

from bankrail.core.problems import Forbidden, Unauthenticated
from bankrail.core.threadlane import CRYPTO
from bankrail.http.context import AppContext
from bankrail.http.deps import get_context
from bankrail.http.openapi import Needs, documents
from bankrail.security.credentials import check_operator_token
from bankrail.security.headers import RequestHeaders, request_headers
from bankrail.security.ratelimit import address_key
from bankrail.security.signing import (
    SignatureError,
    mismatch,
    parse_signature,
    signature_digest,
    verification_inputs,
    verify_any,
)
from bankrail.security.tokens import (
    AccessClaims,
    TokenError,
    TokenExpired,
)

__all__ = [
    "Admin",
    "AuthenticatedClient",
    "MandateClient",
    "Merchant",
    "SignedBody",
    "accepted_signature",
    "access_claims",
    "bearer_of",
    "bearer_token",
    "charge_cached_client",
    "charge_client",
    "client_address",
    "client_identity",
    "confirm_client",
    "console_user_identity",
    "may_use_mandates",
    "record_wrong_credential",
    "refuse_if_blocked",
    "require_mandate_scope",
    "require_mandates_audience",
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


def client_address(request: Request) -> str:
    """The calling address, as the server reports it (X-Forwarded-For only from the proxies
    uvicorn trusts: docs/operations.md, "Wrong credentials")."""
    return request.client.host if request.client else "unknown"


def client_identity(client_id: str) -> str:
    """The identity of an API client for the credential limiter (the key its client secret,
    its console sign-in and its access tokens share)."""
    return "client:" + client_id


def console_user_identity(email: str) -> str:
    """The identity of a console user for the credential limiter: the email they sign in
    with, case folded (as console users' emails are compared)."""
    return "console-user:" + email.strip().casefold()


def refuse_if_blocked(request: Request, identity: str | None = None) -> None:
    """429 (RateLimited, with Retry-After) while the caller's address, or `identity`, is
    blocked for presenting too many wrong credentials; call it before checking a credential
    (a right one is refused too while blocked). While nothing is blocked it costs one test.

    `identity` names whom the credential claims to be, one namespace per kind:
    `client_identity(client_id)`, `console_user_identity(email)`; None when it claims nobody in
    particular (the operator token)."""
    limiter = get_context(request).credential_limits
    if limiter.blocking:
        limiter.refuse_blocked(*_limited_keys(request, identity))


def record_wrong_credential(request: Request, identity: str | None = None) -> None:
    """Count a wrong credential (client secret, token, password; not a missing one, not a bad
    request signature) against the caller's address and `identity` (as for
    `refuse_if_blocked`); the caller then answers its own 401. Raises RateLimited (429)
    instead, counting nothing, when either is blocked already. More than the limit within
    the window (BANKRAIL_WRONG_CREDENTIAL_LIMIT, _WINDOW_SECONDS) blocks both."""
    get_context(request).credential_limits.count_wrong(*_limited_keys(request, identity))


def _limited_keys(request: Request, identity: str | None) -> tuple[str, ...]:
    address = address_key(client_address(request))
    return (address, identity) if identity else (address,)


def access_claims(request: Request, context: AppContext) -> AccessClaims:
    """The claims of the request's access token; raises Unauthenticated (401) when it is
    missing or invalid, and RateLimited (429) while the caller's address is blocked for wrong
    credentials. An invalid token (not an expired one, nor the operator token: those were
    issued here) counts as a wrong credential against the address alone: whom a token that
    does not verify claims to be is unproven, so naming a client locks nobody out, and a token
    that verifies is no guess. Does not charge the rate limit."""
    token = bearer_of(request.headers.get("authorization"))
    if token is None:
        raise Unauthenticated("Missing bearer access token.")
    try:
        claims = context.tokens.read_access_token(token, context.clock.now())
    except TokenExpired as exc:
        refuse_if_blocked(request)
        raise Unauthenticated(f"Invalid access token: {exc}.") from exc
    except TokenError as exc:
        refuse_if_blocked(request)
        if check_operator_token(token, context.admin_token_hash):
            raise Unauthenticated(
                "Invalid access token: this is an operator token; use a merchant access token "
                "from /connect/token."
            ) from exc
        record_wrong_credential(request)
        raise Unauthenticated(f"Invalid access token: {exc}.") from exc
    if context.credential_limits.blocking:
        refuse_if_blocked(request)
    return claims


async def read_access_claims(request: Request, context: AppContext) -> AccessClaims:
    """The caller's access-token claims, charged to the caller's rate limit; 401 when the
    token is missing or invalid or its client was revoked (within a second on every host),
    429 when the client is over its rate or blocked for wrong credentials."""
    claims = access_claims(request, context)
    await charge_client(context, claims)
    return claims


async def charge_client(context: AppContext, claims: AccessClaims) -> None:
    """Charge one request to the client's rate limit (429 when it is over its rate), then
    refuse (401) a client revoked since its token was issued (within a second on every
    host)."""
    if not charge_cached_client(context, claims):
        await confirm_client(context, claims)


def charge_cached_client(context: AppContext, claims: AccessClaims) -> bool:
    """`charge_client` without a coroutine when the process holds a fresh entry of the
    client (the common case: a revocation drops the entries at once on the revoking host,
    through NOTIFY elsewhere, and none is trusted past a second): charges the rate limit,
    then returns True (active) or raises 401 (revoked). False when the entry must be read:
    the request is charged, and `confirm_client` answers the rest."""
    context.rate_limits.take(claims.client_id)
    known, active = context.clients.cached(claims.client_id)
    if not known:
        return False
    if active is None:
        raise Unauthenticated("Invalid access token: its client was revoked.")
    return True


async def confirm_client(context: AppContext, claims: AccessClaims) -> None:
    """401 when the client was revoked since its token was issued (read from the database
    unless the process holds a fresh entry); does not charge the rate limit."""
    if await context.clients.get(context.pool, claims.client_id) is None:
        raise Unauthenticated("Invalid access token: its client was revoked.")


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


def require_mandates_audience(claims: AccessClaims) -> AccessClaims:
    """403 InvalidAudience unless the token may call the mandate API: a `recurring_payments:*`
    scope or `payments`."""
    if not any(may_use_mandates(claims, kind) for kind in MANDATE_SCOPES):
        raise Forbidden(
            "InvalidAudience: the access token's audience does not include this API; request "
            "a token with the `recurring_payments:sweeping`, `recurring_payments:commercial` "
            "or `payments` scope."
        )
    return claims


@documents(Needs(schemes=("merchantToken",)))
async def _mandates_client(request: Request) -> AccessClaims:
    return require_mandates_audience(await read_access_claims(request, get_context(request)))


MandateClient = Annotated[AccessClaims, Depends(_mandates_client)]
"""A caller of the mandate API: a token with a `recurring_payments:*` scope or `payments`;
`require_mandate_scope` then checks the one a mandate's type needs."""


async def require_operator(request: Request, context: AppContext) -> None:
    """401 unless the request carries the operator token; a wrong one counts against the
    caller's address, and 429 while that is blocked for wrong credentials."""
    token = bearer_token(request)
    if token is None:
        raise Unauthenticated("Missing operator bearer token.")
    refuse_if_blocked(request)
    if not check_operator_token(token, context.admin_token_hash):
        record_wrong_credential(request)
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
    The signature's digest is then the request's `accepted_signature`.

    The headers are the request's `RequestHeaders` (security/headers.py), the very values the
    idempotency layer reads: a repeated signature header, `Idempotency-Key`, or header named
    in the signature's `tl_headers` is 400 before anything is verified or stored."""
    headers = request_headers(request.scope)
    headers.require_once((*names, "Idempotency-Key"))
    body = await request.body()
    raw_path = request.scope.get("raw_path")
    request.state.signature_digest = await _verify_signed_request(
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
) -> bytes:
    """Check `signature` (the value of the first of `names` present) over the request with
    the caller's registered key and return its `signature_digest`; raises Unauthenticated
    (401) when it does not verify, and RepeatedHeader (400) when a header the signature
    covers was sent more than once.

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
    return signature_digest(parsed)


def accepted_signature(request: Request) -> bytes | None:
    """The digest of the request's signature once `verify_signature` accepted it (what
    idempotency remembers so that a signed request never takes effect twice), else None."""
    digest: bytes | None = getattr(request.state, "signature_digest", None)
    return digest


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
