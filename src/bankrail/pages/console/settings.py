"""The console's settings page: the merchant's webhook URIs, allowed return URIs (operator
only), request-signing keys and API clients, and (sandbox mode) starting the merchant clean."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from bankrail.core.problems import Conflict, InvalidParameters
from bankrail.events.destinations import webhook_destination_problem
from bankrail.http.auth import require_payments_audience
from bankrail.merchants import return_uris
from bankrail.merchants import service as merchants_service
from bankrail.merchants.closing import reset_merchant as reset_merchant_data
from bankrail.pages.console.core import (
    ConsoleRoute,
    Errors,
    PageError,
    Redirect,
    Viewer,
    app_context,
    attempt,
    check_csrf,
    redirect_with_flash,
    render,
    resolve_viewer,
    text,
    upload_text,
)
from bankrail.pages.console.data import list_signing_keys
from bankrail.pages.console.forms import (
    MAX_KID_LENGTH,
    MAX_PEM_LENGTH,
    FieldError,
    check_webhook_uri,
    parse_text,
)

router = APIRouter(route_class=ConsoleRoute)


async def _settings_page(
    request: Request,
    viewer: Viewer,
    status: int = 200,
    *,
    errors: Errors | None = None,
    values: dict[str, str] | None = None,
) -> Response:
    keys: list[dict[str, Any]] = []
    clients: list[dict[str, Any]] = []
    if viewer.merchant_id is not None:
        async with app_context(request).pool.acquire() as conn:
            keys = await list_signing_keys(conn, viewer.merchant_id)
            clients = await merchants_service.list_clients(conn, viewer.merchant_id)
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
        clients=clients,
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
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    return await _settings_page(request, viewer)


@router.post("/settings/webhooks")
async def save_webhooks(request: Request) -> Response:
    """Set the payments and payouts webhook URIs (an empty field clears one)."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
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
    viewer = await resolve_viewer(request, needs=None, operator_only=True)
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
    viewer = await resolve_viewer(request, needs=require_payments_audience)
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


@router.post("/settings/signing-keys/revoke")
async def revoke_signing_key(request: Request) -> Response:
    """Revoke one of the merchant's signing keys (the admin API's revocation): signatures
    made with it stop verifying at once here and within a second on every host."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    form = await check_csrf(request, viewer)
    merchant_id = _require_merchant(viewer)
    kid = text(form, "kid")
    await app_context(request).revoke_credential(
        merchants_service.revoke_signing_key, merchant_id, kid
    )
    return await redirect_with_flash(
        request, viewer, viewer.url("/console/settings"), f"Key {kid} revoked."
    )


@router.post("/settings/clients/revoke")
async def revoke_client(request: Request) -> Response:
    """Revoke one of the merchant's API clients (the admin API's revocation): its secret,
    tokens and console sessions stop working at once here and within a second everywhere."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    form = await check_csrf(request, viewer)
    merchant_id = _require_merchant(viewer)
    client_id = text(form, "client_id")
    await app_context(request).revoke_credential(
        merchants_service.revoke_client, merchant_id, client_id
    )
    if viewer.session.client_id == client_id:
        raise Redirect("/console/login")
    return await redirect_with_flash(
        request, viewer, viewer.url("/console/settings"), f"Client {client_id} revoked."
    )


@router.post("/settings/reset")
async def reset_merchant(request: Request) -> Response:
    """Sandbox mode only: start the merchant clean (`POST /sandbox/merchants/{id}/reset`), once
    the confirmation box is ticked. Its payments, payouts, refunds, mandates, transactions and
    webhook deliveries go and its balances return to zero; accounts, clients and keys stay."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    form = await check_csrf(request, viewer)
    merchant_id = _require_merchant(viewer)
    context = app_context(request)
    if not context.settings.sandbox:
        raise PageError(409, "Starting a merchant clean is for sandbox mode only.")
    if text(form, "confirm") != "yes":
        errors: Errors = {"confirm": ["Tick the box to confirm that everything goes."]}
        return await _settings_page(request, viewer, 400, errors=errors)
    async with context.pool.acquire() as conn:
        removed = await reset_merchant_data(conn, merchant_id, context.clock.now())
    summary = ", ".join(f"{count} {kind}" for kind, count in removed.items())
    return await redirect_with_flash(
        request, viewer, viewer.url("/console/settings"), f"Started clean: removed {summary}."
    )
