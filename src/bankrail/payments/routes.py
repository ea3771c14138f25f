"""Pay-in routes: payments API v3 (also without the `/v3` prefix where the spec writes it so),
the mock bank's headless action API, payment sources, and the legacy deposit API."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import Field, StrictStr

from bankrail.context import AppContext
from bankrail.core.problems import CONFLICT, ProblemError, Unauthenticated, invalid_field
from bankrail.db.pool import Connection
from bankrail.http.auth import (
    Merchant,
    SignedBody,
    bearer_token,
    read_access_claims,
    require_payments_audience,
    signed_body,
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
from bankrail.merchants.schemas import StrictModel
from bankrail.merchants.service import account_in_currency, require_account
from bankrail.payments import queries, service
from bankrail.payments.models import AUTHORIZATION_WINDOW, PaymentStatus
from bankrail.payments.schemas import (
    AuthorizationFlowAnswer,
    AuthorizationFlowRequest,
    BankAction,
    FormSubmit,
    PaymentCreated,
    PaymentList,
    PaymentOut,
    PaymentRequest,
    PaymentSourceList,
    ProviderReturn,
    ProviderReturnAnswer,
    ProviderSelectionSubmit,
    RedirectAnswer,
)
from bankrail.payments.sources import list_payment_sources
from bankrail.payouts.schemas import Amount
from bankrail.rails.mock_bank import action_for_username
from bankrail.security.tokens import AccessClaims, TokenError

router = APIRouter(tags=["payments v3"])
sandbox_router = APIRouter(tags=["mock bank"])

Action = Callable[[Connection, Any], Awaitable[tuple[int, Any]]]


def _routes(
    method: str, paths: list[str], **options: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register one endpoint on several paths, each with its own operation id."""

    def register(endpoint: Callable[..., Any]) -> Callable[..., Any]:
        for index, path in enumerate(paths):
            suffix = "" if index == 0 else f"_alias{index}"
            router.add_api_route(
                path,
                endpoint,
                methods=[method],
                operation_id=f"{endpoint.__name__}{suffix}",
                **options,
            )
        return endpoint

    return register


@dataclass(frozen=True)
class PaymentCaller:
    """Who acts on a payment: the merchant (access token) or the payer (resource token)."""

    claims: AccessClaims | None
    payment_id: uuid.UUID

    @property
    def merchant_id(self) -> uuid.UUID | None:
        """The merchant scope of the caller, None for a resource-token caller."""
        return self.claims.merchant_id if self.claims else None


@documents(
    Needs(
        schemes=("merchantToken", "resourceToken"),
        # With the merchant's token: signed, with an Idempotency-Key; with the resource token
        # (the hosted page): neither.
        signature="Svc-Signature",
        signature_required=False,
        idempotency_key="optional",
    )
)
async def _payment_caller(
    payment_id: uuid.UUID, request: Request, context: Context
) -> PaymentCaller:
    token = bearer_token(request)
    if token is None:
        raise Unauthenticated("Missing bearer token.")
    try:
        resource = context.tokens.read_resource_token(token, context.clock.now())
    except TokenError:
        claims = require_payments_audience(await read_access_claims(request, context))
        return PaymentCaller(claims, payment_id)
    if resource.payment_id != payment_id:
        raise Unauthenticated("The resource token was issued for another payment.")
    return PaymentCaller(None, payment_id)


Caller = Annotated[PaymentCaller, Depends(_payment_caller)]


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
        scope=f"v3:{caller.claims.client_id}",
        key=idempotency_key(request),
        body=raw,
        effect=effect,
    )


def _flow_answer(context: AppContext, row: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {"status": row["status"]}
    if row["status"] == "authorizing" and row["bank_action"] is None:
        action = service.next_action(
            row,
            context.settings.public_url,
            service.provider_token(context.tokens, row["id"], context.clock.now()),
        )
        answer["authorization_flow"] = {"actions": {"next": action}}
    return answer


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
    """Create a payment into a merchant account; the payer then authorises it at their bank."""

    async def effect(conn: Connection) -> tuple[int, Any]:
        now = context.clock.now()
        created = await service.create_payment(conn, merchant.merchant_id, body, now)
        token = context.tokens.issue_resource_token(created["id"], now, AUTHORIZATION_WINDOW)
        return 201, {
            "id": str(created["id"]),
            "user": {"id": created["user_id"]},
            "resource_token": token,
            "status": "authorization_required",
        }

    return await respond_once(
        context,
        request,
        scope=f"v3:{merchant.client_id}",
        key=idempotency_key(request),
        body=raw,
        effect=effect,
    )


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
        )
        return 200, _flow_answer(context, updated)

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
            conn, row, body.provider_id, body.scheme_id, context.clock.now()
        )
        return 200, _flow_answer(context, updated)

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
    """The embedded provider's form: the username picks the outcome as at the mock bank."""

    async def action(conn: Connection, row: Any) -> tuple[int, Any]:
        provider = row["provider_id"] or ""
        if not provider.endswith("-embedded"):
            raise invalid_field("inputs", "this payment's provider does not use a form")
        username = body.inputs.get("psu-username")
        if not username:
            raise invalid_field("inputs.psu-username", "required")
        await service.bank_action(conn, row, action_for_username(username), context.clock.now())
        updated = await service.get_payment_row(conn, row["id"], None)
        return 200, {"status": updated["status"]}

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
    """Which payment the payer's browser came back from the bank for (no token needed)."""
    payment_id = service.payment_id_from_return(body.query, body.fragment)
    async with context.pool.acquire() as conn:
        await service.get_payment_row(conn, payment_id, None)
    return json_response(200, {"resource": {"type": "payment", "payment_id": str(payment_id)}})


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
    response_model=RedirectAnswer,
    responses={**ERRORS_AUTH_NOT_FOUND, 409: ERRORS_SIGNED_POST[409]},
)
@documents(Needs(schemes=("mockBankToken",)))
async def mock_bank_action(
    payment_id: uuid.UUID, body: BankAction, request: Request, context: Context
) -> Response:
    """The payer's decision at the mock bank, headless (for tests and CI)."""
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
            execution_delay=body.execution_delay_in_seconds or 0,
            settlement_delay=body.settlement_delay_in_seconds or 0,
        )
    return json_response(202, {"redirect_uri": redirect})


# The legacy deposit API (spec 9.4), mapped onto payment creation plus the authorisation flow.


class LegacyDeposit(StrictModel):
    """The deposit of the legacy API."""

    deposit_id: Annotated[StrictStr, Field(min_length=1, max_length=100)]
    amount_in_minor: Amount
    currency: Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")]
    provider_id: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None
    scheme_id: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None


class LegacyAuthFlow(StrictModel):
    """The legacy auth flow object (redirect only)."""

    type: Annotated[StrictStr, Field(pattern=r"^redirect$")]
    return_uri: Annotated[StrictStr, Field(min_length=1, max_length=2000)]


class LegacyDepositRequest(StrictModel):
    """`POST /v1/users/deposits` (deprecated)."""

    user_id: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    deposit: LegacyDeposit
    auth_flow: LegacyAuthFlow


@router.post(
    "/v1/users/deposits",
    status_code=201,
    tags=["legacy"],
    deprecated=True,
    responses=ERRORS_SIGNED_POST,
)
async def legacy_deposit(
    body: LegacyDepositRequest,
    request: Request,
    context: Context,
    merchant: Merchant,
    raw: Annotated[bytes, Depends(signed_body(require_idempotency_key=False))],
) -> Response:
    """Deprecated: use `POST /v3/payments` then the authorization-flow call. The deposit
    becomes a payment into the merchant's account in its currency; `deposit_id` is the
    idempotency key and is kept in the payment's metadata."""
    public_url = context.settings.public_url
    successor = f"{public_url}/v3/payments"

    async def effect(conn: Connection) -> tuple[int, Any]:
        now = context.clock.now()
        account = await account_in_currency(
            conn, merchant.merchant_id, body.deposit.currency, "deposit.currency"
        )
        selection: dict[str, Any] = {"type": "user_selected"}
        if body.deposit.provider_id:
            selection = {"type": "preselected", "provider_id": body.deposit.provider_id}
            if body.deposit.scheme_id:
                selection["scheme_id"] = body.deposit.scheme_id
        request_v3 = PaymentRequest.model_validate(
            {
                "amount_in_minor": body.deposit.amount_in_minor,
                "currency": body.deposit.currency,
                "merchant_account_id": str(account.id),
                "user": {"id": body.user_id},
                "payment_method": {"type": "bank_transfer", "provider_selection": selection},
                "metadata": {"deposit_id": body.deposit.deposit_id},
            }
        )
        created = await service.create_payment(conn, merchant.merchant_id, request_v3, now)
        row = await service.lock_payment(conn, created["id"])
        row = await service.start_authorization(
            conn,
            row,
            return_uri=body.auth_flow.return_uri,
            now=now,
            allow_listed_only=not context.settings.sandbox,
            field="auth_flow.return_uri",
        )
        action = _flow_answer(context, row).get("authorization_flow", {}).get("actions", {})
        next_step = action.get("next") or {}
        if next_step.get("type") != "redirect":
            # A legacy client only follows redirects: send the payer to the hosted page,
            # which lets them pick a provider (or fill in the embedded form).
            token = context.tokens.issue_resource_token(created["id"], now, AUTHORIZATION_WINDOW)
            query = urlencode(
                {
                    "payment_id": str(created["id"]),
                    "resource_token": token,
                    "return_uri": body.auth_flow.return_uri,
                }
            )
            next_step = {"type": "redirect", "uri": f"{public_url}/hpp/payments?{query}"}
        return 201, {
            "result": {
                "deposit_id": body.deposit.deposit_id,
                "payment_id": str(created["id"]),
                "user_id": body.user_id,
                "status": row["status"],
                "auth_flow": next_step,
            }
        }

    deprecation = {"Deprecation": "true", "Link": f'<{successor}>; rel="successor-version"'}
    try:
        answer = await respond_once(
            context,
            request,
            scope=f"legacy-deposits:{merchant.merchant_id}",
            key=body.deposit.deposit_id,
            body=raw,
            effect=effect,
            reuse_problem=CONFLICT,
            ttl=timedelta(days=365 * 100),
            # A deposit_id is taken only by a deposit that was made (as for v1 payouts).
            store_client_errors=False,
        )
    except ProblemError as problem:
        problem.headers.update(deprecation)
        raise
    answer.headers.update(deprecation)
    return answer


__all__ = ["router", "sandbox_router"]
