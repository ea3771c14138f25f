"""The console's sign-in and sign-out pages (`/console/login`, `/console/logout`): merchant
client credentials or the operator token start a session; signing out revokes it everywhere."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from bankrail.pages.console.core import (
    ConsoleRoute,
    Errors,
    PageError,
    app_context,
    forbidden_form,
    read_form,
    render,
    safe_next,
    text,
)
from bankrail.pages.console.session import (
    clear_session_cookie,
    console_signer,
    is_revoked,
    new_session,
    revoke,
    set_flash,
    set_session_cookie,
)
from bankrail.security.tokens import hash_secret, secret_matches

router = APIRouter(route_class=ConsoleRoute)

LOGIN_FAILED = (
    "Sign-in failed: the client ID and secret do not match a client of any merchant. "
    "Check both values and try again: the operator gives each merchant its client "
    "(POST /admin/merchants/{id}/clients), and in the sandbox the demo merchant's are printed "
    "when ./dev serve starts and kept in .bankrail/demo-credentials.json."
)
OPERATOR_LOGIN_FAILED = (
    "Sign-in failed: this is not the operator token. It is the value of "
    "BANKRAIL_ADMIN_TOKEN, or the token written to <data-dir>/admin-token."
)


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
    clear_session_cookie(response, request)
    set_flash(response, request, signer, now, "success", "You are signed out.")
    return response
