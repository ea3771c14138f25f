"""The developer console at `/console`: sign-in, balances, payments, payouts, webhook
deliveries, the request log and settings for merchants, plus the operator's panel (see
docs/console.md).

Server-rendered HTML (Jinja2), no build step and no JavaScript. Every page needs a session
(`console_session`); every POST checks the session's CSRF token before it changes anything.

This module assembles the one console `router` from the page areas (signin, payments,
mandates, webhooks, request log, settings, operator) and serves the overview at `/console`
itself. Routes match in the order they are added, so the areas keep the order of their paths
and the catch-all 404 comes last.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from bankrail.http.auth import require_payments_audience
from bankrail.merchants import service as merchants_service
from bankrail.merchants.sweeping import sweeping_view
from bankrail.pages.console.accounts import router as accounts_router
from bankrail.pages.console.chart import build_chart
from bankrail.pages.console.core import ConsoleRoute, PageError, app_context, render, resolve_viewer
from bankrail.pages.console.data import balance_history
from bankrail.pages.console.mandates import router as mandates_router
from bankrail.pages.console.operator import router as operator_router
from bankrail.pages.console.passwords import router as passwords_router
from bankrail.pages.console.payments import router as payments_router
from bankrail.pages.console.request_log import router as request_log_router
from bankrail.pages.console.settings import router as settings_router
from bankrail.pages.console.signin import router as signin_router
from bankrail.pages.console.webhooks import router as webhooks_router

router = APIRouter(prefix="/console", include_in_schema=False, route_class=ConsoleRoute)

router.include_router(signin_router)
router.include_router(passwords_router)


@router.get("", response_class=HTMLResponse)
async def overview(request: Request) -> Response:
    """Accounts with balances and a balance chart each (the operator first picks a merchant)."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    context = app_context(request)
    if viewer.merchant_id is None:
        return render(request, "overview.html", title="Overview", section="overview", cards=[])
    cards: list[dict[str, Any]] = []
    async with context.pool.acquire() as conn:
        accounts = await merchants_service.list_accounts(conn, viewer.merchant_id)
        for account in accounts:
            history = await balance_history(conn, account)
            cards.append(
                {
                    "account": account,
                    "chart": build_chart(history, account.currency, context.clock.now()),
                    "sweeping": await sweeping_view(
                        conn, account, context.settings.powers.sandbox_routes
                    ),
                }
            )
    return render(request, "overview.html", title="Overview", section="overview", cards=cards)


router.include_router(accounts_router)
router.include_router(payments_router)
router.include_router(mandates_router)
router.include_router(webhooks_router)
router.include_router(request_log_router)
router.include_router(settings_router)
router.include_router(operator_router)


@router.api_route("/{rest:path}", methods=["GET", "POST"], response_class=HTMLResponse)
async def unknown_page(request: Request, rest: str) -> Response:
    """Anything else under /console: the 404 page (or the overview for `/console/`)."""
    if rest == "":
        return RedirectResponse("/console", status_code=303)
    raise PageError(404, "There is no console page at this address.")
