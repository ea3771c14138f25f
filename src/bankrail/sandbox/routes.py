"""`/sandbox/...`: incoming bank transfers, the payer's balance behind a mandate, the
service clock and merchant resets (docs/operations.md, docs/sandbox.md)."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import BaseModel, Field, StrictInt, StrictStr, model_validator
from starlette.responses import Response

from bankrail.core.iban import normalise_iban
from bankrail.core.money import ACCOUNT_CURRENCIES, MAX_AMOUNT_IN_MINOR
from bankrail.core.problems import invalid_field
from bankrail.core.timefmt import iso_utc
from bankrail.http.idempotent import respond_once
from bankrail.http.openapi import ERRORS_ADMIN, ERRORS_ADMIN_IDEMPOTENT
from bankrail.http.pipeline import OPERATOR, Call, Endpoint, routes
from bankrail.http.responses import json_response
from bankrail.http.schema_types import AccountNumber, SortCode, StrictModel
from bankrail.mandates import charges as mandate_charges
from bankrail.merchants.closing import reset_merchant as reset_merchant_data
from bankrail.rails.incoming import IncomingTransfer, receive_transfer

Text = Annotated[StrictStr, Field(min_length=1, max_length=140)]


class BankTransfer(StrictModel):
    """An incoming transfer to an IBAN, or to a sort code and account number."""

    iban: Annotated[StrictStr, Field(max_length=64)] | None = None
    sort_code: SortCode | None = None
    account_number: AccountNumber | None = None
    amount_in_minor: Annotated[StrictInt, Field(gt=0, le=MAX_AMOUNT_IN_MINOR)]
    currency: Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")]
    remitter_name: Text
    remitter_iban: Annotated[StrictStr, Field(max_length=64)] | None = None
    reference: Annotated[StrictStr, Field(min_length=0, max_length=140)]

    @model_validator(mode="after")
    def _one_destination(self) -> BankTransfer:
        by_iban = self.iban is not None
        by_scan = self.sort_code is not None or self.account_number is not None
        if by_iban == by_scan:
            raise ValueError("give either iban, or sort_code and account_number")
        if by_scan and (self.sort_code is None or self.account_number is None):
            raise ValueError("sort_code and account_number go together")
        return self


class BankTransferOut(BaseModel):
    """The recorded transfer and the account it credited."""

    id: str
    merchant_account_id: str | None


class ClockAdvance(StrictModel):
    """How far to move the service clock."""

    # One numeric type, so that the bounds appear in the published schema (on a union
    # pydantic drops them); strict mode still takes a JSON integer for a float field.
    seconds: Annotated[float, Field(ge=0, le=10 * 365 * 86400, allow_inf_nan=False)]


class ClockOut(BaseModel):
    """The service time."""

    now: str


async def simulate_bank_transfer(call: Call[BankTransfer, None]) -> Response:
    """Simulate a transfer arriving over the rail; credits the account before answering."""
    body, request, context, idempotency_key = call.body, call.request, call.context, call.key
    if body.currency not in ACCOUNT_CURRENCIES:
        raise invalid_field("currency", "merchant accounts are held in GBP or EUR")
    transfer = IncomingTransfer(
        amount_in_minor=body.amount_in_minor,
        currency=body.currency,
        remitter_name=body.remitter_name,
        reference=body.reference,
        iban=normalise_iban(body.iban, "iban") if body.iban else None,
        sort_code=body.sort_code,
        account_number=body.account_number,
        remitter_iban=normalise_iban(body.remitter_iban, "remitter_iban")
        if body.remitter_iban
        else None,
    )

    async def effect(conn: object) -> tuple[int, object]:
        transfer_id, account_id = await receive_transfer(
            conn,  # type: ignore[arg-type]
            transfer,
            context.clock.now(),
        )
        return 201, {"id": str(transfer_id), "merchant_account_id": str(account_id)}

    return await respond_once(
        context,
        request,
        scope="sandbox:bank-transfers",
        key=idempotency_key,
        body=await request.body(),
        effect=effect,
    )


class RemitterBalance(StrictModel):
    """The payer's balance at the mock bank behind a mandate."""

    remitter_balance_in_minor: Annotated[StrictInt, Field(ge=0, le=MAX_AMOUNT_IN_MINOR)]


class RemitterBalanceOut(BaseModel):
    """The mandate and the payer's balance now."""

    mandate_id: str
    remitter_balance_in_minor: int


async def set_remitter_balance(call: Call[RemitterBalance, None]) -> Response:
    """Set the payer's simulated balance at the mock bank behind a mandate (the balance the
    funds check reads and each payment on the mandate takes from); the next retry of a
    payment waiting for funds sees it."""
    body, context = call.body, call.context
    mandate_id: uuid.UUID = call.params["mandate_id"]
    async with context.pool.acquire() as conn:
        await mandate_charges.set_remitter_balance(conn, mandate_id, body.remitter_balance_in_minor)
    return json_response(
        200,
        {
            "mandate_id": str(mandate_id),
            "remitter_balance_in_minor": body.remitter_balance_in_minor,
        },
    )


async def advance_clock(call: Call[ClockAdvance, None]) -> Response:
    """Move the service clock forward; due retries, expiries and rail steps then happen."""
    body, context = call.body, call.context
    async with context.pool.acquire() as conn:
        now = await context.clock.advance(conn, float(body.seconds))
    return json_response(200, {"now": iso_utc(now)})


async def read_clock(call: Call[None, None]) -> Response:
    """The service time."""
    context = call.context
    return json_response(200, {"now": iso_utc(context.clock.now())})


class MerchantResetOut(BaseModel):
    """What a reset removed, by kind."""

    merchant_id: str
    removed: dict[str, int]


async def reset_merchant(call: Call[None, None]) -> Response:
    """Start a merchant clean: its payments, payouts, refunds, mandates, transactions, events
    and webhook deliveries are removed and its balances return to zero; its accounts (ids,
    IBANs), clients, keys and settings stay. 404 for an unknown merchant."""
    merchant_id, context = call.params["merchant_id"], call.context
    async with context.pool.acquire() as conn:
        removed = await reset_merchant_data(conn, merchant_id, context.clock.now())
    return json_response(200, {"merchant_id": str(merchant_id), "removed": removed})


ROUTES = routes(
    Endpoint(
        "POST",
        "/sandbox/bank-transfers",
        simulate_bank_transfer,
        OPERATOR,
        idempotency="optional",
        body=BankTransfer,
        status_code=201,
        response_model=BankTransferOut,
        errors={**ERRORS_ADMIN, **ERRORS_ADMIN_IDEMPOTENT},
        tags=["sandbox"],
    ),
    Endpoint(
        "PUT",
        "/sandbox/mandates/{mandate_id}/remitter-balance",
        set_remitter_balance,
        OPERATOR,
        body=RemitterBalance,
        params={"mandate_id": uuid.UUID},
        response_model=RemitterBalanceOut,
        errors=ERRORS_ADMIN,
        tags=["sandbox"],
    ),
    Endpoint(
        "POST",
        "/sandbox/clock/advance",
        advance_clock,
        OPERATOR,
        body=ClockAdvance,
        response_model=ClockOut,
        errors=ERRORS_ADMIN,
        tags=["sandbox"],
    ),
    Endpoint(
        "POST",
        "/sandbox/merchants/{merchant_id}/reset",
        reset_merchant,
        OPERATOR,
        params={"merchant_id": uuid.UUID},
        response_model=MerchantResetOut,
        errors=ERRORS_ADMIN,
        tags=["sandbox"],
    ),
    Endpoint(
        "GET",
        "/sandbox/clock",
        read_clock,
        OPERATOR,
        response_model=ClockOut,
        errors=ERRORS_ADMIN,
        tags=["sandbox"],
    ),
)
"""The sandbox's operator routes (mounted with the sandbox routes' power)."""
