"""`/console/set-password`: where a new console user, following the one-time link the
operator's `POST /admin/merchants/{id}/console-users` answered, chooses a password. The link
works once and expires (merchants.console_users)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from bankrail.merchants.console_users import (
    MAX_PASSWORD_LENGTH,
    MIN_PASSWORD_LENGTH,
    set_password,
    setup_token_is_valid,
)
from bankrail.pages.console.core import (
    ConsoleRoute,
    Errors,
    PageError,
    app_context,
    check_visitor_csrf,
    render_visitor_form,
    text,
)
from bankrail.pages.console.session import set_flash

router = APIRouter(route_class=ConsoleRoute)

LINK_SPENT = (
    "This set-password link has been used already or has expired. Ask the operator for a "
    "new console user link."
)


def _spent() -> PageError:
    return PageError(400, LINK_SPENT, "Link not valid")


async def _form_page(
    request: Request, token: str, status: int = 200, errors: Errors | None = None
) -> Response:
    return await render_visitor_form(
        request,
        "set_password.html",
        status,
        title="Set your password",
        section="login",
        token=token,
        errors=errors or {},
        min_length=MIN_PASSWORD_LENGTH,
    )


@router.get("/set-password", response_class=HTMLResponse)
async def set_password_form(request: Request) -> Response:
    """The form that sets a new console user's password (400 when the link is spent)."""
    context = app_context(request)
    token = request.query_params.get("token", "")
    async with context.pool.acquire() as conn:
        valid = bool(token) and await setup_token_is_valid(conn, token, context.clock.now())
    if not valid:
        raise _spent()
    return await _form_page(request, token)


def _password_errors(password: str, confirm: str) -> Errors:
    if len(password) < MIN_PASSWORD_LENGTH:
        return {"password": [f"must be at least {MIN_PASSWORD_LENGTH} characters"]}
    if len(password) > MAX_PASSWORD_LENGTH:
        return {"password": [f"must be at most {MAX_PASSWORD_LENGTH} characters"]}
    if password != confirm:
        return {"password_confirm": ["does not match the password"]}
    return {}


@router.post("/set-password")
async def set_password_submit(request: Request) -> Response:
    """Set the password and spend the link; then the user signs in with it."""
    context = app_context(request)
    form, signer, now = await check_visitor_csrf(request)
    token = text(form, "token")
    errors = _password_errors(text(form, "password"), text(form, "password_confirm"))
    if errors:
        return await _form_page(request, token, 400, errors)
    async with context.pool.acquire() as conn:
        email = await set_password(conn, token, text(form, "password"), now) if token else None
    if email is None:
        raise _spent()
    response = RedirectResponse("/console/login", status_code=303)
    set_flash(response, request, signer, now, "success", f"Password set for {email}. Sign in.")
    return response
