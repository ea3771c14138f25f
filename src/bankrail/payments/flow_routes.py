"""The payer's journey of a payment and the actions on it: starting the authorisation flow,
submitting the chosen provider, the consent or the provider's form, cancelling, and the
provider return (of a payment or a mandate). The merchant's calls are signed and
idempotent; the payer's (with the resource token of the hosted page) are plain."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response

from bankrail.context import AppContext
from bankrail.db.pool import Connection
from bankrail.http.auth import verify_signature
from bankrail.http.deps import Context
from bankrail.http.idempotent import idempotency_key, respond_once
from bankrail.http.openapi import ERRORS_AUTH_NOT_FOUND, ERRORS_SIGNED_POST
from bankrail.http.responses import json_response
from bankrail.http.schema_types import AuthorizationFlowAnswer
from bankrail.mandates import service as mandates
from bankrail.payments import service
from bankrail.payments._route_support import Caller, PaymentCaller, aliased_routes, flow_answer
from bankrail.payments.schemas import (
    AuthorizationFlowRequest,
    FormSubmit,
    ProviderReturn,
    ProviderReturnAnswer,
    ProviderSelectionSubmit,
)

__all__ = ["router"]

router = APIRouter()
_routes = aliased_routes(router)

Action = Callable[[Connection, Any], Awaitable[tuple[int, Any]]]


async def _act(
    request: Request, context: AppContext, caller: PaymentCaller, action: Action
) -> Response:
    """Run an action on the locked payment: signed and idempotent for the merchant, plain for
    the payer's resource token (the hosted page)."""

    async def effect(conn: Connection) -> tuple[int, Any]:
        row = await service.lock_payment(conn, caller.payment_id, caller.merchant_id)
        return await action(conn, row)

    if caller.claims is None:
        return await respond_once(context, request, scope="", key=None, body=b"", effect=effect)
    raw = await verify_signature(request, context, caller.claims)
    return await respond_once(
        context,
        request,
        scope=f"v3:{caller.claims.merchant_id}",
        key=idempotency_key(request),
        body=raw,
        effect=effect,
    )


@_routes(
    "POST",
    ["/v3/payments/{payment_id}/authorization-flow", "/payments/{payment_id}/authorization-flow"],
    response_model=AuthorizationFlowAnswer,
    responses=ERRORS_SIGNED_POST,
)
async def start_authorization_flow(
    payment_id: uuid.UUID,
    body: AuthorizationFlowRequest,
    request: Request,
    context: Context,
    caller: Caller,
) -> Response:
    """Start the payer's journey: the next action is a provider list, a redirect to the bank,
    or (embedded providers) a form."""

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        return_uri = body.redirect.return_uri if body.redirect else None
        updated = await service.start_authorization(
            conn,
            row,
            return_uri=return_uri,
            now=context.clock.now(),
            allow_listed_only=not context.settings.sandbox,
            powers=context.settings.powers,
            consent=body.consent is not None,
        )
        return 200, flow_answer(context, updated)

    return await _act(request, context, caller, action)


@_routes(
    "POST",
    [
        "/v3/payments/{payment_id}/authorization-flow/actions/provider-selection",
        "/v3/payments/{payment_id}/submit-provider-selection",
        "/payments/{payment_id}/authorization-flow/actions/provider-selection",
        "/payments/{payment_id}/submit-provider-selection",
    ],
    response_model=AuthorizationFlowAnswer,
    responses=ERRORS_SIGNED_POST,
)
async def submit_provider_selection(
    payment_id: uuid.UUID,
    body: ProviderSelectionSubmit,
    request: Request,
    context: Context,
    caller: Caller,
) -> Response:
    """Submit the provider the payer chose; the next action takes them to it."""

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        updated = await service.select_provider(
            conn,
            row,
            body.provider_id,
            body.scheme_id,
            context.clock.now(),
            context.settings.powers,
        )
        return 200, flow_answer(context, updated)

    return await _act(request, context, caller, action)


@_routes(
    "POST",
    ["/v3/payments/{payment_id}/authorization-flow/actions/consent"],
    response_model=AuthorizationFlowAnswer,
    responses=ERRORS_SIGNED_POST,
)
async def submit_consent(
    payment_id: uuid.UUID, request: Request, context: Context, caller: Caller
) -> Response:
    """The payer consents (the start request declared `consent`); the next action is the
    provider's form or the redirect. The body, if any, is `{}`."""

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        now = context.clock.now()
        updated = await service.give_consent(conn, row, now, context.settings.powers)
        return 200, flow_answer(context, updated)

    return await _act(request, context, caller, action)


@_routes(
    "POST",
    ["/v3/payments/{payment_id}/authorization-flow/actions/form"],
    response_model=AuthorizationFlowAnswer,
    responses=ERRORS_SIGNED_POST,
)
async def submit_form(
    payment_id: uuid.UUID,
    body: FormSubmit,
    request: Request,
    context: Context,
    caller: Caller,
) -> Response:
    """The answers to the provider's current form; the next action is its next form, the
    redirect, or (the embedded provider's last form decided) `wait`."""

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        now = context.clock.now()
        updated = await service.submit_form(conn, row, body.inputs, now, context.settings.powers)
        if updated["bank_action"] is not None:  # the last form decided: the bank acts now
            wait = {"actions": {"next": {"type": "wait"}}}
            return 200, {"status": updated["status"], "authorization_flow": wait}
        return 200, flow_answer(context, updated)

    return await _act(request, context, caller, action)


@_routes(
    "POST",
    ["/v3/payments/{payment_id}/actions/cancel", "/payments/{payment_id}/actions/cancel"],
    status_code=202,
    responses=ERRORS_SIGNED_POST,
)
async def cancel_payment(
    payment_id: uuid.UUID, request: Request, context: Context, caller: Caller
) -> Response:
    """Cancel a payment the bank has not yet accepted; it fails with reason `canceled`."""

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        await service.cancel_payment(conn, row, context.clock.now())
        return 202, {}

    return await _act(request, context, caller, action)


@_routes(
    "POST",
    ["/v3/payments-provider-return", "/payments-provider-return"],
    response_model=ProviderReturnAnswer,
    responses={400: ERRORS_AUTH_NOT_FOUND[400], 404: ERRORS_AUTH_NOT_FOUND[404]},
)
async def provider_return(body: ProviderReturn, context: Context) -> Response:
    """Which payment or mandate the payer's browser came back from the bank for (no token
    needed)."""
    kind, found = service.resource_from_return(body.query, body.fragment)
    async with context.pool.acquire() as conn:
        if kind == "payment":
            await service.get_payment_row(conn, found, None)
        else:
            await mandates.get_mandate_row(conn, found, None)
    return json_response(200, {"resource": {"type": kind, f"{kind}_id": str(found)}})
