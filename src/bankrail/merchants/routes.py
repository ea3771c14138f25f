"""Merchant-facing account routes: v3 merchant accounts and v1 balances (http/pipeline.py
runs each one's steps)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field
from starlette.responses import Response

from bankrail.core.timefmt import Timestamp
from bankrail.db.pool import Connection
from bankrail.http.idempotent import respond_once
from bankrail.http.openapi import ERRORS_AUTH, ERRORS_AUTH_NOT_FOUND, ERRORS_SIGNED_POST
from bankrail.http.pipeline import MERCHANT, SIGNED, Call, Endpoint, routes
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

TransactionType = Literal[
    "merchant_account_payment", "external_payment", "payout", "refund", "payment", "topup"
]


class TransactionsQuery(BaseModel):
    """`GET /v3/merchant-accounts/{id}/transactions`."""

    from_: Timestamp | None = Field(None, alias="from")
    to: Timestamp | None = None
    type: TransactionType | None = None
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
    """Movements on the account, oldest first, with an inclusive `from`/`to` range, in the
    real API's shapes (`merchant_account_payment`, `external_payment`, `payout`, `refund`)."""
    merchant_account_id, context = call.params["merchant_account_id"], call.context
    merchant, query = call.merchant, call.query
    from_, to, type, cursor, limit = query.from_, query.to, query.type, query.cursor, query.limit
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


async def set_sweeping(call: Call[SweepingRequest, None]) -> Response:
    """Sweep the balance above `max_amount_in_minor` to the account's approved IBAN at the
    end of every period (`frequency`), starting now; replaces earlier settings."""
    merchant_account_id, body, context = call.params["merchant_account_id"], call.body, call.context
    merchant = call.merchant
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

    scope = f"v3:{merchant.merchant_id}"
    return await respond_once(
        context, call.request, scope=scope, key=call.key, body=call.raw, effect=effect
    )


async def get_sweeping(call: Call[None, None]) -> Response:
    """The account's sweeping settings and destination; 404 when sweeping is not set."""
    merchant_account_id, context = call.params["merchant_account_id"], call.context
    merchant = call.merchant
    async with context.pool.acquire() as conn:
        account = await service.require_account(conn, merchant_account_id, merchant.merchant_id)
        answer = await sweeping.read_sweeping(conn, account, context.settings.powers.sandbox_routes)
    return json_response(200, answer)


async def delete_sweeping(call: Call[None, None]) -> Response:
    """Stop sweeping the account (204 also when it was not set)."""
    merchant_account_id, context = call.params["merchant_account_id"], call.context
    merchant = call.merchant

    async def effect(conn: Connection) -> tuple[int, object]:
        account = await service.require_account(conn, merchant_account_id, merchant.merchant_id)
        await sweeping.delete_sweeping(conn, account)
        return 204, {}

    scope = f"v3:{merchant.merchant_id}"
    answer = await respond_once(
        context, call.request, scope=scope, key=call.key, body=call.raw, effect=effect
    )
    return Response(status_code=204) if answer.status_code == 204 else answer


async def list_balances(call: Call[None, None]) -> Response:
    """Balances of every currency account of the caller (spec 4.1)."""
    context, merchant = call.context, call.merchant
    async with context.pool.acquire() as conn:
        accounts = await service.list_accounts(conn, merchant.merchant_id)
    return json_response(200, {"results": [a.to_v1_balance() for a in accounts]})


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
        response_model=MerchantAccountOut,
        errors=ERRORS_AUTH_NOT_FOUND,
        tags=_TAGS,
    ),
    Endpoint(
        "GET",
        "/v3/merchant-accounts/{merchant_account_id}/transactions",
        list_merchant_account_transactions,
        MERCHANT,
        query=TransactionsQuery,
        response_model=AccountTransactionList,
        errors=ERRORS_AUTH_NOT_FOUND,
        tags=_TAGS,
    ),
    Endpoint(
        "POST",
        "/v3/merchant-accounts/{merchant_account_id}/sweeping",
        set_sweeping,
        MERCHANT,
        signed=SIGNED,
        body=SweepingRequest,
        response_model=SweepingOut,
        errors=ERRORS_SIGNED_POST,
        tags=_TAGS,
    ),
    Endpoint(
        "GET",
        "/v3/merchant-accounts/{merchant_account_id}/sweeping",
        get_sweeping,
        MERCHANT,
        response_model=SweepingOut,
        errors=ERRORS_AUTH_NOT_FOUND,
        tags=_TAGS,
    ),
    Endpoint(
        "DELETE",
        "/v3/merchant-accounts/{merchant_account_id}/sweeping",
        delete_sweeping,
        MERCHANT,
        signed=SIGNED,
        status_code=204,
        response_class=Response,
        errors=ERRORS_SIGNED_POST,
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
