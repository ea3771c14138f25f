"""`/.well-known/jwks`, webhook listeners (the stream `bankrail listen` reads, and the
answers it reports) and the operator's webhook delivery log."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field
from starlette.responses import Response, StreamingResponse

from bankrail.core.metrics import record_webhook_attempt
from bankrail.core.threadlane import CRYPTO
from bankrail.db.pool import Connection
from bankrail.events import listeners, service
from bankrail.events.delivery import Outcome, WebhookKey, signed_headers
from bankrail.http.deps import AppContext
from bankrail.http.guarded_loop import serving_stops
from bankrail.http.idempotent import respond_once
from bankrail.http.openapi import (
    ERRORS_ADMIN,
    ERRORS_AUTH_NOT_FOUND,
    ERRORS_SIGNED_POST,
    Responses,
)
from bankrail.http.pipeline import MERCHANT, NOBODY, OPERATOR, SIGNED, Call, Endpoint, routes
from bankrail.http.responses import ReplayedResponse, json_response

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
    listener_id: str | None = Field(
        None, description="The webhook listener it is for; null for the registered URI."
    )


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


# --- Webhook listeners (events/listeners.py, docs/webhooks.md "Listeners") ---------------

# How often an open stream looks for due deliveries, and tells the database it is still open.
STREAM_POLL_SECONDS = 0.25
STREAM_TOUCH_SECONDS = 10.0
# A stream ends by itself after this share of the request deadline (the middleware's and the
# connection guard's), and the CLI opens the next at once: no deadline has to be lifted.
STREAM_SHARE_OF_DEADLINE = 0.8


class ListenQuery(BaseModel):
    """`GET /v3/webhook-listeners/{listener_id}/events`."""

    events: str | None = Field(
        None,
        max_length=2000,
        description="Comma-separated event types to receive (default: every event).",
    )
    forward_path: str = Field(
        "/",
        max_length=2000,
        pattern=r"^/",
        description="The local URL's path: what the signature covers when the merchant has "
        "no webhook URI registered for the event's API.",
    )


class ListenerAnswer(BaseModel):
    """What the local app answered to one forwarded delivery."""

    status_code: int | None = Field(None, ge=100, le=599)
    error: str | None = Field(None, max_length=500)
    latency_ms: float = Field(0.0, ge=0)


class ListenerAnswerRecorded(BaseModel):
    """The delivery's state once the answer is recorded."""

    delivery_id: str
    status: DeliveryStatus
    attempt_count: int
    next_attempt_at: str | None


class EventStream(StreamingResponse):
    """A stream of server-sent events (what the OpenAPI document says the route answers)."""

    media_type = "text/event-stream"


def _sse(event: str, data: dict[str, Any], event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\n".encode() + b"data: " + orjson.dumps(data) + b"\n\n"


async def _stream(
    context: AppContext, key: WebhookKey, listener_id: uuid.UUID, window: float
) -> AsyncIterator[bytes]:
    """The listener's due deliveries, each as one `webhook` event with the headers and body
    the registered URI would get, until `window` seconds passed or the process stops."""
    loop = asyncio.get_running_loop()
    jku = f"{context.settings.public_url}/.well-known/jwks"
    ends = loop.time() + window
    touched = loop.time()
    yield b"retry: 1000\n: attached\n\n"
    while loop.time() < ends and not serving_stops():
        due = await listeners.claim(context.pool, listener_id, context.clock.now())
        for item in due:
            delivery = item.claimed
            headers = await CRYPTO.run(
                partial(
                    signed_headers,
                    key,
                    jku,
                    item.signed_path,
                    delivery.payload,
                    context.clock.now(),
                )
            )
            data = {
                "delivery_id": str(delivery.id),
                "event_id": str(item.event_id),
                "event_type": item.event_type,
                "attempt": delivery.attempt_count + 1,
                "headers": {**headers, "User-Agent": "Bankrail-Webhooks/1"},
                "body": delivery.payload.decode(),
            }
            yield _sse("webhook", data, str(delivery.id))
        if loop.time() - touched >= STREAM_TOUCH_SECONDS:
            touched = loop.time()
            await listeners.touch(context.pool, listener_id, context.clock.now())
            yield b": still attached\n\n"
        if not due:
            await asyncio.sleep(STREAM_POLL_SECONDS)
    yield _sse("reconnect", {})


async def listen(call: Call[None, ListenQuery]) -> Response:
    """Attach the webhook listener (made on first use) and stream its deliveries as
    server-sent events; the stream ends by itself within the request deadline, and the
    listener reconnects with the same id (docs/webhooks.md, "Listeners"). A HEAD (which
    every GET route answers) says the same status and headers and does nothing: it neither
    attaches the listener nor takes its deliveries, which its stream would send to no one."""
    context, query, merchant = call.context, call.query, call.merchant
    listener_id: uuid.UUID = call.params["listener_id"]
    if call.request.method == "HEAD":
        async with context.pool.acquire() as conn:
            await listeners.check_owner(conn, merchant.merchant_id, listener_id)
        return Response(
            status_code=200,
            media_type=EventStream.media_type,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
    types = [t.strip() for t in (query.events or "").split(",") if t.strip()] or None
    async with context.pool.acquire() as conn:
        await listeners.attach(
            conn,
            merchant_id=merchant.merchant_id,
            listener_id=listener_id,
            event_types=types,
            forward_path=query.forward_path,
            now=context.clock.now(),
        )
    window = max(1.0, STREAM_SHARE_OF_DEADLINE * context.settings.request_timeout_seconds)
    key: WebhookKey = call.request.app.state.webhook_key
    return EventStream(
        _stream(context, key, listener_id, window),
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def answer_listener_delivery(call: Call[ListenerAnswer, None]) -> Response:
    """Record what the local app answered to a delivery the listener forwarded: a 2xx
    delivers it, anything else (or no answer) schedules its next attempt."""
    context, merchant, answer = call.context, call.merchant, call.body
    listener_id: uuid.UUID = call.params["listener_id"]
    delivery_id: uuid.UUID = call.params["delivery_id"]

    async def effect(conn: Connection) -> tuple[int, object]:
        now = context.clock.now()
        outcome = Outcome(now, answer.status_code, answer.error, answer.latency_ms)
        return 200, await listeners.record_answer(
            conn,
            merchant_id=merchant.merchant_id,
            listener_id=listener_id,
            delivery_id=delivery_id,
            outcome=outcome,
            now=now,
        )

    scope = f"v3:{merchant.merchant_id}"
    response = await respond_once(
        context, call.request, scope=scope, key=call.key, body=call.raw, effect=effect
    )
    # Counted once committed (an effect may run again before its batch commits), and not
    # for a replay of an answer already counted.
    if response.status_code == 200 and not isinstance(response, ReplayedResponse):
        record_webhook_attempt(answer.status_code)
    return response


_LISTENER = {"listener_id": uuid.UUID}
_EVENT_STREAM: Responses = {
    200: {"description": "A stream of server-sent events (text/event-stream)."}
}

_DELIVERY = {"delivery_id": uuid.UUID}

ROUTES = routes(
    Endpoint("GET", "/.well-known/jwks", jwks, NOBODY, response_model=Jwks, tags=["webhooks"]),
    Endpoint(
        "GET",
        "/v3/webhook-listeners/{listener_id}/events",
        listen,
        MERCHANT,
        params=_LISTENER,
        query=ListenQuery,
        errors=ERRORS_AUTH_NOT_FOUND,
        responses=_EVENT_STREAM,
        response_class=EventStream,
        tags=["webhooks"],
    ),
    Endpoint(
        "POST",
        "/v3/webhook-listeners/{listener_id}/deliveries/{delivery_id}/answers",
        answer_listener_delivery,
        MERCHANT,
        signed=SIGNED,
        body=ListenerAnswer,
        params={**_LISTENER, **_DELIVERY},
        response_model=ListenerAnswerRecorded,
        errors=ERRORS_SIGNED_POST,
        tags=["webhooks"],
    ),
)
"""The webhook signing keys, for anyone; a merchant's webhook listeners."""

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
