"""The operator's panel at `/console/operator`: balance thresholds, the AML screening list,
and (sandbox mode only) simulated incoming bank transfers and the service clock."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import asyncpg
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from bankrail.core.jsonbody import dumps, loads
from bankrail.core.money import format_amount
from bankrail.db.pool import Connection
from bankrail.http.idempotent import keyed_request
from bankrail.merchants import service as merchants_service
from bankrail.merchants.balances import reevaluate_notifications
from bankrail.merchants.models import MerchantAccount
from bankrail.pages.console.chart import format_time
from bankrail.pages.console.core import (
    ConsoleRoute,
    Errors,
    PageError,
    Viewer,
    app_context,
    attempt,
    check_csrf,
    not_found,
    redirect_with_flash,
    render,
    resolve_viewer,
    text,
)
from bankrail.pages.console.forms import (
    MAX_NAME_LENGTH,
    FieldError,
    parse_amount,
    parse_clock_advance,
    parse_text,
    parse_uuid,
)
from bankrail.pages.console.session import SESSION_TTL, set_session_cookie
from bankrail.rails.incoming import IncomingTransfer, receive_transfer
from bankrail.rails.screening import replace_screening_list, screening_list
from bankrail.security.idempotency import KeyedRequest
from bankrail.security.idempotent_commit import IdempotentWork

router = APIRouter(prefix="/operator", route_class=ConsoleRoute)

MAX_SCREENING_NAMES = 10_000
FormErrors = dict[str, Errors]
FormValues = dict[str, dict[str, str]]


async def _panel(
    request: Request,
    viewer: Viewer,
    status: int = 200,
    *,
    errors: FormErrors | None = None,
    values: FormValues | None = None,
) -> Response:
    context = app_context(request)
    async with context.pool.acquire() as conn:
        accounts = (
            await merchants_service.list_accounts(conn, viewer.merchant_id)
            if viewer.merchant_id is not None
            else []
        )
        names = await screening_list(conn)
    values = values or {}
    values.setdefault("screening", {"names": "\n".join(names)})
    return render(
        request,
        "operator.html",
        status,
        title="Operator",
        section="operator",
        accounts=accounts,
        screening=names,
        form_errors=errors or {},
        form_values=values,
        nonce=str(uuid.uuid4()),
    )


@router.get("", response_class=HTMLResponse)
async def operator_panel(request: Request) -> Response:
    """Thresholds, screening list and the sandbox controls."""
    viewer = await resolve_viewer(request, needs=None, operator_only=True)
    return await _panel(request, viewer)


async def _account_in_scope(
    conn: Connection, viewer: Viewer, raw: str, field: str
) -> MerchantAccount:
    try:
        account_id = parse_uuid(raw, field)
    except FieldError as exc:
        raise not_found("merchant account") from exc
    if account_id is None:
        raise PageError(400, "Choose a merchant account.")
    account = await merchants_service.get_account(conn, account_id, viewer.merchant_id)
    if account is None:
        raise not_found("merchant account")
    return account


@router.post("/thresholds")
async def set_threshold(request: Request) -> Response:
    """Set (or clear, with an empty field) an account's low-balance threshold."""
    viewer = await resolve_viewer(request, needs=None, operator_only=True)
    form = await check_csrf(request, viewer)
    context = app_context(request)
    raw_account = text(form, "account_id")
    raw_threshold = text(form, "threshold")
    async with context.pool.acquire() as conn:
        account = await _account_in_scope(conn, viewer, raw_account, "account_id")
    form_key = f"threshold-{account.id}"
    errors: Errors = {}
    threshold = (
        attempt(errors, parse_amount, raw_threshold, "threshold", account.currency, allow_zero=True)
        if raw_threshold.strip()
        else None
    )
    if errors:
        return await _panel(
            request,
            viewer,
            400,
            errors={form_key: errors},
            values={form_key: {"threshold": raw_threshold}},
        )
    now = context.clock.now()
    async with context.pool.acquire() as conn, conn.transaction():
        await merchants_service.set_balance_threshold(conn, account.id, threshold)
        await reevaluate_notifications(conn, account.id, now)
        updated = await merchants_service.require_account(conn, account.id)
    if threshold is None:
        message = (
            f"Threshold cleared for the {account.currency} account {account.identifiers.iban}."
        )
    else:
        message = (
            f"Threshold for the {account.currency} account {account.identifiers.iban} set to "
            f"{format_amount(threshold, account.currency)}; notification state: "
            f"{updated.notification_state.replace('_', ' ')}."
        )
    return await redirect_with_flash(request, viewer, viewer.url("/console/operator"), message)


@router.post("/screening-list")
async def save_screening_list(request: Request) -> Response:
    """Replace the AML screening list (one beneficiary name per line)."""
    viewer = await resolve_viewer(request, needs=None, operator_only=True)
    form = await check_csrf(request, viewer)
    raw = text(form, "names")
    names = [line.strip() for line in raw.splitlines() if line.strip()]
    too_long = [n for n in names if len(n) > MAX_NAME_LENGTH]
    errors: Errors = {}
    if too_long:
        errors["names"] = [
            f"each name must be at most {MAX_NAME_LENGTH} characters ({len(too_long)} are longer)"
        ]
    elif len(names) > MAX_SCREENING_NAMES:
        errors["names"] = [f"at most {MAX_SCREENING_NAMES} names"]
    if errors:
        return await _panel(
            request,
            viewer,
            400,
            errors={"screening": errors},
            values={"screening": {"names": raw}},
        )
    async with app_context(request).pool.acquire() as conn, conn.transaction():
        stored = await replace_screening_list(conn, names)
    count = len(stored)
    message = f"Screening list saved: {count} name{'s' if count != 1 else ''}."
    return await redirect_with_flash(request, viewer, viewer.url("/console/operator"), message)


def _require_sandbox(request: Request) -> None:
    if not app_context(request).settings.powers.sandbox_routes:
        raise PageError(404, "The sandbox controls exist only in sandbox mode.")


def _incoming_transfer(
    values: dict[str, str], account: MerchantAccount
) -> tuple[IncomingTransfer | None, Errors]:
    """The simulated transfer the form describes into `account`, or None and the form's
    errors."""
    errors: Errors = {}
    amount = attempt(errors, parse_amount, values["amount"], "amount", account.currency)
    remitter = attempt(
        errors, parse_text, values["remitter_name"], "remitter_name", required=True, max_length=140
    )
    reference = attempt(
        errors, parse_text, values["reference"], "reference", required=False, max_length=140
    )
    if errors or amount is None or remitter is None:
        return None, errors
    transfer = IncomingTransfer(
        amount_in_minor=amount,
        currency=account.currency,
        remitter_name=remitter,
        reference=reference or "",
        iban=account.identifiers.iban,
    )
    return transfer, errors


def _transfer_key(
    request: Request, raw_key: str, account: MerchantAccount, transfer: IncomingTransfer
) -> KeyedRequest | None:
    """The transfer under the form's one-time key (None when the form sent none)."""
    key = raw_key.strip()[:200]
    body = dumps(
        {
            "account": str(account.id),
            "amount": transfer.amount_in_minor,
            "remitter": transfer.remitter_name,
            "reference": transfer.reference,
        }
    )
    keyed = None
    if key:
        keyed = keyed_request(
            app_context(request), request, scope="console:sandbox-bank-transfer", key=key, body=body
        )
    return keyed


@router.post("/sandbox/bank-transfer")
async def sandbox_bank_transfer(request: Request) -> Response:
    """Simulate an incoming bank transfer to an account (credited at once). The form's
    one-time key makes a double submission credit the account only once."""
    _require_sandbox(request)
    viewer = await resolve_viewer(request, needs=None, operator_only=True)
    form = await check_csrf(request, viewer)
    context = app_context(request)
    values = {
        "account_id": text(form, "account_id"),
        "amount": text(form, "amount"),
        "remitter_name": text(form, "remitter_name"),
        "reference": text(form, "reference"),
    }
    async with context.pool.acquire() as conn:
        account = await _account_in_scope(conn, viewer, values["account_id"], "account_id")
    transfer, errors = _incoming_transfer(values, account)
    if transfer is None:
        return await _panel(
            request, viewer, 400, errors={"transfer": errors}, values={"transfer": values}
        )
    ran = False

    async def handler(conn: Connection) -> tuple[int, bytes]:
        nonlocal ran
        ran = True
        transfer_id, _ = await receive_transfer(conn, transfer, context.clock.now())
        return 201, dumps({"id": str(transfer_id)})

    keyed = _transfer_key(request, text(form, "idempotency_key"), account, transfer)
    try:
        status, answer = await context.idempotent_commit.accept(
            IdempotentWork(keyed, handler, context.clock.now())
        )
    except asyncpg.exceptions.NumericValueOutOfRangeError:
        errors = {"amount": ["is too large: the balance would exceed what can be stored"]}
        return await _panel(
            request, viewer, 400, errors={"transfer": errors}, values={"transfer": values}
        )
    if status >= 400:
        problem: dict[str, Any] = loads(answer)
        raise PageError(status, str(problem.get("detail", "The transfer was refused.")))
    credited = format_amount(transfer.amount_in_minor, account.currency)
    if ran:
        message = (
            f"Received {credited} into the {account.currency} account {account.identifiers.iban}."
        )
    else:
        message = f"This transfer was already made ({credited}); it was not credited twice."
    return await redirect_with_flash(request, viewer, viewer.url("/console/operator"), message)


@router.post("/sandbox/clock")
async def sandbox_clock(request: Request) -> Response:
    """Move the service clock forward: due retries, expiries and rail steps then happen."""
    _require_sandbox(request)
    viewer = await resolve_viewer(request, needs=None, operator_only=True)
    form = await check_csrf(request, viewer)
    values = {"amount": text(form, "amount"), "unit": text(form, "unit")}
    errors: Errors = {}
    seconds = attempt(errors, parse_clock_advance, values["amount"], values["unit"])
    if errors or seconds is None:
        return await _panel(
            request, viewer, 400, errors={"clock": errors}, values={"clock": values}
        )
    context = app_context(request)
    async with context.pool.acquire() as conn:
        now = await context.clock.advance(conn, seconds)
    unit = "second" if seconds == 1 else "seconds"
    message = f"Service clock advanced by {seconds:g} {unit}; it is now {format_time(now)}."
    response = await redirect_with_flash(request, viewer, viewer.url("/console/operator"), message)
    # The operator who moved the clock stays signed in: the session's 8 hours restart at
    # the new service time (anyone else's session may have expired).
    renewed = replace(viewer.session, expires=int((now + SESSION_TTL).timestamp()))
    set_session_cookie(response, request, viewer.signer, renewed)
    return response
