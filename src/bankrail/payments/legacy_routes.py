"""The legacy deposit API (`POST /v1/users/deposits`, deprecated): a deposit becomes a payment
into the merchant's account plus the start of its authorisation flow."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from pydantic import Field, StrictStr
from starlette.responses import Response

from bankrail.core.problems import CONFLICT, ProblemError
from bankrail.db.pool import Connection
from bankrail.http.deps import AppContext
from bankrail.http.idempotent import respond_once
from bankrail.http.openapi import ERRORS_SIGNED_POST
from bankrail.http.pipeline import MERCHANT, Call, Endpoint, Signed, routes
from bankrail.http.schema_types import Amount, StrictModel
from bankrail.merchants.service import account_in_currency
from bankrail.payments import service
from bankrail.payments._route_support import FlowStep, flow_answer
from bankrail.payments.models import AUTHORIZATION_WINDOW
from bankrail.payments.schemas import PaymentRequest

__all__ = ["ROUTES"]

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


def _payment_request(body: LegacyDepositRequest, account_id: uuid.UUID) -> PaymentRequest:
    """The v3 payment a legacy deposit stands for, into the merchant's account `account_id`."""
    selection: dict[str, Any] = {"type": "user_selected"}
    if body.deposit.provider_id:
        selection = {"type": "preselected", "provider_id": body.deposit.provider_id}
        if body.deposit.scheme_id:
            selection["scheme_id"] = body.deposit.scheme_id
    return PaymentRequest.model_validate(
        {
            "amount_in_minor": body.deposit.amount_in_minor,
            "currency": body.deposit.currency,
            "merchant_account_id": str(account_id),
            "user": {"id": body.user_id},
            "payment_method": {"type": "bank_transfer", "provider_selection": selection},
            "metadata": {"deposit_id": body.deposit.deposit_id},
        }
    )


def _redirect_step(
    context: AppContext, row: Any, payment_id: uuid.UUID, return_uri: str, now: datetime
) -> dict[str, Any]:
    """The deposit's next step for the payer: the authorization flow's, when it is a
    redirect; otherwise a redirect to the hosted payment page."""
    action = flow_answer(context, row).get("authorization_flow", {}).get("actions", {})
    next_step: dict[str, Any] = action.get("next") or {}
    if next_step.get("type") != "redirect":
        # A legacy client only follows redirects: send the payer to the hosted page,
        # which lets them pick a provider (or fill in the embedded form).
        token = context.tokens.issue_resource_token(payment_id, now, AUTHORIZATION_WINDOW)
        query = urlencode(
            {
                "payment_id": str(payment_id),
                "resource_token": token,
                "return_uri": return_uri,
            }
        )
        next_step = {
            "type": "redirect",
            "uri": f"{context.settings.public_url}/hpp/payments?{query}",
        }
    return next_step


async def legacy_deposit(call: Call[LegacyDepositRequest, None]) -> Response:
    """Deprecated: use `POST /v3/payments` then the authorization-flow call. The deposit
    becomes a payment into the merchant's account in its currency; `deposit_id` is the
    idempotency key and is kept in the payment's metadata."""
    body, request, context = call.body, call.request, call.context
    merchant, raw = call.merchant, call.raw
    public_url = context.settings.public_url
    successor = f"{public_url}/v3/payments"

    async def effect(conn: Connection) -> tuple[int, Any]:
        now = context.clock.now()
        account = await account_in_currency(
            conn, merchant.merchant_id, body.deposit.currency, "deposit.currency"
        )
        request_v3 = _payment_request(body, account.id)
        created = await service.create_payment(conn, merchant.merchant_id, request_v3, now)
        row = await service.lock_payment(conn, created["id"])
        row = await service.start_authorization(
            conn,
            row,
            return_uri=body.auth_flow.return_uri,
            now=now,
            allow_listed_only=not context.settings.sandbox,
            powers=context.settings.powers,
            field="auth_flow.return_uri",
            journey=FlowStep(context),
        )
        next_step = _redirect_step(context, row, created["id"], body.auth_flow.return_uri, now)
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


ROUTES = routes(
    Endpoint(
        "POST",
        "/v1/users/deposits",
        legacy_deposit,
        MERCHANT,
        signed=Signed(require_idempotency_key=False),
        body=LegacyDepositRequest,
        status_code=201,
        errors=ERRORS_SIGNED_POST,
        tags=["legacy"],
        deprecated=True,
    ),
)
"""The legacy deposit API."""
