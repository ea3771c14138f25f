"""The developer console at `/console`: sign-in, balances, payments, payouts, webhook
deliveries and settings for merchants, plus the operator's panel (see docs/console.md).

Server-rendered HTML (Jinja2), no build step and no JavaScript. Every page needs a session
(`console_session`); every POST checks the session's CSRF token before it changes anything.
"""

from __future__ import annotations

import hmac
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from bankrail.core.jsonbody import dumps
from bankrail.core.money import format_amount
from bankrail.core.problems import Conflict, InvalidParameters, ProblemError
from bankrail.db.pool import Connection
from bankrail.events import service as events_service
from bankrail.events.destinations import webhook_destination_problem
from bankrail.http.problems import render_problem_bytes
from bankrail.merchants import return_uris
from bankrail.merchants import service as merchants_service
from bankrail.pages.console.chart import build_chart
from bankrail.pages.console.core import (
    ConsoleRoute,
    Errors,
    PageError,
    Viewer,
    app_context,
    attempt,
    check_csrf,
    forbidden_form,
    not_found,
    read_form,
    redirect_with_flash,
    render,
    resolve_viewer,
    safe_next,
    text,
    upload_text,
)
from bankrail.pages.console.data import (
    PAYOUT_STATUS_STAGES,
    ListFilter,
    Page,
    balance_history,
    delivery_event_types,
    get_payment,
    get_payout,
    list_payments,
    list_payouts,
    list_signing_keys,
)
from bankrail.pages.console.forms import (
    MAX_KID_LENGTH,
    MAX_PEM_LENGTH,
    FieldError,
    check_webhook_uri,
    parse_amount,
    parse_choice,
    parse_day_or_time,
    parse_text,
)
from bankrail.pages.console.operator import router as operator_router
from bankrail.pages.console.session import (
    COOKIE_NAME,
    console_signer,
    is_revoked,
    new_session,
    revoke,
    set_flash,
    set_session_cookie,
)
from bankrail.payments.models import PaymentStatus
from bankrail.refunds import service as refunds_service
from bankrail.security.idempotency import fingerprint, run_idempotent
from bankrail.security.tokens import hash_secret, secret_matches

router = APIRouter(prefix="/console", include_in_schema=False, route_class=ConsoleRoute)

PAYMENT_STATUSES = tuple(s.value for s in PaymentStatus)
PAYOUT_STATUSES = tuple(PAYOUT_STATUS_STAGES)
DELIVERY_STATUSES = ("pending", "delivered", "discarded", "skipped")
MAX_REFUND_REFERENCE = 18  # a refund's reference, as the API allows it
LOGIN_FAILED = (
    "Sign-in failed: the client ID and secret do not match a client of any merchant. "
    "Check both values (they are printed by `bankrail init`) and try again."
)
OPERATOR_LOGIN_FAILED = (
    "Sign-in failed: this is not the operator token. It is the value of "
    "BANKRAIL_ADMIN_TOKEN, or the token written to <data-dir>/admin-token."
)


def _object_id(raw: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError as exc:
        raise not_found(what) from exc


def _filters(values: dict[str, str]) -> dict[str, str]:
    """The list's filters as link parameters (without the page cursor)."""
    return {k: v for k, v in values.items() if k != "cursor" and v}


# --- signing in and out ------------------------------------------------------------------------


async def _login_page(
    request: Request,
    status: int = 200,
    *,
    errors: Errors | None = None,
    values: dict[str, str] | None = None,
    kind: str = "merchant",
) -> Response:
    context = app_context(request)
    signer = await console_signer(request)
    now = context.clock.now()
    session = signer.read_session(request, now)
    fresh = session is None or session.signed_in
    if session is None or session.signed_in:
        session = new_session("anonymous", now)
    request.state.console_flash = signer.read_flash(request, now)
    response = render(
        request,
        "login.html",
        status,
        title="Sign in",
        section="login",
        csrf=signer.csrf_token(session.sid),
        next=safe_next(request.query_params.get("next") or (values or {}).get("next")),
        errors=errors or {},
        values=values or {},
        kind=kind,
    )
    if fresh:
        set_session_cookie(response, request, signer, session)
    return response


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request) -> Response:
    """The sign-in page (a signed-in visitor goes straight to the overview)."""
    context = app_context(request)
    signer = await console_signer(request)
    session = signer.read_session(request, context.clock.now())
    if session is not None and session.signed_in:
        async with context.pool.acquire() as conn:
            revoked = await is_revoked(conn, session.sid)
        if not revoked:
            return RedirectResponse(safe_next(request.query_params.get("next")), 303)
    return await _login_page(request)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    """Check merchant client credentials or the operator token and start a session."""
    context = app_context(request)
    signer = await console_signer(request)
    now = context.clock.now()
    form = await read_form(request)
    session = signer.read_session(request, now)
    if session is None or not signer.csrf_matches(session.sid, form.get("csrf_token")):
        raise forbidden_form()
    kind = text(form, "kind")
    target = safe_next(text(form, "next"))
    values = {"next": target}
    if kind == "operator":
        token = text(form, "admin_token").strip()
        expected = context.admin_token_hash
        if not token:
            errors = {"admin_token": ["Enter the operator token."]}
            return await _login_page(request, 400, errors=errors, values=values, kind=kind)
        if expected is None or not hmac.compare_digest(hash_secret(token), expected):
            errors = {"admin_token": [OPERATOR_LOGIN_FAILED]}
            return await _login_page(request, 401, errors=errors, values=values, kind=kind)
        started = new_session("operator", now, operator_key=signer.operator_key(expected))
        greeting = "Signed in as the operator."
    elif kind == "merchant":
        client_id = text(form, "client_id").strip()
        secret = text(form, "client_secret").strip()
        values["client_id"] = client_id
        missing: Errors = {}
        if not client_id:
            missing["client_id"] = ["Enter the client ID."]
        if not secret:
            missing["client_secret"] = ["Enter the client secret."]
        if missing:
            return await _login_page(request, 400, errors=missing, values=values, kind=kind)
        async with context.pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT c.merchant_id, c.secret_hash, m.name FROM api_clients c"
                " JOIN merchants m ON m.id = c.merchant_id WHERE c.client_id = $1",
                client_id,
            )
        stored = bytes(row["secret_hash"]) if row else hash_secret(client_id + "\0none")
        if not secret_matches(secret, stored) or row is None:
            errors = {"client_secret": [LOGIN_FAILED]}
            return await _login_page(request, 401, errors=errors, values=values, kind=kind)
        started = new_session("merchant", now, merchant_id=row["merchant_id"], client_id=client_id)
        greeting = f"Signed in to {row['name']}."
    else:
        raise PageError(400, "Choose how to sign in: as a merchant or as the operator.")
    response = RedirectResponse(target, status_code=303)
    set_session_cookie(response, request, signer, started)
    set_flash(response, request, signer, now, "success", greeting)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the session everywhere (the cookie stops working even if copied)."""
    context = app_context(request)
    signer = await console_signer(request)
    now = context.clock.now()
    session = signer.read_session(request, now)
    form = await read_form(request)
    if session is None or not session.signed_in:
        return RedirectResponse("/console/login", status_code=303)
    if not signer.csrf_matches(session.sid, form.get("csrf_token")):
        raise forbidden_form()
    async with context.pool.acquire() as conn:
        await revoke(conn, session, now)
    response = RedirectResponse("/console/login", status_code=303)
    response.delete_cookie(
        COOKIE_NAME,
        path="/console",
        httponly=True,
        samesite="lax",
        secure=context.settings.public_url.startswith("https://"),
    )
    set_flash(response, request, signer, now, "success", "You are signed out.")
    return response


# --- overview ----------------------------------------------------------------------------------


@router.get("", response_class=HTMLResponse)
async def overview(request: Request) -> Response:
    """Accounts with balances and a balance chart each (the operator first picks a merchant)."""
    viewer = await resolve_viewer(request)
    context = app_context(request)
    if viewer.merchant_id is None:
        return render(request, "overview.html", title="Overview", section="overview", cards=[])
    cards: list[dict[str, Any]] = []
    async with context.pool.acquire() as conn:
        accounts = await merchants_service.list_accounts(conn, viewer.merchant_id)
        for account in accounts:
            history = await balance_history(conn, account)
            cards.append(
                {
                    "account": account,
                    "chart": build_chart(history, account.currency, context.clock.now()),
                }
            )
    return render(request, "overview.html", title="Overview", section="overview", cards=cards)


# --- payments and payouts ----------------------------------------------------------------------


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
    viewer = await resolve_viewer(request)
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
        filters=_filters(values),
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
    viewer = await resolve_viewer(request)
    return await _payment_page(request, viewer, _object_id(payment_id, "payment"))


@router.post("/payments/{payment_id}/refunds")
async def refund_payment(request: Request, payment_id: str) -> Response:
    """Refund part or all of a settled payment (the refund use case of the API). The form's
    one-time key makes a double submission refund only once."""
    viewer = await resolve_viewer(request)
    form = await check_csrf(request, viewer)
    context = app_context(request)
    payment_uuid = _object_id(payment_id, "payment")
    async with context.pool.acquire() as conn:
        payment = await get_payment(conn, payment_uuid, viewer.merchant_id)
    if payment is None:
        raise not_found("payment")
    currency = payment["currency"]
    values = {"amount": text(form, "amount"), "reference": text(form, "reference")}
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
    if errors or amount is None or reference is None:
        return await _payment_page(request, viewer, payment_uuid, 400, errors=errors, values=values)
    merchant_id: uuid.UUID = payment["merchant_id"]
    ran = False

    async def handler(conn: Connection) -> tuple[int, bytes]:
        nonlocal ran
        ran = True
        refund_id = await refunds_service.accept_refund(
            conn,
            merchant_id=merchant_id,
            payment_id=payment_uuid,
            amount=amount,
            reference=reference,
            metadata=None,
            now=context.clock.now(),
        )
        return 201, dumps({"id": str(refund_id)})

    key = text(form, "idempotency_key").strip()[:200]
    body = dumps({"payment": str(payment_uuid), "amount": amount, "reference": reference})
    try:
        async with context.pool.acquire() as conn, conn.transaction():
            if key:
                await run_idempotent(
                    conn,
                    scope=f"console:refund:{merchant_id}",
                    key=key,
                    request_fingerprint=fingerprint("POST", request.url.path, body),
                    now=context.clock.now(),
                    ttl=timedelta(seconds=context.settings.idempotency_ttl_seconds),
                    handler=handler,
                    render_problem=lambda e: render_problem_bytes(e, context.settings.public_url),
                    store_client_errors=False,
                )
            else:
                await handler(conn)
    except Conflict as exc:
        errors = {"status": [exc.detail]}
        return await _payment_page(request, viewer, payment_uuid, 409, errors=errors, values=values)
    except InvalidParameters:
        async with context.pool.acquire() as conn:
            current = await get_payment(conn, payment_uuid, viewer.merchant_id)
        assert current is not None
        left = format_amount(
            current["amount_in_minor"] - current["refunded_amount_in_minor"], currency
        )
        errors = {"amount": [f"must be at most {left}, what is left to refund of this payment"]}
        return await _payment_page(request, viewer, payment_uuid, 400, errors=errors, values=values)
    refunded = format_amount(amount, currency)
    if ran:
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
    viewer = await resolve_viewer(request)
    async with app_context(request).pool.acquire() as conn:
        payout = await get_payout(conn, _object_id(payout_id, "payout"), viewer.merchant_id)
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


# --- webhook deliveries ------------------------------------------------------------------------


@router.get("/webhooks", response_class=HTMLResponse)
async def webhooks_list(request: Request) -> Response:
    """Webhook deliveries, newest first, with status and event type filters."""
    viewer = await resolve_viewer(request)
    query = request.query_params
    values = {k: query.get(k, "") for k in ("status", "event_type", "cursor")}
    errors: Errors = {}
    status = attempt(errors, parse_choice, values["status"], "status", DELIVERY_STATUSES)
    items: list[dict[str, Any]] = []
    next_cursor = None
    async with app_context(request).pool.acquire() as conn:
        event_types = await delivery_event_types(conn, viewer.merchant_id)
        if not errors:
            try:
                items, next_cursor = await events_service.list_deliveries(
                    conn,
                    merchant_id=viewer.merchant_id,
                    status=status,
                    event_type=values["event_type"].strip() or None,
                    event_id=None,
                    cursor=values["cursor"] or None,
                    limit=50,
                )
            except InvalidParameters:
                errors["cursor"] = ["This page link is not valid; start again from the first page."]
    return render(
        request,
        "webhooks.html",
        400 if errors else 200,
        title="Webhook deliveries",
        section="webhooks",
        items=items,
        next_cursor=next_cursor,
        values=values,
        filters=_filters(values),
        errors=errors,
        statuses=DELIVERY_STATUSES,
        event_types=event_types,
    )


@router.get("/webhooks/{delivery_id}", response_class=HTMLResponse)
async def webhook_detail(request: Request, delivery_id: str) -> Response:
    """One delivery with every attempt, its payload, and a replay button."""
    viewer = await resolve_viewer(request)
    async with app_context(request).pool.acquire() as conn:
        try:
            delivery = await events_service.get_delivery(
                conn, _object_id(delivery_id, "webhook delivery"), viewer.merchant_id
            )
        except ProblemError as exc:
            raise not_found("webhook delivery") from exc
    try:
        payload = json.dumps(json.loads(delivery["payload"]), indent=2)
    except ValueError:
        payload = delivery["payload"]
    return render(
        request,
        "webhook.html",
        title=f"Webhook delivery {delivery['id']}",
        section="webhooks",
        delivery=delivery,
        payload=payload,
    )


@router.post("/webhooks/{delivery_id}/replay")
async def webhook_replay(request: Request, delivery_id: str) -> Response:
    """Send the delivery's event (same event_id) again to the current URI."""
    viewer = await resolve_viewer(request)
    await check_csrf(request, viewer)
    context = app_context(request)
    delivery_uuid = _object_id(delivery_id, "webhook delivery")
    async with context.pool.acquire() as conn, conn.transaction():
        try:
            replayed = await events_service.replay_delivery(
                conn, delivery_uuid, context.clock.now(), viewer.merchant_id
            )
        except ProblemError as exc:
            raise not_found("webhook delivery") from exc
    if replayed["status"] == "skipped":
        message = (
            f"Not sent: no webhook URI is configured for {replayed['event_type']} events. "
            "Set one under Settings, then replay again."
        )
        kind = "warning"
    else:
        message = f"Replay queued: event {replayed['event_id']} is being sent to {replayed['uri']}."
        kind = "success"
    return await redirect_with_flash(
        request, viewer, viewer.url(f"/console/webhooks/{delivery_uuid}"), message, kind
    )


# --- settings ----------------------------------------------------------------------------------


async def _settings_page(
    request: Request,
    viewer: Viewer,
    status: int = 200,
    *,
    errors: Errors | None = None,
    values: dict[str, str] | None = None,
) -> Response:
    keys: list[dict[str, Any]] = []
    if viewer.merchant_id is not None:
        async with app_context(request).pool.acquire() as conn:
            keys = await list_signing_keys(conn, viewer.merchant_id)
    merchant = viewer.merchant or {}
    shown = {
        "payments_uri": merchant.get("payments_webhook_uri") or "",
        "payouts_uri": merchant.get("payouts_webhook_uri") or "",
        "return_uris": "\n".join(merchant.get("return_uris") or []),
        "kid": "",
        "public_key_pem": "",
        **(values or {}),
    }
    return render(
        request,
        "settings.html",
        status,
        title="Settings",
        section="settings",
        keys=keys,
        values=shown,
        errors=errors or {},
        production=not app_context(request).settings.sandbox,
    )


def _require_merchant(viewer: Viewer) -> uuid.UUID:
    if viewer.merchant_id is None:
        raise PageError(400, "Choose a merchant first (the merchant menu at the top).")
    return viewer.merchant_id


@router.get("/settings", response_class=HTMLResponse)
async def settings_page(request: Request) -> Response:
    """Webhook URIs and request-signing keys."""
    viewer = await resolve_viewer(request)
    return await _settings_page(request, viewer)


@router.post("/settings/webhooks")
async def save_webhooks(request: Request) -> Response:
    """Set the payments and payouts webhook URIs (an empty field clears one)."""
    viewer = await resolve_viewer(request)
    form = await check_csrf(request, viewer)
    merchant_id = _require_merchant(viewer)
    context = app_context(request)
    production = not context.settings.sandbox
    values = {"payments_uri": text(form, "payments_uri"), "payouts_uri": text(form, "payouts_uri")}
    errors: Errors = {}
    payments = attempt(errors, check_webhook_uri, "payments_uri", values["payments_uri"])
    payouts = attempt(errors, check_webhook_uri, "payouts_uri", values["payouts_uri"])
    for field, uri in (("payments_uri", payments), ("payouts_uri", payouts)):
        problem = await webhook_destination_problem(uri, production) if uri else None
        if problem is not None:
            errors[field] = [problem]
    if errors:
        return await _settings_page(request, viewer, 400, errors=errors, values=values)
    async with context.pool.acquire() as conn:
        await merchants_service.set_webhooks(
            conn,
            merchant_id,
            payments,
            payouts,
            clear_payments=payments is None,
            clear_payouts=payouts is None,
        )
    return await redirect_with_flash(
        request, viewer, viewer.url("/console/settings"), "Webhook URIs saved."
    )


@router.post("/settings/return-uris")
async def save_return_uris(request: Request) -> Response:
    """Replace the merchant's allowed return URIs, one per line (operator only: in production
    mode they decide where the service's pages may send a payer)."""
    viewer = await resolve_viewer(request, operator_only=True)
    form = await check_csrf(request, viewer)
    merchant_id = _require_merchant(viewer)
    raw = text(form, "return_uris")
    lines = [line.strip() for line in raw.splitlines() if line.strip()]
    messages: list[str] = []
    uris: list[str] = []
    for number, line in enumerate(lines, start=1):
        try:
            uris.append(return_uris.check_allowed_uri(line))
        except ValueError as exc:
            messages.append(f"line {number} {exc}.")
    if len(lines) > return_uris.MAX_RETURN_URIS:
        messages.append(f"at most {return_uris.MAX_RETURN_URIS} URIs.")
    if messages:
        errors: Errors = {"return_uris": messages}
        return await _settings_page(
            request, viewer, 400, errors=errors, values={"return_uris": raw}
        )
    async with app_context(request).pool.acquire() as conn:
        stored = await return_uris.set_return_uris(conn, merchant_id, uris)
    count = len(stored)
    message = f"Allowed return URIs saved: {count} URI{'s' if count != 1 else ''}."
    return await redirect_with_flash(request, viewer, viewer.url("/console/settings"), message)


@router.post("/settings/signing-keys")
async def add_signing_key(request: Request) -> Response:
    """Register a P-521 public key (PEM pasted or uploaded) under a kid."""
    viewer = await resolve_viewer(request)
    form = await check_csrf(request, viewer)
    merchant_id = _require_merchant(viewer)
    context = app_context(request)
    values = {"kid": text(form, "kid"), "public_key_pem": text(form, "public_key_pem")}
    errors: Errors = {}
    try:
        uploaded = await upload_text(form, "public_key_file", MAX_PEM_LENGTH)
    except FieldError as error:
        errors[error.field] = [error.message]
        uploaded = None
    pem = uploaded if uploaded and uploaded.strip() else values["public_key_pem"]
    kid = attempt(
        errors, parse_text, values["kid"], "kid", required=False, max_length=MAX_KID_LENGTH
    )
    if not errors:
        if not pem.strip():
            errors["public_key_pem"] = ["Paste a public key in PEM format, or choose a file."]
        elif len(pem) > MAX_PEM_LENGTH:
            errors["public_key_pem"] = [f"must be at most {MAX_PEM_LENGTH} characters"]
    if errors:
        return await _settings_page(request, viewer, 400, errors=errors, values=values)
    try:
        async with context.pool.acquire() as conn:
            registered = await merchants_service.register_signing_key(
                conn, merchant_id, pem, kid, context.clock.now()
            )
    except InvalidParameters as exc:
        messages = [m for ms in (exc.errors or {}).values() for m in ms] or [exc.detail]
        errors = {"public_key_pem": [f"This is not a usable key: {'; '.join(messages)}"]}
        return await _settings_page(request, viewer, 400, errors=errors, values=values)
    except Conflict as exc:
        errors = {"kid": [f"{exc.detail} Choose another kid, or leave it empty."]}
        return await _settings_page(request, viewer, 409, errors=errors, values=values)
    return await redirect_with_flash(
        request, viewer, viewer.url("/console/settings"), f"Key registered with kid {registered}."
    )


router.include_router(operator_router)


@router.api_route("/{rest:path}", methods=["GET", "POST"], response_class=HTMLResponse)
async def unknown_page(request: Request, rest: str) -> Response:
    """Anything else under /console: the 404 page (or the overview for `/console/`)."""
    if rest == "":
        return RedirectResponse("/console", status_code=303)
    raise PageError(404, "There is no console page at this address.")
