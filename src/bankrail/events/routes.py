"""`/.well-known/jwks` and the operator's webhook delivery log."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel

from bankrail.events import service
from bankrail.http.auth import Admin
from bankrail.http.deps import Context
from bankrail.http.openapi import ERRORS_ADMIN
from bankrail.http.responses import json_response

router = APIRouter()
admin = APIRouter(prefix="/admin", tags=["operator"], responses=ERRORS_ADMIN)

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


@router.get("/.well-known/jwks", tags=["webhooks"], response_model=Jwks)
async def jwks(request: Request) -> Response:
    """The public keys that verify `Svc-Signature` on webhooks."""
    return json_response(
        200,
        {"keys": [request.app.state.webhook_key.jwk()]},
        headers={"Cache-Control": "public, max-age=300"},
    )


@admin.get("/webhook-deliveries", response_model=DeliveryPage)
async def list_deliveries(
    context: Context,
    _: Admin,
    merchant_id: uuid.UUID | None = None,
    status: DeliveryStatus | None = None,
    event_type: Annotated[str | None, Query(max_length=100)] = None,
    event_id: uuid.UUID | None = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """Deliveries, newest first, filtered by merchant, status, event type or event id."""
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


@admin.get("/webhook-deliveries/{delivery_id}", response_model=DeliveryDetail)
async def get_delivery(delivery_id: uuid.UUID, context: Context, _: Admin) -> Response:
    """A delivery with every attempt (time, HTTP status or error, latency)."""
    async with context.pool.acquire() as conn:
        found: dict[str, Any] = await service.get_delivery(conn, delivery_id)
    return json_response(200, found)


@admin.post(
    "/webhook-deliveries/{delivery_id}/replay", status_code=202, response_model=DeliveryDetail
)
async def replay_delivery(delivery_id: uuid.UUID, context: Context, _: Admin) -> Response:
    """Deliver the same event again (same event_id) to the merchant's current URI."""
    async with context.pool.acquire() as conn, conn.transaction():
        found = await service.replay_delivery(conn, delivery_id, context.clock.now())
    return json_response(202, found)
