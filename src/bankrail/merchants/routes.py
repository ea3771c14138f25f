"""Merchant-facing account routes: v3 merchant accounts and v1 balances."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response

from bankrail.core.timefmt import Timestamp
from bankrail.db.pool import Connection
from bankrail.http.auth import Merchant, SignedBody
from bankrail.http.deps import Context
from bankrail.http.idempotent import idempotency_key, respond_once
from bankrail.http.openapi import ERRORS_AUTH, ERRORS_AUTH_NOT_FOUND, ERRORS_SIGNED_POST
from bankrail.http.responses import json_response
from bankrail.merchants import service, sweeping
from bankrail.merchants.activity import list_activity
from bankrail.merchants.schemas import (
    AccountTransactionList,
    BalanceList,
    MerchantAccountList,
    MerchantAccountOut,
    SweepingOut,
    SweepingRequest,
)

router = APIRouter()
TransactionType = Literal[
    "merchant_account_payment", "external_payment", "payout", "refund", "payment", "topup"
]


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
    merchant_account_id: str, context: Context, merchant: Merchant
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
    merchant_account_id: str,
    context: Context,
    merchant: Merchant,
    from_: Annotated[Timestamp | None, Query(alias="from")] = None,
    to: Annotated[Timestamp | None, Query()] = None,
    type: Annotated[TransactionType | None, Query()] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """Movements on the account, oldest first, with an inclusive `from`/`to` range, in the
    real API's shapes (`merchant_account_payment`, `external_payment`, `payout`, `refund`)."""
    async with context.pool.acquire() as conn:
        account = await service.require_account(conn, merchant_account_id, merchant.merchant_id)
        page = await list_activity(
            conn,
            account.id,
            start=from_,
            end=to,
            type_=type,
            cursor=cursor,
            limit=limit,
        )
    return json_response(
        200, {"items": page.items, "pagination": {"next_cursor": page.next_cursor}}
    )


@router.post(
    "/v3/merchant-accounts/{merchant_account_id}/sweeping",
    tags=["merchant accounts"],
    response_model=SweepingOut,
    responses=ERRORS_SIGNED_POST,
)
async def set_sweeping(
    merchant_account_id: str,
    body: SweepingRequest,
    request: Request,
    context: Context,
    merchant: Merchant,
    raw: SignedBody,
) -> Response:
    """Sweep the balance above `max_amount_in_minor` to the account's approved IBAN at the
    end of every period (`frequency`), starting now; replaces earlier settings."""
    generated = context.settings.powers.sandbox_routes

    async def effect(conn: Connection) -> tuple[int, object]:
        account = await service.require_account(conn, merchant_account_id, merchant.merchant_id)
        await sweeping.set_sweeping(
            conn,
            account,
            max_amount=body.max_amount_in_minor,
            currency=body.currency,
            frequency=body.frequency,
            now=context.clock.now(),
            generated=generated,
        )
        return 200, await sweeping.read_sweeping(conn, account, generated)

    key = idempotency_key(request)
    scope = f"v3:{merchant.merchant_id}"
    return await respond_once(context, request, scope=scope, key=key, body=raw, effect=effect)


@router.get(
    "/v3/merchant-accounts/{merchant_account_id}/sweeping",
    tags=["merchant accounts"],
    response_model=SweepingOut,
    responses=ERRORS_AUTH_NOT_FOUND,
)
async def get_sweeping(merchant_account_id: str, context: Context, merchant: Merchant) -> Response:
    """The account's sweeping settings and destination; 404 when sweeping is not set."""
    async with context.pool.acquire() as conn:
        account = await service.require_account(conn, merchant_account_id, merchant.merchant_id)
        answer = await sweeping.read_sweeping(conn, account, context.settings.powers.sandbox_routes)
    return json_response(200, answer)


@router.delete(
    "/v3/merchant-accounts/{merchant_account_id}/sweeping",
    status_code=204,
    response_class=Response,
    tags=["merchant accounts"],
    responses=ERRORS_SIGNED_POST,
)
async def delete_sweeping(
    merchant_account_id: str,
    request: Request,
    context: Context,
    merchant: Merchant,
    raw: SignedBody,
) -> Response:
    """Stop sweeping the account (204 also when it was not set)."""

    async def effect(conn: Connection) -> tuple[int, object]:
        account = await service.require_account(conn, merchant_account_id, merchant.merchant_id)
        await sweeping.delete_sweeping(conn, account)
        return 204, {}

    key = idempotency_key(request)
    scope = f"v3:{merchant.merchant_id}"
    answer = await respond_once(context, request, scope=scope, key=key, body=raw, effect=effect)
    return Response(status_code=204) if answer.status_code == 204 else answer


@router.get("/v1/balances", tags=["payouts v1"], response_model=BalanceList, responses=ERRORS_AUTH)
async def list_balances(context: Context, merchant: Merchant) -> Response:
    """Balances of every currency account of the caller (spec 4.1)."""
    async with context.pool.acquire() as conn:
        accounts = await service.list_accounts(conn, merchant.merchant_id)
    return json_response(200, {"results": [a.to_v1_balance() for a in accounts]})
