"""The console's sign-in and sign-out pages (`/console/login`, `/console/logout`): a console
user's email and password, the operator token, or (sandbox mode only) an API client's
credentials start a session; signing out revokes it everywhere. Each credential is checked by
its one function in security.credentials."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import FormData

from bankrail.http.auth import (
    client_identity,
    console_user_identity,
    record_wrong_credential,
    refuse_if_blocked,
)
from bankrail.merchants.console_users import MAX_PASSWORD_LENGTH
from bankrail.pages.console.core import (
    ConsoleRoute,
    Errors,
    PageError,
    Redirect,
    app_context,
    check_visitor_csrf,
    forbidden_form,
    read_form,
    render_visitor_form,
    resolve_viewer,
    safe_next,
    text,
)
from bankrail.pages.console.session import (
    Session,
    clear_session_cookie,
    console_signer,
    new_session,
    revoke,
    set_flash,
    set_session_cookie,
)
from bankrail.security.credentials import (
    check_client_secret,
    check_console_password,
    check_operator_token,
)

router = APIRouter(route_class=ConsoleRoute)

LOGIN_FAILED = (
    "Sign-in failed: the client ID and secret do not match a client of any merchant. "
    "Check both values and try again: the operator gives each merchant its client "
    "(POST /admin/merchants/{id}/clients), and in the sandbox the demo merchant's are printed "
    "when ./dev serve starts and kept in .bankrail/demo-credentials.json."
)
USER_LOGIN_FAILED = (
    "Sign-in failed: the email and password do not match a console user. Check both; a new "
    "console user first sets a password with the link the operator gave them."
)
CLIENT_LOGIN_OFF = (
    "In production mode the console does not accept API client credentials: sign in as a "
    "console user (the operator creates one for you)."
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
    return await render_visitor_form(
        request,
        "login.html",
        status,
        new_if_signed_in=True,
        show_flash=True,
        title="Sign in",
        section="login",
        next=safe_next(request.query_params.get("next") or (values or {}).get("next")),
        errors=errors or {},
        values=values or {},
        kind=kind,
    )


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request) -> Response:
    """The sign-in page (a visitor whose session is still good goes straight on)."""
    try:
        await resolve_viewer(request, needs=None)
    except Redirect:
        return await _login_page(request)
    return RedirectResponse(safe_next(request.query_params.get("next")), 303)


SignIn = tuple[Session, str] | Response
"""A started session and its greeting, or the sign-in page again with the errors."""


async def _operator_sign_in(request: Request, form: FormData, values: dict[str, str]) -> SignIn:
    context = app_context(request)
    signer = await console_signer(request)
    token = text(form, "admin_token").strip()
    if not token:
        errors = {"admin_token": ["Enter the operator token."]}
        return await _login_page(request, 400, errors=errors, values=values, kind="operator")
    refuse_if_blocked(request)
    if not check_operator_token(token, context.admin_token_hash):
        record_wrong_credential(request)
        errors = {"admin_token": [OPERATOR_LOGIN_FAILED]}
        return await _login_page(request, 401, errors=errors, values=values, kind="operator")
    key = signer.operator_key(context.admin_token_hash)
    return new_session("operator", context.clock.now(), operator_key=key), (
        "Signed in as the operator."
    )


async def _client_sign_in(request: Request, form: FormData, values: dict[str, str]) -> SignIn:
    context = app_context(request)
    if not context.settings.sandbox:
        errors = {"client_id": [CLIENT_LOGIN_OFF]}
        return await _login_page(request, 403, errors=errors, values=values, kind="merchant")
    client_id = text(form, "client_id").strip()
    secret = text(form, "client_secret").strip()
    values["client_id"] = client_id
    missing: Errors = {}
    if not client_id:
        missing["client_id"] = ["Enter the client ID."]
    if not secret:
        missing["client_secret"] = ["Enter the client secret."]
    if missing:
        return await _login_page(request, 400, errors=missing, values=values, kind="merchant")
    refuse_if_blocked(request, client_identity(client_id))
    async with context.pool.acquire() as conn:
        client = await check_client_secret(conn, client_id, secret)
    if client is None:
        record_wrong_credential(request, client_identity(client_id))
        errors = {"client_secret": [LOGIN_FAILED]}
        return await _login_page(request, 401, errors=errors, values=values, kind="merchant")
    started = new_session(
        "merchant", context.clock.now(), merchant_id=client.merchant_id, client_id=client_id
    )
    return started, f"Signed in to {client.merchant_name}."


async def _user_sign_in(request: Request, form: FormData, values: dict[str, str]) -> SignIn:
    context = app_context(request)
    email = text(form, "email").strip()
    password = text(form, "password")
    values["email"] = email
    missing: Errors = {}
    if not email:
        missing["email"] = ["Enter your email address."]
    if not password:
        missing["password"] = ["Enter your password."]
    if missing:
        return await _login_page(request, 400, errors=missing, values=values, kind="user")
    identity = console_user_identity(email)
    refuse_if_blocked(request, identity)
    async with context.pool.acquire() as conn:
        user = await check_console_password(conn, email, password[:MAX_PASSWORD_LENGTH])
    if user is None:
        record_wrong_credential(request, identity)
        errors = {"password": [USER_LOGIN_FAILED]}
        return await _login_page(request, 401, errors=errors, values=values, kind="user")
    started = new_session(
        "merchant", context.clock.now(), merchant_id=user.merchant_id, user_id=user.id
    )
    return started, f"Signed in to {user.merchant_name} as {user.email}."


SIGN_INS = {"operator": _operator_sign_in, "merchant": _client_sign_in, "user": _user_sign_in}


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    """Check a console user's email and password, the operator token, or (sandbox mode only)
    an API client's credentials, and start a session."""
    form, signer, now = await check_visitor_csrf(request)
    sign_in = SIGN_INS.get(text(form, "kind"))
    if sign_in is None:
        raise PageError(400, "Choose how to sign in: as a console user, a client or the operator.")
    target = safe_next(text(form, "next"))
    outcome = await sign_in(request, form, {"next": target})
    if isinstance(outcome, Response):
        return outcome
    started, greeting = outcome
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
