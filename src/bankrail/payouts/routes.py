"""Payout routes: `POST /v1/payouts`, `GET /v1/transactions`, `POST /v3/payouts`,
`GET /v3/payouts/{id}`."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Header, Query, Request, Response

from bankrail.core.pagination import decode_cursor, encode_cursor
from bankrail.core.problems import CONFLICT, ProblemError
from bankrail.core.timefmt import Timestamp, iso_utc_7, parse_timestamp
from bankrail.http.auth import Merchant, SignedBody, signed_body
from bankrail.http.deps import Context
from bankrail.http.idempotent import idempotency_key, keyed_request
from bankrail.http.listing import ListWindow
from bankrail.http.openapi import ERRORS_AUTH, ERRORS_AUTH_NOT_FOUND, ERRORS_SIGNED_POST
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

router = APIRouter()

V1SignedBody = Annotated[
    bytes,
    Depends(
        signed_body(header="X-SVC-Signature", require_idempotency_key=False, allow_body_only=True)
    ),
]
MAX_IDEMPOTENCY_KEY_LENGTH = 200


async def _idempotency_key(
    request: Request,
    header: Annotated[
        str, Header(alias="idempotency-key", min_length=1, max_length=MAX_IDEMPOTENCY_KEY_LENGTH)
    ],
) -> str:
    """The Idempotency-Key, validated and documented as a header parameter, but read as the
    signature check read it (http/idempotent.py): 400 when it is repeated."""
    del header  # FastAPI's copy, the first of several: validated, not used
    key = idempotency_key(request)
    assert key is not None  # the header parameter is required
    return key


IdempotencyKey = Annotated[str, Depends(_idempotency_key)]
# v1 transaction ids are unique for good: a repeat is recognised however late it comes.
V1_IDEMPOTENCY_TTL = timedelta(days=365 * 100)
V3Status = Literal["pending", "authorized", "executed", "failed"]


@router.post(
    "/v3/payouts",
    status_code=202,
    tags=["payouts v3"],
    response_model=PayoutCreated,
    responses=ERRORS_SIGNED_POST,
)
async def create_v3_payout(
    body: V3PayoutRequest,
    request: Request,
    context: Context,
    merchant: Merchant,
    raw: SignedBody,
    idempotency_key: IdempotencyKey,
) -> Response:
    """Create an open-loop (`external_account`), closed-loop (`payment_source`) or verified
    (`user_determined`) payout.

    Funds are held at once; the outcome arrives as `payout_executed` or `payout_failed`. A
    verified payout answers `authorization_required` with a `resource_token` for the payout
    page, where its payee chooses and proves the account it pays.
    """
    beneficiary = body.beneficiary.model_dump()
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


@router.get(
    "/v3/payouts/{payout_id}",
    tags=["payouts v3"],
    response_model=PayoutOut,
    responses=ERRORS_AUTH_NOT_FOUND,
)
async def get_v3_payout(payout_id: uuid.UUID, context: Context, merchant: Merchant) -> Response:
    """A payout with its status, and `failure_reason` when it failed."""
    async with context.pool.acquire() as conn:
        record = await service.get_v3_payout(conn, payout_id, merchant.merchant_id)
    return json_response(200, record)


@router.get(
    "/v3/payouts",
    tags=["payouts v3"],
    response_model=PayoutList,
    responses=ERRORS_AUTH,
)
async def list_v3_payouts(
    context: Context,
    merchant: Merchant,
    window: ListWindow,
    merchant_account_id: Annotated[uuid.UUID | None, Query()] = None,
    status: Annotated[
        Literal[
            "authorization_required", "authorizing", "pending", "authorized", "executed", "failed"
        ]
        | None,
        Query(),
    ] = None,
) -> Response:
    """The caller's payouts, newest first, each as `GET /v3/payouts/{id}` shows it; `from`
    and `to` (inclusive) bound `created_at`."""
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
    body: V1PayoutRequest, context: Context, merchant: Merchant
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


@router.post(
    "/v1/payouts",
    status_code=202,
    tags=["payouts v1"],
    response_model=V1PayoutAccepted,
    responses=ERRORS_SIGNED_POST,
)
async def create_v1_payout(
    body: V1PayoutRequest,
    request: Request,
    context: Context,
    merchant: Merchant,
    raw: V1SignedBody,
) -> Response:
    """Pay out from the merchant's account in `currency` to a beneficiary IBAN.

    `transaction_id` is the idempotency key: a repeat with the same body answers 202 again
    and creates nothing; a different body is 409. Insufficient funds and AML hits are
    accepted and then rejected by a `payout_rejected` event.
    """
    del raw  # verified by the dependency
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


@router.get(
    "/v1/transactions",
    tags=["payouts v1"],
    response_model=V1TransactionList,
    responses=ERRORS_AUTH,
)
async def list_v1_transactions(
    context: Context,
    merchant: Merchant,
    from_: Annotated[Timestamp | None, Query(alias="from")] = None,
    to: Annotated[Timestamp | None, Query()] = None,
    type: Annotated[Literal["Payout", "Topup", "payout", "topup"] | None, Query()] = None,
    currency: Annotated[str | None, Query(pattern=r"^[A-Z]{3}$")] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> Response:
    """The payouts made through `POST /v1/payouts` and the top-ups of the caller's currency
    accounts, oldest first; `from` and `to` are inclusive, `type` is `Payout` or `Topup`.

    v3 payouts are listed by `GET /v3/merchant-accounts/{id}/transactions` only: they have
    no `context_code`, and one paid to a sort code has no `beneficiary_iban`, both strings in
    every v1 record."""
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
