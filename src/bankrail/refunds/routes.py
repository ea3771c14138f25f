"""Refund routes: `POST` and `GET /v3/payments/{payment_id}/refunds`, and
`GET /v3/payments/{payment_id}/refunds/{refund_id}` (also without the `/v3` prefix)."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request, Response

from bankrail.http.auth import Merchant, SignedBody
from bankrail.http.deps import Context
from bankrail.http.idempotent import idempotency_key, keyed_request
from bankrail.http.openapi import ERRORS_AUTH_NOT_FOUND, ERRORS_SIGNED_POST
from bankrail.http.responses import answer_response, json_response
from bankrail.refunds import service
from bankrail.refunds.acceptance import RefundAcceptance, RefundToAccept
from bankrail.refunds.schemas import RefundCreated, RefundList, RefundOut, RefundRequest

router = APIRouter(tags=["refunds"])

_PATHS = ("/v3/payments/{payment_id}/refunds", "/payments/{payment_id}/refunds")


async def create_refund(
    payment_id: uuid.UUID,
    body: RefundRequest,
    request: Request,
    context: Context,
    merchant: Merchant,
    raw: SignedBody,
) -> Response:
    """Refund part or all of a settled payment to the account that paid it.

    Funds are held at once; the outcome arrives as `refund_executed` or `refund_failed`."""
    key = idempotency_key(request)
    assert key is not None  # the signature requires one
    now = context.clock.now()
    (status, answer), _ = await context.services.get(RefundAcceptance).accept_created(
        RefundToAccept(
            merchant_id=merchant.merchant_id,
            payment_id=payment_id,
            amount=body.amount_in_minor,
            reference=body.reference,
            metadata=body.metadata,
            now=now,
            keyed=keyed_request(
                context, request, scope=f"v3:{merchant.merchant_id}", key=key, body=raw
            ),
        )
    )
    return answer_response(status, answer)


async def list_refunds(payment_id: uuid.UUID, context: Context, merchant: Merchant) -> Response:
    """Every refund of the payment, oldest first."""
    async with context.pool.acquire() as conn:
        items = await service.list_refunds(conn, payment_id, merchant.merchant_id)
    return json_response(200, {"items": items})


async def get_refund(
    payment_id: uuid.UUID, refund_id: uuid.UUID, context: Context, merchant: Merchant
) -> Response:
    """One refund of the payment, with its status."""
    async with context.pool.acquire() as conn:
        refund = await service.get_refund(conn, payment_id, refund_id, merchant.merchant_id)
    return json_response(200, refund)


for index, path in enumerate(_PATHS):
    suffix = "" if index == 0 else f"_alias{index}"
    router.add_api_route(
        path,
        create_refund,
        methods=["POST"],
        status_code=201,
        response_model=RefundCreated,
        responses=ERRORS_SIGNED_POST,
        operation_id=f"create_refund{suffix}",
    )
    router.add_api_route(
        path,
        list_refunds,
        methods=["GET"],
        response_model=RefundList,
        responses=ERRORS_AUTH_NOT_FOUND,
        operation_id=f"list_refunds{suffix}",
    )
    router.add_api_route(
        path + "/{refund_id}",
        get_refund,
        methods=["GET"],
        response_model=RefundOut,
        responses=ERRORS_AUTH_NOT_FOUND,
        operation_id=f"get_refund{suffix}",
    )
