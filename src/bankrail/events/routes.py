"""`/.well-known/jwks` and the operator's webhook delivery log."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field
from starlette.responses import Response

from bankrail.events import service
from bankrail.http.openapi import ERRORS_ADMIN
from bankrail.http.pipeline import NOBODY, OPERATOR, Call, Endpoint, routes
from bankrail.http.responses import json_response

DeliveryStatus = Literal["pending", "delivered", "discarded", "skipped"]


class Jwk(BaseModel):
    """A public key that signs webhooks."""

    kty: str
    crv: str
    alg: str
    kid: str
    x: str
    y: str


class Jwks(BaseModel):
    """The service's webhook signing keys."""

    keys: list[Jwk]


class Delivery(BaseModel):
    """A webhook delivery."""

    id: str
    event_id: str
    event_type: str
    merchant_id: str
    uri: str | None
    status: DeliveryStatus
    attempt_count: int
    next_attempt_at: str | None
    created_at: str


class Attempt(BaseModel):
    """One try at delivering."""

    at: str
    status_code: int | None
    error: str | None
    latency_ms: float


class DeliveryDetail(Delivery):
    """A delivery with its attempts and the exact payload sent."""

    payload: str
    attempts: list[Attempt]


class DeliveryPage(BaseModel):
    """A page of deliveries, newest first."""

    items: list[Delivery]
    next_cursor: str | None = None


async def jwks(call: Call[None, None]) -> Response:
    """The public keys that verify `Svc-Signature` on webhooks."""
    request = call.request
    return json_response(
        200,
        {"keys": [request.app.state.webhook_key.jwk()]},
        headers={"Cache-Control": "public, max-age=300"},
    )


class DeliveryQuery(BaseModel):
    """`GET /admin/webhook-deliveries`."""

    merchant_id: uuid.UUID | None = None
    status: DeliveryStatus | None = None
    event_type: str | None = Field(None, max_length=100)
    event_id: uuid.UUID | None = None
    cursor: str | None = Field(None, max_length=200)
    limit: int = Field(100, ge=1, le=1000)


async def list_deliveries(call: Call[None, DeliveryQuery]) -> Response:
    """Deliveries, newest first, filtered by merchant, status, event type or event id."""
    context, query = call.context, call.query
    merchant_id, status, event_type = query.merchant_id, query.status, query.event_type
    event_id, cursor, limit = query.event_id, query.cursor, query.limit
    async with context.pool.acquire() as conn:
        items, next_cursor = await service.list_deliveries(
            conn,
            merchant_id=merchant_id,
            status=status,
            event_type=event_type,
            event_id=event_id,
            cursor=cursor,
            limit=limit,
        )
    return json_response(200, {"items": items, "next_cursor": next_cursor})


async def get_delivery(call: Call[None, None]) -> Response:
    """A delivery with every attempt (time, HTTP status or error, latency)."""
    delivery_id, context = call.params["delivery_id"], call.context
    async with context.pool.acquire() as conn:
        found: dict[str, Any] = await service.get_delivery(conn, delivery_id)
    return json_response(200, found)


async def replay_delivery(call: Call[None, None]) -> Response:
    """Deliver the same event again (same event_id) to the merchant's current URI."""
    delivery_id, context = call.params["delivery_id"], call.context
    async with context.pool.acquire() as conn, conn.transaction():
        found = await service.replay_delivery(conn, delivery_id, context.clock.now())
    return json_response(202, found)


_DELIVERY = {"delivery_id": uuid.UUID}

ROUTES = routes(
    Endpoint("GET", "/.well-known/jwks", jwks, NOBODY, response_model=Jwks, tags=["webhooks"]),
)
"""The webhook signing keys, for anyone."""

ADMIN_ROUTES = routes(
    Endpoint(
        "GET",
        "/admin/webhook-deliveries",
        list_deliveries,
        OPERATOR,
        query=DeliveryQuery,
        response_model=DeliveryPage,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "GET",
        "/admin/webhook-deliveries/{delivery_id}",
        get_delivery,
        OPERATOR,
        params=_DELIVERY,
        response_model=DeliveryDetail,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "POST",
        "/admin/webhook-deliveries/{delivery_id}/replay",
        replay_delivery,
        OPERATOR,
        params=_DELIVERY,
        status_code=202,
        response_model=DeliveryDetail,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
)
"""The operator's webhook delivery log."""
