"""Mandate routes: `/v3/mandates` (create, read, list, the consent journey, revoke, funds,
constraints) and the mock bank's headless consent action."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import PlainTextResponse

from bankrail.context import AppContext
from bankrail.core.money import MAX_AMOUNT_IN_MINOR
from bankrail.core.problems import Unauthenticated
from bankrail.db.pool import Connection
from bankrail.http.auth import (
    MANDATE_SCOPES,
    MandateClient,
    bearer_token,
    may_use_mandates,
    require_mandate_scope,
    verify_signature,
)
from bankrail.http.deps import Context
from bankrail.http.idempotent import idempotency_key, respond_once
from bankrail.http.listing import ListWindow
from bankrail.http.openapi import (
    ERRORS_AUTH,
    ERRORS_AUTH_NOT_FOUND,
    ERRORS_SIGNED_POST,
    Needs,
    documents,
)
from bankrail.http.responses import json_response
from bankrail.http.schema_types import PROVIDER_RETURN_URL, AuthorizationFlowAnswer
from bankrail.mandates import service
from bankrail.mandates.schemas import (
    ConsentAction,
    ConstraintsOut,
    FundsOut,
    MandateCreated,
    MandateFlowRequest,
    MandateList,
    MandateOut,
    MandateProviderSubmit,
    MandateRequest,
)
from bankrail.rails.mock_bank import provider_return_url
from bankrail.security.tokens import AccessClaims, TokenError

router = APIRouter(tags=["mandates"])
sandbox_router = APIRouter(tags=["mock bank"])

Effect = Callable[[Connection], Awaitable[tuple[int, Any]]]
ERRORS_READ_CONFLICT = {**ERRORS_AUTH_NOT_FOUND, 409: ERRORS_SIGNED_POST[409]}


async def _signed(
    request: Request, context: AppContext, claims: AccessClaims, effect: Effect
) -> Response:
    """Verify the signature, then run `effect` once per Idempotency-Key."""
    raw = await verify_signature(request, context, claims)
    return await respond_once(
        context,
        request,
        scope=f"v3:{claims.merchant_id}",
        key=idempotency_key(request),
        body=raw,
        effect=effect,
    )


async def _on_mandate(
    request: Request,
    context: AppContext,
    claims: AccessClaims,
    mandate_id: uuid.UUID,
    action: Callable[[Connection, Any], Awaitable[tuple[int, Any]]],
) -> Response:
    """A signed action on the caller's mandate, locked for the transaction."""

    async def effect(conn: Connection) -> tuple[int, Any]:
        row = await service.get_mandate_row(conn, mandate_id, claims.merchant_id, lock=True)
        require_mandate_scope(claims, row["type"])
        return await action(conn, row)

    return await _signed(request, context, claims, effect)


@router.post(
    "/v3/mandates",
    status_code=201,
    response_model=MandateCreated,
    responses=ERRORS_SIGNED_POST,
)
@documents(Needs(signature="Svc-Signature", idempotency_key="required"))
async def create_mandate(
    body: MandateRequest, request: Request, context: Context, claims: MandateClient
) -> Response:
    """Create a mandate (GBP, sweeping or commercial) into one of the merchant's accounts; the
    payer then gives their consent at their bank."""
    require_mandate_scope(claims, body.mandate.type)

    async def effect(conn: Connection) -> tuple[int, Any]:
        now = context.clock.now()
        created = await service.create_mandate(conn, claims.merchant_id, body, now)
        return 201, {
            "id": str(created["id"]),
            "user": {"id": created["user_id"]},
            "resource_token": service.resource_token(context.tokens, created["id"], now),
            "status": "authorization_required",
        }

    return await _signed(request, context, claims, effect)


@router.get("/v3/mandates", response_model=MandateList, responses=ERRORS_AUTH)
async def list_mandates(
    context: Context,
    claims: MandateClient,
    window: ListWindow,
    user_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> Response:
    """The caller's mandates (of the types its token covers), newest first."""
    types = frozenset(kind for kind in MANDATE_SCOPES if may_use_mandates(claims, kind))
    async with context.pool.acquire() as conn:
        items, next_cursor = await service.list_mandates(
            conn, claims.merchant_id, window, types=types, user_id=user_id
        )
    return json_response(200, {"items": items, "pagination": {"next_cursor": next_cursor}})


async def _readable(context: AppContext, claims: AccessClaims, mandate_id: uuid.UUID) -> Any:
    async with context.pool.acquire() as conn:
        row = await service.get_mandate_row(conn, mandate_id, claims.merchant_id)
    require_mandate_scope(claims, row["type"])
    return row


@router.get("/v3/mandates/{mandate_id}", response_model=MandateOut, responses=ERRORS_AUTH_NOT_FOUND)
async def get_mandate(mandate_id: uuid.UUID, context: Context, claims: MandateClient) -> Response:
    """The mandate with its status, constraints, remitter and failure or revocation fields."""
    return json_response(200, service.render(await _readable(context, claims, mandate_id)))


@router.post(
    "/v3/mandates/{mandate_id}/authorization-flow",
    response_model=AuthorizationFlowAnswer,
    responses=ERRORS_SIGNED_POST,
)
@documents(Needs(signature="Svc-Signature", idempotency_key="required"))
async def start_mandate_authorization(
    mandate_id: uuid.UUID,
    body: MandateFlowRequest,
    request: Request,
    context: Context,
    claims: MandateClient,
) -> Response:
    """Start the payer's consent journey: the next action is a provider list or a redirect to
    the bank's consent page."""

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        now = context.clock.now()
        updated = await service.start_authorization(
            conn,
            row,
            return_uri=body.redirect.return_uri if body.redirect else None,
            now=now,
            allow_listed_only=not context.settings.sandbox,
            powers=context.settings.powers,
            consent=body.consent is not None,
        )
        return 200, service.flow_answer(
            updated, context.settings.public_url, context.tokens, now, context.settings.powers
        )

    return await _on_mandate(request, context, claims, mandate_id, action)


@router.post(
    "/v3/mandates/{mandate_id}/authorization-flow/actions/provider-selection",
    response_model=AuthorizationFlowAnswer,
    responses=ERRORS_SIGNED_POST,
)
@documents(Needs(signature="Svc-Signature", idempotency_key="required"))
async def submit_mandate_provider(
    mandate_id: uuid.UUID,
    body: MandateProviderSubmit,
    request: Request,
    context: Context,
    claims: MandateClient,
) -> Response:
    """Submit the bank the payer chose; the next action takes them to its consent page."""

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        now = context.clock.now()
        powers = context.settings.powers
        updated = await service.select_provider(conn, row, body.provider_id, now, powers)
        return 200, service.flow_answer(
            updated, context.settings.public_url, context.tokens, now, powers
        )

    return await _on_mandate(request, context, claims, mandate_id, action)


@router.post(
    "/v3/mandates/{mandate_id}/authorization-flow/actions/consent",
    response_model=AuthorizationFlowAnswer,
    responses=ERRORS_SIGNED_POST,
)
@documents(Needs(signature="Svc-Signature", idempotency_key="required"))
async def submit_mandate_consent(
    mandate_id: uuid.UUID, request: Request, context: Context, claims: MandateClient
) -> Response:
    """The payer consents (the start request declared `consent`); the next action takes them
    to the bank's consent page. No body."""

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        now = context.clock.now()
        powers = context.settings.powers
        updated = await service.give_consent(conn, row, powers)
        return 200, service.flow_answer(
            updated, context.settings.public_url, context.tokens, now, powers
        )

    return await _on_mandate(request, context, claims, mandate_id, action)


@router.post(
    "/v3/mandates/{mandate_id}/revoke",
    status_code=204,
    response_class=Response,
    responses=ERRORS_SIGNED_POST,
)
@documents(Needs(signature="Svc-Signature", idempotency_key="required"))
async def revoke_mandate(
    mandate_id: uuid.UUID, request: Request, context: Context, claims: MandateClient
) -> Response:
    """Revoke an authorised mandate: no further payment can be taken on it."""

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        await service.revoke(conn, row, context.clock.now())
        return 204, {}

    answer = await _on_mandate(request, context, claims, mandate_id, action)
    return Response(status_code=204) if answer.status_code == 204 else answer


@router.get(
    "/v3/mandates/{mandate_id}/funds", response_model=FundsOut, responses=ERRORS_READ_CONFLICT
)
async def confirm_funds(
    mandate_id: uuid.UUID,
    context: Context,
    claims: MandateClient,
    amount_in_minor: Annotated[int, Query(gt=0, le=MAX_AMOUNT_IN_MINOR)],
    currency: Annotated[str, Query(pattern=r"^[A-Z]{3}$")],
) -> Response:
    """Whether the payer's account holds the amount now (an authorised mandate only)."""
    row = await _readable(context, claims, mandate_id)
    answer = service.confirm_funds(row, amount_in_minor, currency, context.clock.now())
    return json_response(200, answer)


@router.get(
    "/v3/mandates/{mandate_id}/constraints",
    response_model=ConstraintsOut,
    responses=ERRORS_AUTH_NOT_FOUND,
)
async def mandate_constraints(
    mandate_id: uuid.UUID, context: Context, claims: MandateClient
) -> Response:
    """The constraints, with each periodic limit's current period and what it has left."""
    row = await _readable(context, claims, mandate_id)
    async with context.pool.acquire() as conn:
        answer = await service.current_constraints(conn, row, context.clock.now())
    return json_response(200, answer)


@sandbox_router.post(
    "/mock-bank/api/vrp-consents/{mandate_id}/action",
    status_code=202,
    response_class=PlainTextResponse,
    responses={**ERRORS_READ_CONFLICT, 202: PROVIDER_RETURN_URL},
)
@documents(Needs(schemes=("mockBankToken",)))
async def mock_bank_consent_action(
    mandate_id: uuid.UUID, body: ConsentAction, request: Request, context: Context
) -> Response:
    """The payer's decision on a mandate at the mock bank, headless (for tests and CI):
    `Authorise` (optionally with the remitter's balance), `RejectAuthorisation` (or
    `Reject`), `Cancel`, or later `Revoke`; answers the provider return URL as plain text."""
    token = bearer_token(request)
    if token is None:
        raise Unauthenticated("Missing bearer token (the token of the redirect uri).")
    now = context.clock.now()
    try:
        claims = context.tokens.read_resource_token(token, now, kind=service.PROVIDER_TOKEN_KIND)
    except TokenError as exc:
        raise Unauthenticated(f"Invalid mock bank token: {exc}.") from exc
    if claims.payment_id != mandate_id:
        raise Unauthenticated("The token was issued for another mandate.")
    async with context.pool.acquire() as conn, conn.transaction():
        row = await service.get_mandate_row(conn, mandate_id, None, lock=True)
        redirect = await service.bank_action(
            conn,
            row,
            body.action,
            now,
            powers=context.settings.powers,
            remitter_balance=body.remitter_balance_in_minor,
        )
    url = provider_return_url(redirect, context.settings.public_url, "mandate", mandate_id)
    return PlainTextResponse(url, status_code=202)


__all__ = ["router", "sandbox_router"]
