"""The console's mandates page: each mandate with its limits, what each period has left, and
the payments taken on it."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from bankrail.http.auth import MANDATE_SCOPES, may_use_mandates, require_mandates_audience
from bankrail.mandates import service as mandates_service
from bankrail.pages.console.core import ConsoleRoute, app_context, render, resolve_viewer

router = APIRouter(route_class=ConsoleRoute)


@router.get("/mandates", response_class=HTMLResponse)
async def mandates_list(request: Request) -> Response:
    """Mandates, newest first, with their limits, what each period has left, and the payments
    taken on each: of the types the session's scopes cover, as the API lists them."""
    viewer = await resolve_viewer(request, needs=require_mandates_audience)
    context = app_context(request)
    claims = viewer.claims
    types = (
        frozenset(kind for kind in MANDATE_SCOPES if may_use_mandates(claims, kind))
        if claims is not None
        else None
    )
    async with context.pool.acquire() as conn:
        items = await mandates_service.overview(
            conn, viewer.merchant_id, context.clock.now(), types=types
        )
    return render(request, "mandates.html", title="Mandates", section="mandates", items=items)
