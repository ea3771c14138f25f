"""The console's webhook delivery pages: the filtered list, one delivery with its attempts and
payload, and replaying a delivery."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from bankrail.core.problems import Conflict, InvalidParameters, NotFound, ProblemError
from bankrail.events import service as events_service
from bankrail.http.auth import require_payments_audience
from bankrail.pages.console.core import (
    ConsoleRoute,
    Errors,
    app_context,
    attempt,
    check_csrf,
    link_filters,
    not_found,
    object_id,
    redirect_with_flash,
    render,
    resolve_viewer,
)
from bankrail.pages.console.data import delivery_event_types
from bankrail.pages.console.forms import parse_choice

router = APIRouter(route_class=ConsoleRoute)

DELIVERY_STATUSES = ("pending", "delivered", "discarded", "skipped")


@router.get("/webhooks", response_class=HTMLResponse)
async def webhooks_list(request: Request) -> Response:
    """Webhook deliveries, newest first, with status and event type filters."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    query = request.query_params
    values = {k: query.get(k, "") for k in ("status", "event_type", "cursor")}
    errors: Errors = {}
    status = attempt(errors, parse_choice, values["status"], "status", DELIVERY_STATUSES)
    items: list[dict[str, Any]] = []
    next_cursor = None
    async with app_context(request).pool.acquire() as conn:
        event_types = await delivery_event_types(conn, viewer.merchant_id)
        if not errors:
            try:
                items, next_cursor = await events_service.list_deliveries(
                    conn,
                    merchant_id=viewer.merchant_id,
                    status=status,
                    event_type=values["event_type"].strip() or None,
                    event_id=None,
                    cursor=values["cursor"] or None,
                    limit=50,
                )
            except InvalidParameters:
                errors["cursor"] = ["This page link is not valid; start again from the first page."]
    return render(
        request,
        "webhooks.html",
        400 if errors else 200,
        title="Webhook deliveries",
        section="webhooks",
        items=items,
        next_cursor=next_cursor,
        values=values,
        filters=link_filters(values),
        errors=errors,
        statuses=DELIVERY_STATUSES,
        event_types=event_types,
    )


@router.get("/webhooks/{delivery_id}", response_class=HTMLResponse)
async def webhook_detail(request: Request, delivery_id: str) -> Response:
    """One delivery with every attempt, its payload, and a replay button."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    async with app_context(request).pool.acquire() as conn:
        try:
            delivery = await events_service.get_delivery(
                conn, object_id(delivery_id, "webhook delivery"), viewer.merchant_id
            )
        except ProblemError as exc:
            raise not_found("webhook delivery") from exc
    try:
        payload = json.dumps(json.loads(delivery["payload"]), indent=2)
    except ValueError:
        payload = delivery["payload"]
    return render(
        request,
        "webhook.html",
        title=f"Webhook delivery {delivery['id']}",
        section="webhooks",
        delivery=delivery,
        payload=payload,
    )


@router.post("/webhooks/{delivery_id}/replay")
async def webhook_replay(request: Request, delivery_id: str) -> Response:
    """Send the delivery's event (same event_id) again to the current URI."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    await check_csrf(request, viewer)
    context = app_context(request)
    delivery_uuid = object_id(delivery_id, "webhook delivery")
    async with context.pool.acquire() as conn, conn.transaction():
        try:
            replayed = await events_service.replay_delivery(
                conn, delivery_uuid, context.clock.now(), viewer.merchant_id
            )
        except NotFound as exc:
            raise not_found("webhook delivery") from exc
        except Conflict as exc:
            back = viewer.url(f"/console/webhooks/{delivery_uuid}")
            return await redirect_with_flash(request, viewer, back, exc.detail, "warning")
    if replayed["status"] == "skipped":
        message = (
            f"Not sent: no webhook URI is configured for {replayed['event_type']} events. "
            "Set one under Settings, then replay again."
        )
        kind = "warning"
    else:
        message = f"Replay queued: event {replayed['event_id']} is being sent to {replayed['uri']}."
        kind = "success"
    return await redirect_with_flash(
        request, viewer, viewer.url(f"/console/webhooks/{delivery_uuid}"), message, kind
    )
