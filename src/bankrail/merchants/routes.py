"""Merchant-facing account routes: v3 merchant accounts and v1 balances."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from bankrail.core.timefmt import Timestamp
from bankrail.http.auth import Merchant
from bankrail.http.deps import Context
from bankrail.http.openapi import ERRORS_AUTH, ERRORS_AUTH_NOT_FOUND
from bankrail.http.responses import json_response
from bankrail.merchants import service
from bankrail.merchants.activity import list_activity
from bankrail.merchants.schemas import (
    AccountTransactionList,
    BalanceList,
    MerchantAccountList,
    MerchantAccountOut,
)

router = APIRouter()


@router.get(
    "/v3/merchant-accounts",
    tags=["merchant accounts"],
    response_model=MerchantAccountList,
    responses=ERRORS_AUTH,
)
async def list_merchant_accounts(context: Context, merchant: Merchant) -> Response:
    """The caller's merchant accounts with their identifiers and balances."""
    async with context.pool.acquire() as conn:
        accounts = await service.list_accounts(conn, merchant.merchant_id)
    return json_response(200, {"items": [a.to_v3() for a in accounts]})


@router.get(
    "/v3/merchant-accounts/{merchant_account_id}",
    tags=["merchant accounts"],
    response_model=MerchantAccountOut,
    responses=ERRORS_AUTH_NOT_FOUND,
)
async def get_merchant_account(
    merchant_account_id: uuid.UUID, context: Context, merchant: Merchant
) -> Response:
    """One merchant account; another merchant's account is 404."""
    async with context.pool.acquire() as conn:
        account = await service.require_account(conn, merchant_account_id, merchant.merchant_id)
    return json_response(200, account.to_v3())


@router.get(
    "/v3/merchant-accounts/{merchant_account_id}/transactions",
    tags=["merchant accounts"],
    response_model=AccountTransactionList,
    responses=ERRORS_AUTH_NOT_FOUND,
)
async def list_merchant_account_transactions(
    merchant_account_id: uuid.UUID,
    context: Context,
    merchant: Merchant,
    from_: Annotated[Timestamp | None, Query(alias="from")] = None,
    to: Annotated[Timestamp | None, Query()] = None,
    type: Annotated[Literal["payment", "payout", "topup", "refund"] | None, Query()] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """Movements on the account, oldest first, with an inclusive `from`/`to` range."""
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


@router.get("/v1/balances", tags=["payouts v1"], response_model=BalanceList, responses=ERRORS_AUTH)
async def list_balances(context: Context, merchant: Merchant) -> Response:
    """Balances of every currency account of the caller (spec 4.1)."""
    async with context.pool.acquire() as conn:
        accounts = await service.list_accounts(conn, merchant.merchant_id)
    return json_response(200, {"results": [a.to_v1_balance() for a in accounts]})
