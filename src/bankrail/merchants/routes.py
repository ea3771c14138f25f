"""Merchant-facing account routes: v3 merchant accounts and v1 balances (http/pipeline.py
runs each one's steps)."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, Field
from starlette.responses import Response

from bankrail.core.timefmt import Timestamp
from bankrail.http.openapi import ERRORS_AUTH, ERRORS_AUTH_NOT_FOUND
from bankrail.http.pipeline import MERCHANT, Call, Endpoint, routes
from bankrail.http.responses import json_response
from bankrail.merchants import service
from bankrail.merchants.activity import list_activity
from bankrail.merchants.schemas import (
    AccountTransactionList,
    BalanceList,
    MerchantAccountList,
    MerchantAccountOut,
)


class TransactionsQuery(BaseModel):
    """`GET /v3/merchant-accounts/{id}/transactions`."""

    from_: Timestamp | None = Field(None, alias="from")
    to: Timestamp | None = None
    type: Literal["payment", "payout", "topup", "refund"] | None = None
    cursor: str | None = Field(None, max_length=200)
    limit: int = Field(100, ge=1, le=1000)


async def list_merchant_accounts(call: Call[None, None]) -> Response:
    """The caller's merchant accounts with their identifiers and balances."""
    context, merchant = call.context, call.merchant
    async with context.pool.acquire() as conn:
        accounts = await service.list_accounts(conn, merchant.merchant_id)
    return json_response(200, {"items": [a.to_v3() for a in accounts]})


async def get_merchant_account(call: Call[None, None]) -> Response:
    """One merchant account; another merchant's account is 404."""
    merchant_account_id, context = call.params["merchant_account_id"], call.context
    merchant = call.merchant
    async with context.pool.acquire() as conn:
        account = await service.require_account(conn, merchant_account_id, merchant.merchant_id)
    return json_response(200, account.to_v3())


async def list_merchant_account_transactions(call: Call[None, TransactionsQuery]) -> Response:
    """Movements on the account, oldest first, with an inclusive `from`/`to` range."""
    merchant_account_id, context = call.params["merchant_account_id"], call.context
    merchant, query = call.merchant, call.query
    from_, to, type, cursor, limit = query.from_, query.to, query.type, query.cursor, query.limit
    async with context.pool.acquire() as conn:
        await service.require_account(conn, merchant_account_id, merchant.merchant_id)
        page = await list_activity(
            conn,
            merchant_account_id,
            start=from_,
            end=to,
            type_=type,
            cursor=cursor,
            limit=limit,
        )
    return json_response(
        200, {"items": page.items, "pagination": {"next_cursor": page.next_cursor}}
    )


async def list_balances(call: Call[None, None]) -> Response:
    """Balances of every currency account of the caller (spec 4.1)."""
    context, merchant = call.context, call.merchant
    async with context.pool.acquire() as conn:
        accounts = await service.list_accounts(conn, merchant.merchant_id)
    return json_response(200, {"results": [a.to_v1_balance() for a in accounts]})


_ACCOUNT = {"merchant_account_id": uuid.UUID}
_TAGS = ["merchant accounts"]

ROUTES = routes(
    Endpoint(
        "GET",
        "/v3/merchant-accounts",
        list_merchant_accounts,
        MERCHANT,
        response_model=MerchantAccountList,
        errors=ERRORS_AUTH,
        tags=_TAGS,
    ),
    Endpoint(
        "GET",
        "/v3/merchant-accounts/{merchant_account_id}",
        get_merchant_account,
        MERCHANT,
        params=_ACCOUNT,
        response_model=MerchantAccountOut,
        errors=ERRORS_AUTH_NOT_FOUND,
        tags=_TAGS,
    ),
    Endpoint(
        "GET",
        "/v3/merchant-accounts/{merchant_account_id}/transactions",
        list_merchant_account_transactions,
        MERCHANT,
        params=_ACCOUNT,
        query=TransactionsQuery,
        response_model=AccountTransactionList,
        errors=ERRORS_AUTH_NOT_FOUND,
        tags=_TAGS,
    ),
    Endpoint(
        "GET",
        "/v1/balances",
        list_balances,
        MERCHANT,
        response_model=BalanceList,
        errors=ERRORS_AUTH,
        tags=["payouts v1"],
    ),
)
"""The merchant's account routes, in the order of the OpenAPI document."""
