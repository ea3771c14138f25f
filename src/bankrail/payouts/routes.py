"""Payout routes: `POST /v1/payouts`, `GET /v1/transactions`, `POST /v3/payouts`,
`GET /v3/payouts/{id}`, `GET /v3/payouts` (http/pipeline.py runs each one's steps)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field
from starlette.responses import Response

from bankrail.core.pagination import decode_cursor, encode_cursor
from bankrail.core.problems import CONFLICT, ProblemError
from bankrail.core.timefmt import Timestamp, iso_utc_7, parse_timestamp
from bankrail.http.deps import AppContext
from bankrail.http.idempotent import keyed_request
from bankrail.http.listing import WindowQuery
from bankrail.http.openapi import ERRORS_AUTH, ERRORS_AUTH_NOT_FOUND, ERRORS_SIGNED_POST
from bankrail.http.pipeline import MERCHANT, SIGNED, Call, Endpoint, Signed, routes
from bankrail.http.responses import answer_response, json_response
from bankrail.merchants.models import AccountIdentifiers
from bankrail.payouts import service, verified
from bankrail.payouts.models import CLOSED_LOOP_FIELD, OPEN_LOOP_FIELD, PayoutRequest
from bankrail.payouts.queries import list_payouts
from bankrail.payouts.schemas import (
    PayoutCreated,
    PayoutList,
    PayoutOut,
    V1PayoutAccepted,
    V1PayoutRequest,
    V1TransactionList,
    V3PayoutRequest,
)
from bankrail.security.tokens import AccessClaims

# v1 requests are signed with X-SVC-Signature, over the body alone if need be, and take
# their key from the body (`transaction_id`).
V1_SIGNED = Signed(header="X-SVC-Signature", require_idempotency_key=False, allow_body_only=True)
# v1 transaction ids are unique for good: a repeat is recognised however late it comes.
V1_IDEMPOTENCY_TTL = timedelta(days=365 * 100)
# A verified payout's stages before the rails are statuses too (payouts/verification.py).
V3Status = Literal[
    "authorization_required", "authorizing", "pending", "authorized", "executed", "failed"
]


class PayoutListQuery(WindowQuery):
    """`GET /v3/payouts`: the window and the filters."""

    merchant_account_id: uuid.UUID | None = None
    status: V3Status | None = None


class V1TransactionsQuery(BaseModel):
    """`GET /v1/transactions`."""

    from_: Timestamp | None = Field(None, alias="from")
    to: Timestamp | None = None
    type: Literal["Payout", "Topup", "payout", "topup"] | None = None
    currency: str | None = Field(None, pattern=r"^[A-Z]{3}$")
    cursor: str | None = Field(None, max_length=200)
    limit: int = Field(1000, ge=1, le=10000)


async def create_v3_payout(call: Call[V3PayoutRequest, None]) -> Response:
    """Create an open-loop (`external_account`), closed-loop (`payment_source`) or verified
    (`user_determined`) payout.

    Funds are held at once; the outcome arrives as `payout_executed` or `payout_failed`. A
    verified payout answers `authorization_required` with a `resource_token` for the payout
    page, where its payee chooses and proves the account it pays.
    """
    body, request, context, merchant, raw = (
        call.body,
        call.request,
        call.context,
        call.merchant,
        call.raw,
    )
    idempotency_key = call.key
    assert idempotency_key is not None  # required
    beneficiary = body.beneficiary.model_dump(exclude_none=True)
    field = CLOSED_LOOP_FIELD if beneficiary["type"] == "payment_source" else OPEN_LOOP_FIELD
    payout = PayoutRequest(
        api="v3",
        merchant_id=merchant.merchant_id,
        account_id=uuid.UUID(body.merchant_account_id),
        currency=body.currency,
        amount=body.amount_in_minor,
        beneficiary=beneficiary,
        identifiers=service.beneficiary_identifiers(beneficiary, field),
        field=field,
        reference=beneficiary["reference"],
        metadata=body.metadata,
        now=context.clock.now(),
        **service.request_options(body),
    )
    answer = None
    if payout.verified:
        payout, answer = verified.prepared(payout, context.tokens, payout.now)
    status, reply = await context.services.get(service.PayoutAcceptance).accept(
        service.Keyed.under(
            payout,
            keyed_request(
                context, request, scope=f"v3:{merchant.merchant_id}", key=idempotency_key, body=raw
            ),
            answer=answer,
        )
    )
    return answer_response(status, reply)


async def get_v3_payout(call: Call[None, None]) -> Response:
    """A payout with its status, and `failure_reason` when it failed."""
    payout_id, context, merchant = call.params["payout_id"], call.context, call.merchant
    async with context.pool.acquire() as conn:
        record = await service.get_v3_payout(conn, payout_id, merchant.merchant_id)
    return json_response(200, record)


async def list_v3_payouts(call: Call[None, PayoutListQuery]) -> Response:
    """The caller's payouts, newest first, each as `GET /v3/payouts/{id}` shows it; `from`
    and `to` (inclusive) bound `created_at`."""
    context, merchant, window = call.context, call.merchant, call.query.window()
    merchant_account_id, status = call.query.merchant_account_id, call.query.status
    async with context.pool.acquire() as conn:
        items, next_cursor = await list_payouts(
            conn,
            merchant.merchant_id,
            window,
            merchant_account_id=merchant_account_id,
            status=status,
        )
    return json_response(200, {"items": items, "pagination": {"next_cursor": next_cursor}})


def _v1_payout_request(
    body: V1PayoutRequest, context: AppContext, merchant: AccessClaims
) -> PayoutRequest:
    """The payout a v1 request asks for, to the IBAN it names (or the problem with that
    IBAN, which the acceptance answers)."""
    field = "beneficiary_iban"
    try:
        identifiers: AccountIdentifiers | ProblemError = service.iban_identifiers(
            body.beneficiary_iban, field
        )
    except ProblemError as problem:
        identifiers = problem
    return PayoutRequest(
        api="v1",
        merchant_id=merchant.merchant_id,
        account_id=None,
        currency=body.currency,
        amount=body.amount_in_minor,
        beneficiary={
            "type": "external_account",
            "account_holder_name": body.beneficiary_name,
            "reference": body.beneficiary_reference,
            "account_identifier": {"type": "iban", "iban": body.beneficiary_iban},
        },
        identifiers=identifiers,
        field=field,
        reference=body.beneficiary_reference,
        transaction_id=uuid.UUID(body.transaction_id),
        context_code=body.context_code,
        now=context.clock.now(),
    )


async def create_v1_payout(call: Call[V1PayoutRequest, None]) -> Response:
    """Pay out from the merchant's account in `currency` to a beneficiary IBAN.

    `transaction_id` is the idempotency key: a repeat with the same body answers 202 again
    and creates nothing; a different body is 409. Insufficient funds and AML hits are
    accepted and then rejected by a `payout_rejected` event.
    """
    body, request, context, merchant = call.body, call.request, call.context, call.merchant
    payout = _v1_payout_request(body, context, merchant)
    fields = {**body.model_dump(), "transaction_id": body.transaction_id.lower()}
    canonical = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)
    status, answer = await context.services.get(service.PayoutAcceptance).accept(
        service.Keyed.under(
            payout,
            keyed_request(
                context,
                request,
                scope=f"v1:{merchant.merchant_id}",
                key=body.transaction_id.lower(),
                body=canonical,
                ttl=V1_IDEMPOTENCY_TTL,
            ),
            answer={"transaction_id": body.transaction_id},
            reuse_problem=CONFLICT,
            # A transaction_id is taken only by a payout that was created: a request refused
            # with 400 may be corrected and sent again under the same id.
            store_client_errors=False,
        )
    )
    return answer_response(status, answer)


def _v1_record(row: Any) -> dict[str, Any]:
    details = row["details"]

    def stamp(key: str) -> str | None:
        value = details.get(key)
        return iso_utc_7(parse_timestamp(value)) if value else None

    if row["type"] == "topup":
        return {
            "transaction_id": str(row["id"]),
            "type": "topup",
            "settled_at": stamp("settled_at"),
            "remitter_name": details.get("remitter_name"),
            "remitter_iban": details.get("remitter_iban"),
            "reference": details.get("reference"),
            "amount_in_minor": row["amount_in_minor"],
            "currency": row["currency"],
            "status": "settled",
        }
    return {
        "transaction_id": details.get("transaction_id", str(row["id"])),
        "type": "payout",
        "authorised_at": stamp("authorized_at"),
        "submitted_at": stamp("submitted_at"),
        "settled_at": stamp("executed_at"),
        "beneficiary_name": details.get("beneficiary_name"),
        "beneficiary_iban": details.get("beneficiary_iban"),
        "beneficiary_reference": details.get("reference"),
        "amount_in_minor": row["amount_in_minor"],
        "currency": row["currency"],
        "context_code": details.get("context_code"),
        "status": details.get("v1_status", "pending"),
    }


async def list_v1_transactions(call: Call[None, V1TransactionsQuery]) -> Response:
    """The payouts made through `POST /v1/payouts` and the top-ups of the caller's currency
    accounts, oldest first; `from` and `to` are inclusive, `type` is `Payout` or `Topup`.

    v3 payouts are listed by `GET /v3/merchant-accounts/{id}/transactions` only: they have
    no `context_code`, and one paid to a sort code has no `beneficiary_iban`, both strings in
    every v1 record."""
    context, merchant, query = call.context, call.merchant, call.query
    from_, to, type, currency = query.from_, query.to, query.type, query.currency
    cursor, limit = query.cursor, query.limit
    after_time, after_id = decode_cursor(cursor) if cursor else (None, None)
    rows = await context.pool.fetch(
        "SELECT a.id, a.type, a.amount_in_minor, a.currency, a.created_at, a.details"
        " FROM account_activity a JOIN merchant_accounts m ON m.id = a.merchant_account_id"
        " WHERE m.merchant_id = $1"
        " AND (a.type = 'topup' OR (a.type = 'payout' AND a.details->>'api' = 'v1'))"
        " AND ($2::text IS NULL OR a.type = $2) AND ($3::text IS NULL OR a.currency = $3)"
        " AND ($4::timestamptz IS NULL OR a.created_at >= $4)"
        " AND ($5::timestamptz IS NULL OR a.created_at <= $5)"
        " AND ($6::timestamptz IS NULL OR (a.created_at, a.id) > ($6, $7::uuid))"
        " ORDER BY a.created_at, a.id LIMIT $8",
        merchant.merchant_id,
        type.lower() if type else None,
        currency,
        from_,
        to,
        after_time,
        after_id,
        limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    answer: dict[str, Any] = {"results": [_v1_record(r) for r in rows]}
    if more:
        answer["next_cursor"] = encode_cursor(rows[-1]["created_at"], rows[-1]["id"])
    return json_response(200, answer)


ROUTES = routes(
    Endpoint(
        "POST",
        "/v3/payouts",
        create_v3_payout,
        MERCHANT,
        signed=SIGNED,
        idempotency="required",
        body=V3PayoutRequest,
        status_code=202,
        response_model=PayoutCreated,
        errors=ERRORS_SIGNED_POST,
        tags=["payouts v3"],
    ),
    Endpoint(
        "GET",
        "/v3/payouts/{payout_id}",
        get_v3_payout,
        MERCHANT,
        params={"payout_id": uuid.UUID},
        response_model=PayoutOut,
        errors=ERRORS_AUTH_NOT_FOUND,
        tags=["payouts v3"],
    ),
    Endpoint(
        "GET",
        "/v3/payouts",
        list_v3_payouts,
        MERCHANT,
        query=PayoutListQuery,
        response_model=PayoutList,
        errors=ERRORS_AUTH,
        tags=["payouts v3"],
    ),
    Endpoint(
        "POST",
        "/v1/payouts",
        create_v1_payout,
        MERCHANT,
        signed=V1_SIGNED,
        body=V1PayoutRequest,
        status_code=202,
        response_model=V1PayoutAccepted,
        errors=ERRORS_SIGNED_POST,
        tags=["payouts v1"],
    ),
    Endpoint(
        "GET",
        "/v1/transactions",
        list_v1_transactions,
        MERCHANT,
        query=V1TransactionsQuery,
        response_model=V1TransactionList,
        errors=ERRORS_AUTH,
        tags=["payouts v1"],
    ),
)
"""The payout routes, in the order of the OpenAPI document."""
