"""Mandate routes: `/v3/mandates` (create, read, list, the consent journey, revoke, funds,
constraints) and the mock bank's headless consent action."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from bankrail.core.money import MAX_AMOUNT_IN_MINOR
from bankrail.core.problems import Unauthenticated
from bankrail.db.pool import Connection
from bankrail.http.auth import (
    MANDATE_SCOPES,
    bearer_token,
    may_use_mandates,
    require_mandate_scope,
)
from bankrail.http.context import AppContext
from bankrail.http.idempotent import idempotency_key, respond_once
from bankrail.http.listing import WindowQuery
from bankrail.http.openapi import ERRORS_AUTH, ERRORS_AUTH_NOT_FOUND, ERRORS_SIGNED_POST, Needs
from bankrail.http.pipeline import MANDATES, NOBODY, SIGNED, Call, Endpoint, routes
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
from bankrail.security.idempotent_commit import LockedEffect
from bankrail.security.tokens import AccessClaims, TokenError


class MandateListQuery(WindowQuery):
    """`GET /v3/mandates`: the window and the filter."""

    user_id: str | None = Field(None, min_length=1, max_length=200)


class FundsQuery(BaseModel):
    """`GET /v3/mandates/{id}/funds`."""

    amount_in_minor: int = Field(gt=0, le=MAX_AMOUNT_IN_MINOR)
    currency: str = Field(pattern=r"^[A-Z]{3}$")


Effect = Callable[[Connection], Awaitable[tuple[int, Any]]]
ERRORS_READ_CONFLICT = {**ERRORS_AUTH_NOT_FOUND, 409: ERRORS_SIGNED_POST[409]}


async def _signed(
    request: Request,
    context: AppContext,
    claims: AccessClaims,
    effect: Effect | LockedEffect[tuple[int, Any]],
) -> Response:
    """Verify the signature, then run `effect` once per Idempotency-Key."""
    raw = await request.body()  # its signature verified by the pipeline
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

    async def act(conn: Connection, locked: Any | None) -> tuple[int, Any]:
        row = await service.get_mandate_row(
            conn, mandate_id, claims.merchant_id, lock=True, locked=locked
        )
        require_mandate_scope(claims, row["type"])
        return await action(conn, row)

    effect = LockedEffect(service.LOCK_MANDATES, mandate_id, claims.merchant_id, act)
    return await _signed(request, context, claims, effect)


async def create_mandate(call: Call[MandateRequest, None]) -> Response:
    """Create a mandate (GBP, sweeping or commercial) into one of the merchant's accounts; the
    payer then gives their consent at their bank."""
    body, request, context, claims = call.body, call.request, call.context, call.merchant
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


async def list_mandates(call: Call[None, MandateListQuery]) -> Response:
    """The caller's mandates (of the types its token covers), newest first."""
    context, claims, window = call.context, call.merchant, call.query.window()
    user_id = call.query.user_id
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


async def get_mandate(call: Call[None, None]) -> Response:
    """The mandate with its status, constraints, remitter and failure or revocation fields."""
    mandate_id, context, claims = call.params["mandate_id"], call.context, call.merchant
    return json_response(200, service.render(await _readable(context, claims, mandate_id)))


async def start_mandate_authorization(call: Call[MandateFlowRequest, None]) -> Response:
    """Start the payer's consent journey: the next action is a provider list or a redirect to
    the bank's consent page."""
    mandate_id, context, claims = call.params["mandate_id"], call.context, call.merchant
    body, request = call.body, call.request

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


async def submit_mandate_provider(call: Call[MandateProviderSubmit, None]) -> Response:
    """Submit the bank the payer chose; the next action takes them to its consent page."""
    mandate_id, context, claims = call.params["mandate_id"], call.context, call.merchant
    body, request = call.body, call.request

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        now = context.clock.now()
        powers = context.settings.powers
        updated = await service.select_provider(conn, row, body.provider_id, now, powers)
        return 200, service.flow_answer(
            updated, context.settings.public_url, context.tokens, now, powers
        )

    return await _on_mandate(request, context, claims, mandate_id, action)


async def submit_mandate_consent(call: Call[None, None]) -> Response:
    """The payer consents (the start request declared `consent`); the next action takes them
    to the bank's consent page. No body."""
    mandate_id, context, claims = call.params["mandate_id"], call.context, call.merchant
    request = call.request

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        now = context.clock.now()
        powers = context.settings.powers
        updated = await service.give_consent(conn, row, powers)
        return 200, service.flow_answer(
            updated, context.settings.public_url, context.tokens, now, powers
        )

    return await _on_mandate(request, context, claims, mandate_id, action)


async def revoke_mandate(call: Call[None, None]) -> Response:
    """Revoke an authorised mandate: no further payment can be taken on it."""
    mandate_id, context, claims = call.params["mandate_id"], call.context, call.merchant
    request = call.request

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        await service.revoke(conn, row, context.clock.now())
        return 204, {}

    answer = await _on_mandate(request, context, claims, mandate_id, action)
    return Response(status_code=204) if answer.status_code == 204 else answer


async def confirm_funds(call: Call[None, FundsQuery]) -> Response:
    """Whether the payer's account holds the amount now (an authorised mandate only)."""
    mandate_id, context, claims = call.params["mandate_id"], call.context, call.merchant
    amount_in_minor, currency = call.query.amount_in_minor, call.query.currency
    row = await _readable(context, claims, mandate_id)
    answer = service.confirm_funds(row, amount_in_minor, currency, context.clock.now())
    return json_response(200, answer)


async def mandate_constraints(call: Call[None, None]) -> Response:
    """The constraints, with each periodic limit's current period and what it has left."""
    mandate_id, context, claims = call.params["mandate_id"], call.context, call.merchant
    row = await _readable(context, claims, mandate_id)
    async with context.pool.acquire() as conn:
        answer = await service.current_constraints(conn, row, context.clock.now())
    return json_response(200, answer)


async def mock_bank_consent_action(call: Call[ConsentAction, None]) -> Response:
    """The payer's decision on a mandate at the mock bank, headless (for tests and CI):
    `Authorise` (optionally with the remitter's balance), `RejectAuthorisation` (or
    `Reject`), `Cancel`, or later `Revoke`; answers the provider return URL as plain text."""
    mandate_id, body, request, context = (
        call.params["mandate_id"],
        call.body,
        call.request,
        call.context,
    )
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


_MANDATE = {"mandate_id": uuid.UUID}


def _read(path: str, handler: Any, model: Any, errors: Any, **options: Any) -> Endpoint:
    return Endpoint(
        "GET",
        path,
        handler,
        MANDATES,
        params=_MANDATE,
        response_model=model,
        errors=errors,
        tags=["mandates"],
        **options,
    )


def _signed_post(path: str, handler: Any, body: Any, model: Any, **options: Any) -> Endpoint:
    return Endpoint(
        "POST",
        path,
        handler,
        MANDATES,
        signed=SIGNED,
        body=body,
        params=_MANDATE,
        response_model=model,
        errors=ERRORS_SIGNED_POST,
        tags=["mandates"],
        **options,
    )


ROUTES = routes(
    _signed_post("/v3/mandates", create_mandate, MandateRequest, MandateCreated, status_code=201),
    _read("/v3/mandates", list_mandates, MandateList, ERRORS_AUTH, query=MandateListQuery),
    _read("/v3/mandates/{mandate_id}", get_mandate, MandateOut, ERRORS_AUTH_NOT_FOUND),
    _signed_post(
        "/v3/mandates/{mandate_id}/authorization-flow",
        start_mandate_authorization,
        MandateFlowRequest,
        AuthorizationFlowAnswer,
    ),
    _signed_post(
        "/v3/mandates/{mandate_id}/authorization-flow/actions/provider-selection",
        submit_mandate_provider,
        MandateProviderSubmit,
        AuthorizationFlowAnswer,
    ),
    _signed_post(
        "/v3/mandates/{mandate_id}/authorization-flow/actions/consent",
        submit_mandate_consent,
        None,
        AuthorizationFlowAnswer,
    ),
    _signed_post(
        "/v3/mandates/{mandate_id}/revoke",
        revoke_mandate,
        None,
        None,
        status_code=204,
        response_class=Response,
    ),
    _read(
        "/v3/mandates/{mandate_id}/funds",
        confirm_funds,
        FundsOut,
        ERRORS_READ_CONFLICT,
        query=FundsQuery,
    ),
    _read(
        "/v3/mandates/{mandate_id}/constraints",
        mandate_constraints,
        ConstraintsOut,
        ERRORS_AUTH_NOT_FOUND,
    ),
)
"""The mandate routes, in the order of the OpenAPI document."""

MOCK_BANK_CONSENT_ROUTES = routes(
    Endpoint(
        "POST",
        "/mock-bank/api/vrp-consents/{mandate_id}/action",
        mock_bank_consent_action,
        replace(NOBODY, needs=Needs(schemes=("mockBankToken",))),
        body=ConsentAction,
        params=_MANDATE,
        status_code=202,
        response_class=PlainTextResponse,
        errors=ERRORS_READ_CONFLICT,
        responses={202: PROVIDER_RETURN_URL},
        tags=["mock bank"],
    ),
)
"""The mock bank's headless consent action (mounted with the mock providers' power)."""

__all__ = ["MOCK_BANK_CONSENT_ROUTES", "ROUTES"]
