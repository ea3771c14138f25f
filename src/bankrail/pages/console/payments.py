"""The console's payments and payouts pages: the filtered, paginated lists, a payment with its
history and refunds (and the refund form), and a payout with its lifecycle."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from bankrail.core.jsonbody import dumps
from bankrail.core.money import format_amount
from bankrail.core.problems import Conflict, InvalidParameters
from bankrail.db.pool import Connection, Pool
from bankrail.http.auth import require_payments_audience
from bankrail.http.idempotent import keyed_request
from bankrail.pages.console.core import (
    ConsoleRoute,
    Errors,
    Viewer,
    app_context,
    attempt,
    check_csrf,
    link_filters,
    not_found,
    object_id,
    redirect_with_flash,
    render,
    resolve_viewer,
    text,
)
from bankrail.pages.console.data import (
    PAYOUT_STATUS_STAGES,
    ListFilter,
    Page,
    get_payment,
    get_payout,
    list_payments,
    list_payouts,
)
from bankrail.pages.console.forms import parse_amount, parse_choice, parse_day_or_time, parse_text
from bankrail.payments.models import PaymentStatus
from bankrail.refunds import service as refunds_service
from bankrail.refunds.acceptance import RefundAcceptance, RefundToAccept
from bankrail.refunds.schemas import MAX_REFUND_REFERENCE  # as the API allows it

router = APIRouter(route_class=ConsoleRoute)

PAYMENT_STATUSES = tuple(s.value for s in PaymentStatus)
PAYOUT_STATUSES = tuple(PAYOUT_STATUS_STAGES)


def _list_filter(
    request: Request, viewer: Viewer, statuses: tuple[str, ...], errors: Errors
) -> tuple[ListFilter, dict[str, str]]:
    query = request.query_params
    values = {k: query.get(k, "") for k in ("status", "from", "to", "api", "cursor")}
    status = attempt(errors, parse_choice, values["status"], "status", statuses)
    created_from = attempt(errors, parse_day_or_time, values["from"], "from", end_of_day=False)
    created_before = attempt(errors, parse_day_or_time, values["to"], "to", end_of_day=True)
    api = attempt(errors, parse_choice, values["api"], "api", ("v1", "v3"))
    if created_from and created_before and created_from >= created_before:
        errors.setdefault("to", []).append("must not be before the start date")
    where = ListFilter(
        merchant_id=viewer.merchant_id,
        status=status,
        created_from=created_from,
        created_before=created_before,
        cursor=values["cursor"] or None,
        api=api,
    )
    return where, values


async def _list_page(
    request: Request,
    *,
    statuses: tuple[str, ...],
    lister: Callable[[Connection, ListFilter], Awaitable[Page]],
    template: str,
    title: str,
) -> Response:
    """A filtered, paginated list page; a bad filter or page link is a 400 with its message."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    errors: Errors = {}
    where, values = _list_filter(request, viewer, statuses, errors)
    items: list[dict[str, Any]] = []
    next_cursor = None
    if not errors:
        try:
            async with app_context(request).pool.acquire() as conn:
                page = await lister(conn, where)
            items, next_cursor = page.items, page.next_cursor
        except InvalidParameters:
            errors["cursor"] = ["This page link is not valid; start again from the first page."]
    return render(
        request,
        template,
        400 if errors else 200,
        title=title,
        section=title.lower(),
        items=items,
        next_cursor=next_cursor,
        values=values,
        filters=link_filters(values),
        errors=errors,
        statuses=statuses,
    )


@router.get("/payments", response_class=HTMLResponse)
async def payments_list(request: Request) -> Response:
    """Pay-ins, newest first, filtered by status and creation date."""
    return await _list_page(
        request,
        statuses=PAYMENT_STATUSES,
        lister=list_payments,
        template="payments.html",
        title="Payments",
    )


async def _payment_page(
    request: Request,
    viewer: Viewer,
    payment_id: uuid.UUID,
    status: int = 200,
    *,
    errors: Errors | None = None,
    values: dict[str, str] | None = None,
) -> Response:
    async with app_context(request).pool.acquire() as conn:
        payment = await get_payment(conn, payment_id, viewer.merchant_id)
        if payment is None:
            raise not_found("payment")
        refunds = await refunds_service.list_refunds(conn, payment_id, payment["merchant_id"])
    history = payment["history"] if isinstance(payment["history"], list) else []
    return render(
        request,
        "payment.html",
        status,
        title=f"Payment {payment['id']}",
        section="payments",
        payment=payment,
        history=history,
        metadata=json.dumps(payment["metadata"], indent=2) if payment["metadata"] else "",
        refunds=refunds,
        refundable=payment["amount_in_minor"] - payment["refunded_amount_in_minor"],
        errors=errors or {},
        values={"amount": "", "reference": "", **(values or {})},
        nonce=str(uuid.uuid4()),
    )


@router.get("/payments/{payment_id}", response_class=HTMLResponse)
async def payment_detail(request: Request, payment_id: str) -> Response:
    """One payment with its status history, its refunds and (once settled) a refund form."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    return await _payment_page(request, viewer, object_id(payment_id, "payment"))


def _refund_form(values: dict[str, str], currency: str) -> tuple[int | None, str | None, Errors]:
    """The refund form's amount (in `currency`) and reference, and its errors."""
    errors: Errors = {}
    amount = attempt(errors, parse_amount, values["amount"], "amount", currency)
    reference = attempt(
        errors,
        parse_text,
        values["reference"],
        "reference",
        required=True,
        max_length=MAX_REFUND_REFERENCE,
    )
    return amount, reference, errors


async def _over_refund(pool: Pool, payment_id: uuid.UUID, viewer: Viewer, currency: str) -> Errors:
    """The form's error when its amount is more than what is left to refund of the payment."""
    async with pool.acquire() as conn:
        current = await get_payment(conn, payment_id, viewer.merchant_id)
    assert current is not None
    left = format_amount(current["amount_in_minor"] - current["refunded_amount_in_minor"], currency)
    return {"amount": [f"must be at most {left}, what is left to refund of this payment"]}


@router.post("/payments/{payment_id}/refunds")
async def refund_payment(request: Request, payment_id: str) -> Response:
    """Refund part or all of a settled payment (the refund use case of the API). The form's
    one-time key makes a double submission refund only once."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    form = await check_csrf(request, viewer)
    context = app_context(request)
    payment_uuid = object_id(payment_id, "payment")
    async with context.pool.acquire() as conn:
        payment = await get_payment(conn, payment_uuid, viewer.merchant_id)
    if payment is None:
        raise not_found("payment")
    currency = payment["currency"]
    values = {"amount": text(form, "amount"), "reference": text(form, "reference")}
    amount, reference, errors = _refund_form(values, currency)
    if errors or amount is None or reference is None:
        return await _payment_page(request, viewer, payment_uuid, 400, errors=errors, values=values)
    merchant_id: uuid.UUID = payment["merchant_id"]
    key = text(form, "idempotency_key").strip()[:200]
    body = dumps({"payment": str(payment_uuid), "amount": amount, "reference": reference})
    now = context.clock.now()
    try:
        _, refund_id = await context.services.get(RefundAcceptance).accept_created(
            RefundToAccept(
                merchant_id=merchant_id,
                payment_id=payment_uuid,
                amount=amount,
                reference=reference,
                metadata=None,
                now=now,
                keyed=keyed_request(
                    context, request, scope=f"console:refund:{merchant_id}", key=key, body=body
                )
                if key
                else None,
                store_client_errors=False,
            )
        )
    except Conflict as exc:
        errors = {"status": [exc.detail]}
        return await _payment_page(request, viewer, payment_uuid, 409, errors=errors, values=values)
    except InvalidParameters:
        errors = await _over_refund(context.pool, payment_uuid, viewer, currency)
        return await _payment_page(request, viewer, payment_uuid, 400, errors=errors, values=values)
    refunded = format_amount(amount, currency)
    if refund_id is not None:
        message = f"Refund of {refunded} accepted; it is paid to the payer's account shortly."
    else:
        message = f"This refund was already made ({refunded}); it was not made twice."
    return await redirect_with_flash(
        request, viewer, viewer.url(f"/console/payments/{payment_uuid}"), message
    )


@router.get("/payouts", response_class=HTMLResponse)
async def payouts_list(request: Request) -> Response:
    """Payouts of API v1 and v3, newest first, filtered by status, API and date."""
    return await _list_page(
        request,
        statuses=PAYOUT_STATUSES,
        lister=list_payouts,
        template="payouts.html",
        title="Payouts",
    )


@router.get("/payouts/{payout_id}", response_class=HTMLResponse)
async def payout_detail(request: Request, payout_id: str) -> Response:
    """One payout with its lifecycle as a timeline."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    async with app_context(request).pool.acquire() as conn:
        payout = await get_payout(conn, object_id(payout_id, "payout"), viewer.merchant_id)
    if payout is None:
        raise not_found("payout")
    steps = [("Created", payout["created_at"]), ("Authorized", payout["authorized_at"])]
    steps.append(("Submitted to the scheme", payout["submitted_at"]))
    if payout["failed_at"]:
        steps.append(("Failed", payout["failed_at"]))
    else:
        steps.append(("Executed", payout["executed_at"]))
    return render(
        request,
        "payout.html",
        title=f"Payout {payout['id']}",
        section="payouts",
        payout=payout,
        steps=steps,
        metadata=json.dumps(payout["metadata"], indent=2) if payout["metadata"] else "",
    )
