"""Pay-in routes: payments API v3 (also without the `/v3` prefix where the spec writes it so),
the mock bank's headless action API, payment sources, and the legacy deposit API.

This module assembles `router` and `sandbox_router`: creating, listing and reading payments
and the payment sources are here, the authorisation flow and the actions on a payment in
`flow_routes`, the legacy deposit API in `legacy_routes`. Routes are added in the order of
the OpenAPI document."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import PlainTextResponse

from bankrail.core.problems import Unauthenticated
from bankrail.http.auth import Merchant, SignedBody, bearer_token
from bankrail.http.deps import Context
from bankrail.http.idempotent import idempotency_key, keyed_request
from bankrail.http.listing import ListWindow
from bankrail.http.openapi import (
    ERRORS_AUTH,
    ERRORS_AUTH_NOT_FOUND,
    ERRORS_SIGNED_POST,
    Needs,
    documents,
)
from bankrail.http.responses import answer_response, json_response
from bankrail.http.schema_types import PROVIDER_RETURN_URL
from bankrail.merchants.service import require_account
from bankrail.payments import queries, service
from bankrail.payments._route_support import Caller, aliased_routes
from bankrail.payments.creation import NewPayment, PaymentCreation, PaymentToCreate
from bankrail.payments.flow_routes import router as flow_router
from bankrail.payments.legacy_routes import router as legacy_router
from bankrail.payments.mandate_creation import MandatePaymentCreation, MandatePaymentToCreate
from bankrail.payments.models import AUTHORIZATION_WINDOW, PaymentStatus
from bankrail.payments.schemas import (
    BankAction,
    PaymentCreated,
    PaymentList,
    PaymentOut,
    PaymentRequest,
    PaymentSourceList,
)
from bankrail.payments.sources import list_payment_sources
from bankrail.rails.mock_bank import provider_return_url
from bankrail.security.tokens import TokenError

router = APIRouter(tags=["payments v3"])
sandbox_router = APIRouter(tags=["mock bank"])

_routes = aliased_routes(router)


@_routes(
    "POST",
    ["/v3/payments", "/payments"],
    status_code=201,
    response_model=PaymentCreated,
    responses=ERRORS_SIGNED_POST,
)
async def create_payment(
    body: PaymentRequest,
    request: Request,
    context: Context,
    merchant: Merchant,
    raw: SignedBody,
) -> Response:
    """Create a payment into a merchant account; the payer then authorises it at their bank.
    A payment on an authorised mandate (`payment_method.type` `mandate`) needs no payer: it is
    `authorized` at once."""
    key = idempotency_key(request)
    assert key is not None  # the signature requires one
    now = context.clock.now()
    keyed = keyed_request(context, request, scope=f"v3:{merchant.merchant_id}", key=key, body=raw)
    if body.payment_method.type == "mandate":
        on_mandate = MandatePaymentToCreate(body, merchant.merchant_id, now, keyed)
        status, answer = await context.services.get(MandatePaymentCreation).create(on_mandate)
        return answer_response(status, answer)

    def respond(payment: NewPayment) -> tuple[int, Any]:
        token = context.tokens.issue_resource_token(payment.id, now, AUTHORIZATION_WINDOW)
        return 201, {
            "id": str(payment.id),
            "user": {"id": payment.user_id},
            "resource_token": token,
            "status": "authorization_required",
        }

    status, answer = await context.services.get(PaymentCreation).create(
        PaymentToCreate(body, merchant.merchant_id, now, respond, keyed)
    )
    return answer_response(status, answer)


@_routes(
    "GET",
    ["/v3/payments", "/payments"],
    response_model=PaymentList,
    responses=ERRORS_AUTH,
)
async def list_payments(
    context: Context,
    merchant: Merchant,
    window: ListWindow,
    merchant_account_id: Annotated[uuid.UUID | None, Query()] = None,
    status: Annotated[PaymentStatus | None, Query()] = None,
    user_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> Response:
    """The caller's payments, newest first, each as `GET /v3/payments/{id}` shows it; `from`
    and `to` (inclusive) bound `created_at`."""
    async with context.pool.acquire() as conn:
        items, next_cursor = await queries.list_payments(
            conn,
            merchant.merchant_id,
            window,
            merchant_account_id=merchant_account_id,
            status=status.value if status else None,
            user_id=user_id,
        )
    return json_response(200, {"items": items, "pagination": {"next_cursor": next_cursor}})


@_routes(
    "GET",
    ["/v3/payments/{payment_id}", "/payments/{payment_id}"],
    response_model=PaymentOut,
    responses=ERRORS_AUTH_NOT_FOUND,
)
async def get_payment(payment_id: uuid.UUID, context: Context, caller: Caller) -> Response:
    """The payment with its status, failure fields, provider, scheme and payment source."""
    async with context.pool.acquire() as conn:
        row = await service.get_payment_row(conn, payment_id, caller.merchant_id)
        return json_response(200, await service.render(conn, row))


router.include_router(flow_router)


@router.get(
    "/v3/merchant-accounts/{merchant_account_id}/payment-sources",
    tags=["merchant accounts"],
    response_model=PaymentSourceList,
    responses=ERRORS_AUTH_NOT_FOUND,
)
async def payment_sources(
    merchant_account_id: uuid.UUID,
    context: Context,
    merchant: Merchant,
    user_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> Response:
    """Payment sources that paid into this account (usable for closed-loop payouts)."""
    async with context.pool.acquire() as conn:
        await require_account(conn, merchant_account_id, merchant.merchant_id)
        sources = await list_payment_sources(conn, merchant_account_id, user_id)
    return json_response(200, {"items": [{**s.to_api(), "user_id": s.user_id} for s in sources]})


@sandbox_router.post(
    "/mock-bank/api/single-immediate-payments/{payment_id}/action",
    status_code=202,
    response_class=PlainTextResponse,
    responses={**ERRORS_AUTH_NOT_FOUND, 409: ERRORS_SIGNED_POST[409], 202: PROVIDER_RETURN_URL},
)
@documents(Needs(schemes=("mockBankToken",)))
async def mock_bank_action(
    payment_id: uuid.UUID, body: BankAction, request: Request, context: Context
) -> Response:
    """The payer's decision at the mock bank, headless (for tests and CI); answers the
    provider return URL as plain text."""
    token = bearer_token(request)
    if token is None:
        raise Unauthenticated("Missing bearer token (the token of the redirect uri).")
    try:
        claims = context.tokens.read_resource_token(token, context.clock.now(), kind="provider")
    except TokenError as exc:
        raise Unauthenticated(f"Invalid mock bank token: {exc}.") from exc
    if claims.payment_id != payment_id:
        raise Unauthenticated("The token was issued for another payment.")
    async with context.pool.acquire() as conn, conn.transaction():
        row = await service.lock_payment(conn, payment_id)
        redirect = await service.bank_action(
            conn,
            row,
            body.action,
            context.clock.now(),
            powers=context.settings.powers,
            execution_delay=body.execution_delay_in_seconds or 0,
            settlement_delay=body.settlement_delay_in_seconds or 0,
        )
    url = provider_return_url(redirect, context.settings.public_url, "payment", payment_id)
    return PlainTextResponse(url, status_code=202)


router.include_router(legacy_router)


__all__ = ["router", "sandbox_router"]
