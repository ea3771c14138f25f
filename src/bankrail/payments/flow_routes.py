"""The payer's journey of a payment and the actions on it: starting the authorisation flow,
submitting the chosen provider, the consent or the provider's form, cancelling, and the
provider return (of a payment or a mandate). The merchant's calls are signed and
idempotent; the payer's (with the resource token of the hosted page) are plain."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bankrail.db.pool import Connection
from bankrail.http.context import AppContext
from bankrail.http.idempotent import idempotency_key, respond_once
from bankrail.http.openapi import ERRORS_AUTH_NOT_FOUND, ERRORS_SIGNED_POST
from bankrail.http.pipeline import NOBODY, Call, Endpoint, Signed, routes
from bankrail.http.responses import json_response
from bankrail.http.schema_types import AuthorizationFlowAnswer
from bankrail.mandates import service as mandates
from bankrail.payments import service
from bankrail.payments._route_support import PAYMENT_CALLER, FlowStep, PaymentCaller
from bankrail.payments.schemas import (
    AuthorizationFlowRequest,
    FormSubmit,
    ProviderReturn,
    ProviderReturnAnswer,
    ProviderSelectionSubmit,
)
from bankrail.security.idempotent_commit import LockedEffect

__all__ = ["ROUTES", "FlowStep"]  # FlowStep: the hosted page takes the same journey steps

Action = Callable[[Connection, Any], Awaitable[tuple[int, Any]]]


async def _act(
    request: Request, context: AppContext, caller: PaymentCaller, action: Action
) -> Response:
    """Run an action on the locked payment: signed and idempotent for the merchant, plain for
    the payer's resource token (the hosted page)."""

    async def act(conn: Connection, locked: Any | None) -> tuple[int, Any]:
        row = await service.lock_payment(conn, caller.payment_id, caller.merchant_id, locked=locked)
        return await action(conn, row)

    effect = LockedEffect(service.LOCK_PAYMENTS, caller.payment_id, caller.merchant_id, act)

    if caller.claims is None:
        return await respond_once(context, request, scope="", key=None, body=b"", effect=effect)
    raw = await request.body()  # its signature verified by the pipeline
    return await respond_once(
        context,
        request,
        scope=f"v3:{caller.claims.merchant_id}",
        key=idempotency_key(request),
        body=raw,
        effect=effect,
    )


async def start_authorization_flow(call: Call[AuthorizationFlowRequest, None]) -> Response:
    """Start the payer's journey: the next action is a provider list, a redirect to the bank,
    or (embedded providers) a form."""
    body, request, context, caller = call.body, call.request, call.context, call.caller

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        return_uri = body.redirect.return_uri if body.redirect else None
        step = FlowStep(context)
        updated = await service.start_authorization(
            conn,
            row,
            return_uri=return_uri,
            now=context.clock.now(),
            allow_listed_only=not context.settings.sandbox,
            powers=context.settings.powers,
            consent=body.consent is not None,
            journey=step,
        )
        return 200, step.answer(updated)

    return await _act(request, context, caller, action)


async def submit_provider_selection(call: Call[ProviderSelectionSubmit, None]) -> Response:
    """Submit the provider the payer chose; the next action takes them to it."""
    body, request, context, caller = call.body, call.request, call.context, call.caller

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        step = FlowStep(context)
        updated = await service.select_provider(
            conn,
            row,
            body.provider_id,
            body.scheme_id,
            context.clock.now(),
            context.settings.powers,
            journey=step,
        )
        return 200, step.answer(updated)

    return await _act(request, context, caller, action)


async def submit_consent(call: Call[None, None]) -> Response:
    """The payer consents (the start request declared `consent`); the next action is the
    provider's form or the redirect. The body, if any, is `{}`."""
    request, context, caller = call.request, call.context, call.caller

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        step = FlowStep(context)
        now = context.clock.now()
        updated = await service.give_consent(conn, row, now, context.settings.powers, journey=step)
        return 200, step.answer(updated)

    return await _act(request, context, caller, action)


async def submit_form(call: Call[FormSubmit, None]) -> Response:
    """The answers to the provider's current form; the next action is its next form, the
    redirect, or (the embedded provider's last form decided) `wait`."""
    body, request, context, caller = call.body, call.request, call.context, call.caller

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        step = FlowStep(context)
        now = context.clock.now()
        powers = context.settings.powers
        updated = await service.submit_form(conn, row, body.inputs, now, powers, journey=step)
        if updated["bank_action"] is not None:  # the last form decided: the bank acts now
            wait = {"actions": {"next": {"type": "wait"}}}
            return 200, {"status": updated["status"], "authorization_flow": wait}
        return 200, step.answer(updated)

    return await _act(request, context, caller, action)


async def cancel_payment(call: Call[None, None]) -> Response:
    """Cancel a payment the bank has not yet accepted; it fails with reason `canceled`."""
    request, context, caller = call.request, call.context, call.caller

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        await service.cancel_payment(conn, row, context.clock.now())
        return 202, {}

    return await _act(request, context, caller, action)


async def provider_return(call: Call[ProviderReturn, None]) -> Response:
    """Which payment or mandate the payer's browser came back from the bank for (no token
    needed)."""
    body, context = call.body, call.context
    kind, found = service.resource_from_return(body.query, body.fragment)
    async with context.pool.acquire() as conn:
        if kind == "payment":
            await service.get_payment_row(conn, found, None)
        else:
            await mandates.get_mandate_row(conn, found, None)
    return json_response(200, {"resource": {"type": kind, f"{kind}_id": str(found)}})


# Signed, with an Idempotency-Key, when the merchant calls; plain from the hosted page.
_MERCHANT_SIGNS = Signed(only_with_access_token=True)
_PAYMENT = {"payment_id": uuid.UUID}


def _action(path: str, handler: Any, body: Any, response_model: Any, status: int = 200) -> Endpoint:
    """A signed action on a payment, by the merchant or the payer."""
    return Endpoint(
        "POST",
        path,
        handler,
        PAYMENT_CALLER,
        signed=_MERCHANT_SIGNS,
        idempotency="optional",
        body=body,
        params=_PAYMENT,
        status_code=status,
        response_model=response_model,
        errors=ERRORS_SIGNED_POST,
        tags=["payments v3"],
    )


ROUTES = routes(
    _action(
        "/v3/payments/{payment_id}/authorization-flow",
        start_authorization_flow,
        AuthorizationFlowRequest,
        AuthorizationFlowAnswer,
    ),
    _action(
        "/v3/payments/{payment_id}/authorization-flow/actions/provider-selection",
        submit_provider_selection,
        ProviderSelectionSubmit,
        AuthorizationFlowAnswer,
    ),
    _action(
        "/v3/payments/{payment_id}/submit-provider-selection",
        submit_provider_selection,
        ProviderSelectionSubmit,
        AuthorizationFlowAnswer,
    ),
    _action(
        "/v3/payments/{payment_id}/authorization-flow/actions/consent",
        submit_consent,
        None,
        AuthorizationFlowAnswer,
    ),
    _action(
        "/v3/payments/{payment_id}/authorization-flow/actions/form",
        submit_form,
        FormSubmit,
        AuthorizationFlowAnswer,
    ),
    _action("/v3/payments/{payment_id}/actions/cancel", cancel_payment, None, None, status=202),
    Endpoint(
        "POST",
        "/v3/payments-provider-return",
        provider_return,
        NOBODY,
        body=ProviderReturn,
        response_model=ProviderReturnAnswer,
        errors={400: ERRORS_AUTH_NOT_FOUND[400], 404: ERRORS_AUTH_NOT_FOUND[404]},
        tags=["payments v3"],
    ),
)
"""The authorisation flow and the actions on a payment, in the order of the document."""
