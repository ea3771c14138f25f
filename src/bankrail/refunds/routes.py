"""Refund routes: `POST` and `GET /v3/payments/{payment_id}/refunds`, and
`GET /v3/payments/{payment_id}/refunds/{refund_id}` (http/pipeline.py runs each one's steps)."""

from __future__ import annotations

import uuid

from starlette.responses import Response

from bankrail.http.idempotent import keyed_request
from bankrail.http.openapi import ERRORS_AUTH_NOT_FOUND, ERRORS_SIGNED_POST
from bankrail.http.pipeline import MERCHANT, SIGNED, Call, Endpoint, routes
from bankrail.http.responses import answer_response, json_response
from bankrail.refunds import service
from bankrail.refunds.acceptance import RefundAcceptance, RefundToAccept
from bankrail.refunds.schemas import RefundCreated, RefundList, RefundOut, RefundRequest

__all__ = ["ROUTES"]

_PATH = "/v3/payments/{payment_id}/refunds"


async def create_refund(call: Call[RefundRequest, None]) -> Response:
    """Refund part or all of a settled payment to the account that paid it.

    Funds are held at once; the outcome arrives as `refund_executed` or `refund_failed`."""
    payment_id, body, request, context = (
        call.params["payment_id"],
        call.body,
        call.request,
        call.context,
    )
    merchant, raw = call.merchant, call.raw
    key = call.key
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


async def list_refunds(call: Call[None, None]) -> Response:
    """Every refund of the payment, oldest first."""
    payment_id, context, merchant = call.params["payment_id"], call.context, call.merchant
    async with context.pool.acquire() as conn:
        items = await service.list_refunds(conn, payment_id, merchant.merchant_id)
    return json_response(200, {"items": items})


async def get_refund(call: Call[None, None]) -> Response:
    """One refund of the payment, with its status."""
    payment_id, refund_id = call.params["payment_id"], call.params["refund_id"]
    context, merchant = call.context, call.merchant
    async with context.pool.acquire() as conn:
        refund = await service.get_refund(conn, payment_id, refund_id, merchant.merchant_id)
    return json_response(200, refund)


_IDS = {"payment_id": uuid.UUID, "refund_id": uuid.UUID}

ROUTES = routes(
    Endpoint(
        "POST",
        _PATH,
        create_refund,
        MERCHANT,
        signed=SIGNED,
        body=RefundRequest,
        params=_IDS,
        status_code=201,
        response_model=RefundCreated,
        errors=ERRORS_SIGNED_POST,
        tags=["refunds"],
        operation_id="create_refund",
    ),
    Endpoint(
        "GET",
        _PATH,
        list_refunds,
        MERCHANT,
        params=_IDS,
        response_model=RefundList,
        errors=ERRORS_AUTH_NOT_FOUND,
        tags=["refunds"],
        operation_id="list_refunds",
    ),
    Endpoint(
        "GET",
        _PATH + "/{refund_id}",
        get_refund,
        MERCHANT,
        params=_IDS,
        response_model=RefundOut,
        errors=ERRORS_AUTH_NOT_FOUND,
        tags=["refunds"],
        operation_id="get_refund",
    ),
)
"""The refund routes, in the order of the OpenAPI document."""
