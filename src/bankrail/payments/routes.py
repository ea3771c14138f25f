"""Pay-in routes: payments API v3, the mock bank's headless action API, payment sources, and
the legacy deposit API (http/pipeline.py runs each one's steps).

This module assembles `ROUTES` and `MOCK_BANK_ROUTES`: creating, listing and reading payments
and the payment sources are here, the authorisation flow and the actions on a payment in
`flow_routes`, the legacy deposit API in `legacy_routes`. Routes are added in the order of
the OpenAPI document."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, Field
from starlette.responses import PlainTextResponse, Response

from bankrail.core.problems import Unauthenticated
from bankrail.http.auth import bearer_token
from bankrail.http.idempotent import keyed_request
from bankrail.http.listing import WindowQuery
from bankrail.http.openapi import ERRORS_AUTH, ERRORS_AUTH_NOT_FOUND, ERRORS_SIGNED_POST, Needs
from bankrail.http.pipeline import MERCHANT, NOBODY, SIGNED, Call, Endpoint, routes
from bankrail.http.responses import answer_response, json_response
from bankrail.http.schema_types import PROVIDER_RETURN_URL
from bankrail.merchants.service import require_account
from bankrail.payments import queries, service
from bankrail.payments._route_support import PAYMENT_CALLER
from bankrail.payments.creation import (
    NewPayment,
    PaymentCreation,
    PaymentToCreate,
    created_answer,
    return_uris,
)
from bankrail.payments.documents import PaymentDocuments, page_answer
from bankrail.payments.flow_routes import ROUTES as FLOW_ROUTES
from bankrail.payments.legacy_routes import ROUTES as LEGACY_ROUTES
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
from bankrail.rails.providers import require_offered
from bankrail.security.tokens import TokenError

MOCK_BANK_TOKEN = replace(NOBODY, needs=Needs(schemes=("mockBankToken",)))
"""The token of the mock bank's redirect uri, which the handler reads."""


class PaymentListQuery(WindowQuery):
    """`GET /v3/payments`: the window and the filters."""

    merchant_account_id: uuid.UUID | None = None
    status: PaymentStatus | None = None
    user_id: str | None = Field(None, min_length=1, max_length=200)


class PaymentSourcesQuery(BaseModel):
    """`GET /v3/merchant-accounts/{id}/payment-sources`."""

    user_id: str | None = Field(None, min_length=1, max_length=200)


async def create_payment(call: Call[PaymentRequest, None]) -> Response:
    """Create a payment into a merchant account; the payer then authorises it at their bank.
    A payment on an authorised mandate (`payment_method.type` `mandate`) needs no payer: it is
    `authorized` at once."""
    body, request, context, merchant, raw = (
        call.body,
        call.request,
        call.context,
        call.merchant,
        call.raw,
    )
    key = call.key
    assert key is not None  # the signature requires one
    now = context.clock.now()
    keyed = keyed_request(context, request, scope=f"v3:{merchant.merchant_id}", key=key, body=raw)
    if body.payment_method.type == "mandate":
        on_mandate = MandatePaymentToCreate(
            body,
            merchant.merchant_id,
            now,
            keyed,
            resource_token=lambda payment_id: context.tokens.issue_resource_token(
                payment_id, now, AUTHORIZATION_WINDOW
            ),
        )
        status, answer = await context.services.get(MandatePaymentCreation).accept(on_mandate)
        return answer_response(status, answer)

    if not context.settings.sandbox and return_uris(body):
        async with context.pool.acquire() as conn:
            await service.require_allowed_creation_return_uris(conn, merchant.merchant_id, body)
    public_url = context.settings.public_url

    def respond(payment: NewPayment) -> tuple[int, Any]:
        token = context.tokens.issue_resource_token(payment.id, now, AUTHORIZATION_WINDOW)
        return 201, created_answer(payment, token, public_url)

    def journey(row: dict[str, Any]) -> dict[str, Any]:
        require_offered(context.settings.powers)
        bank_token = service.provider_token(context.tokens, row["id"], now)
        return service.next_action(row, public_url, bank_token, context.settings.powers)

    status, answer = await context.services.get(PaymentCreation).accept(
        PaymentToCreate(body, merchant.merchant_id, now, respond, keyed, journey)
    )
    return answer_response(status, answer)


async def list_payments(call: Call[None, PaymentListQuery]) -> Response:
    """The caller's payments, newest first, each as `GET /v3/payments/{id}` shows it; `from`
    and `to` (inclusive) bound `created_at`."""
    context, merchant, window = call.context, call.merchant, call.query.window()
    merchant_account_id, status, user_id = (
        call.query.merchant_account_id,
        call.query.status,
        call.query.user_id,
    )
    documents = context.services.get(PaymentDocuments)
    async with context.pool.acquire() as conn:
        items, next_cursor = await queries.list_payments(
            conn,
            merchant.merchant_id,
            window,
            documents,
            merchant_account_id=merchant_account_id,
            status=status.value if status else None,
            user_id=user_id,
        )
    return json_response(200, page_answer(items, next_cursor))


async def get_payment(call: Call[None, None]) -> Response:
    """The payment with its status, failure fields, provider, scheme and payment source."""
    payment_id, context, caller = call.params["payment_id"], call.context, call.caller
    async with context.pool.acquire() as conn:
        payment = await service.get_payment_document(conn, payment_id, caller.merchant_id)
    return json_response(200, payment)


async def payment_sources(call: Call[None, PaymentSourcesQuery]) -> Response:
    """Payment sources that paid into this account (usable for closed-loop payouts)."""
    merchant_account_id, context = call.params["merchant_account_id"], call.context
    merchant, user_id = call.merchant, call.query.user_id
    async with context.pool.acquire() as conn:
        account = await require_account(conn, merchant_account_id, merchant.merchant_id)
        sources = await list_payment_sources(conn, account.id, user_id)
    return json_response(200, {"items": [{**s.to_api(), "user_id": s.user_id} for s in sources]})


async def mock_bank_action(call: Call[BankAction, None]) -> Response:
    """The payer's decision at the mock bank, headless (for tests and CI);
    answers the provider return URL as plain text."""
    payment_id, body, request, context = (
        call.params["payment_id"],
        call.body,
        call.request,
        call.context,
    )
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


_PAYMENT = {"payment_id": uuid.UUID}

ROUTES = routes(
    Endpoint(
        "POST",
        "/v3/payments",
        create_payment,
        MERCHANT,
        signed=SIGNED,
        idempotency="required",
        body=PaymentRequest,
        status_code=201,
        response_model=PaymentCreated,
        errors=ERRORS_SIGNED_POST,
        tags=["payments v3"],
        operation_id="create_payment",
    ),
    Endpoint(
        "GET",
        "/v3/payments",
        list_payments,
        MERCHANT,
        query=PaymentListQuery,
        response_model=PaymentList,
        errors=ERRORS_AUTH,
        tags=["payments v3"],
        operation_id="list_payments",
    ),
    Endpoint(
        "GET",
        "/v3/payments/{payment_id}",
        get_payment,
        PAYMENT_CALLER,
        params=_PAYMENT,
        response_model=PaymentOut,
        errors=ERRORS_AUTH_NOT_FOUND,
        tags=["payments v3"],
        operation_id="get_payment",
    ),
    *FLOW_ROUTES,
    Endpoint(
        "GET",
        "/v3/merchant-accounts/{merchant_account_id}/payment-sources",
        payment_sources,
        MERCHANT,
        query=PaymentSourcesQuery,
        response_model=PaymentSourceList,
        errors=ERRORS_AUTH_NOT_FOUND,
        tags=["merchant accounts"],
    ),
    *LEGACY_ROUTES,
)
"""The payments API v3 and the legacy deposit API, in the order of the OpenAPI document."""

MOCK_BANK_ROUTES = routes(
    Endpoint(
        "POST",
        "/mock-bank/api/single-immediate-payments/{payment_id}/action",
        mock_bank_action,
        MOCK_BANK_TOKEN,
        body=BankAction,
        params=_PAYMENT,
        status_code=202,
        response_class=PlainTextResponse,
        errors={**ERRORS_AUTH_NOT_FOUND, 409: ERRORS_SIGNED_POST[409]},
        responses={202: PROVIDER_RETURN_URL},
        tags=["mock bank"],
    ),
)
"""The mock bank's headless action (mounted with the mock providers' power)."""

__all__ = ["MOCK_BANK_ROUTES", "ROUTES"]
