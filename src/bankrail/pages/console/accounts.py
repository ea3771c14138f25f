"""The console's page of a merchant account's transactions: the items
`GET /v3/merchant-accounts/{id}/transactions` answers, in the same shapes (pay-ins as
`merchant_account_payment` with their payment source, incoming transfers as `external_payment`
with their remitter, payouts with their beneficiary, context code and payout id, refunds with
their refund id), oldest first as the API lists them."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from bankrail.core.problems import InvalidParameters
from bankrail.http.auth import require_payments_audience
from bankrail.merchants import service as merchants_service
from bankrail.merchants.activity import list_activity
from bankrail.pages.console.core import (
    ConsoleRoute,
    PageError,
    app_context,
    not_found,
    object_id,
    render,
    resolve_viewer,
)

router = APIRouter(route_class=ConsoleRoute)

PAGE_SIZE = 50


@router.get("/accounts/{account_id}/transactions", response_class=HTMLResponse)
async def account_transactions(request: Request, account_id: str) -> Response:
    """A merchant account's transactions, 50 a page, oldest first, each as the API shows it;
    404 for an account that is not the viewer's (any account, for the operator)."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    context = app_context(request)
    cursor = request.query_params.get("cursor") or None
    async with context.pool.acquire() as conn:
        account = await merchants_service.get_account(
            conn, object_id(account_id, "merchant account"), viewer.merchant_id
        )
        if account is None:
            raise not_found("merchant account")
        try:
            page = await list_activity(
                conn, account.id, start=None, end=None, type_=None, cursor=cursor, limit=PAGE_SIZE
            )
        except InvalidParameters as error:
            raise PageError(
                400, "This page link is not valid; start again from the first page."
            ) from error
    return render(
        request,
        "transactions.html",
        title=f"{account.currency} account transactions",
        section="overview",
        account=account,
        items=page.items,
        next_cursor=page.next_cursor,
    )
