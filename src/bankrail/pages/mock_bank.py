"""The mock bank's pages (sandbox mode only): where the payer consents at a mock provider.

`GET /mock-bank/login/{id}` is the page the redirect action's uri opens
(`{public_url}/mock-bank/login/{id}#token={token}`, the real sandbox's shape): it answers
HTML at once, and its script posts the token of the fragment to `POST /mock-bank/login/{id}`,
which opens, by the token's kind and the provider, the payment's consent page (redirect
providers), the embedded provider's two-step form, or the mandate's consent page. Without a
token in the fragment the page says there is nothing left to do (the mock bank's own return
page when a resource has no `return_uri`).

On a payment the username picks the outcome as in the headless API (`test_executed`,
`test_authorisation_failed`, `test_execution_rejected`; any other name succeeds); Cancel
fails the payment with `not_authorized`. The decision (`POST /mock-bank/authorize`,
`POST /mock-bank/embedded`) is applied to the locked payment in one transaction and the payer
is sent (303) to the payment's `return_uri` with `payment_id` added. On a mandate the payer
sees the beneficiary, the limits and their periods, and authorises or rejects
(`POST /mock-bank/vrp-consent`), as the headless `Authorise` and `RejectAuthorisation`
actions do; then goes (303) to the mandate's `return_uri` with `mandate_id` added.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from starlette.datastructures import FormData

from bankrail.http.context import AppContext
from bankrail.http.deps import Context
from bankrail.mandates import service as mandates
from bankrail.pages._hosted import (
    PageError,
    authenticate,
    check_csrf,
    csrf_value,
    ensure_open,
    form_value,
    merchant_name,
    page_route,
    payment_view,
    redirect,
    render_page,
)
from bankrail.pages.hpp_mandates import authenticate_mandate, ensure_mandate_open, mandate_view
from bankrail.payments import service
from bankrail.rails.mock_bank import action_for_username
from bankrail.rails.providers import find_provider
from bankrail.security.tokens import TokenError, TokenExpired

router = APIRouter(include_in_schema=False)

CSRF_PURPOSE = b"mock-bank"
MAX_DELAY_SECONDS = 30 * 86400
MAX_USERNAME = 200
OUTCOMES = (
    ("test_executed", "the payment is executed, then settled"),
    ("test_authorisation_failed", "the bank refuses to authorise it"),
    ("test_execution_rejected", "the bank authorises it, then rejects it"),
)


def _tampered() -> PageError:
    return PageError(
        403,
        "This form could not be accepted",
        "The form was changed or did not come from this page. Nothing has been changed.",
    )


async def _bank_page_context(conn: Any, row: Any, token: str) -> dict[str, Any]:
    provider = find_provider(row["provider_id"] or "")
    merchant = await merchant_name(conn, row["merchant_id"])
    return {
        "payment": payment_view(row, merchant),
        "bank": provider.display_name if provider else "Mock Bank",
        "bank_icon": f"/static/providers/{provider.id}-icon.svg" if provider else None,
        "token": token,
        "csrf": csrf_value(token, CSRF_PURPOSE),
        "outcomes": OUTCOMES,
    }


def _ensure_bank_can_act(row: Any) -> None:
    """409 page unless the payment waits for the payer at the bank."""
    ensure_open(row, None)
    if row["provider_id"] is None:
        raise PageError(
            409,
            "No bank has been chosen yet",
            "Choose a bank on the payment page first; nothing has been changed.",
        )


async def _apply(
    context: AppContext,
    payment_id: uuid.UUID,
    action: str,
    *,
    execution_delay: int = 0,
    settlement_delay: int = 0,
) -> Response:
    """The payer's decision on the locked payment, then back to the payment's return_uri."""
    async with context.pool.acquire() as conn, conn.transaction():
        row = await service.lock_payment(conn, payment_id)
        if row["bank_action"] != action:  # repeating the same decision answers the same
            _ensure_bank_can_act(row)
        target = await service.bank_action(
            conn,
            row,
            action,
            context.clock.now(),
            powers=context.settings.powers,
            execution_delay=execution_delay,
            settlement_delay=settlement_delay,
        )
        if not target:
            updated = await service.get_payment_row(conn, payment_id, None)
            merchant = await merchant_name(conn, row["merchant_id"])
    if target:
        return redirect(target)
    return render_page(
        "mock_bank/done.html",
        payment=payment_view(updated, merchant),
        cancelled=action == "Cancel",
    )


async def _authenticate_form(conn: Any, context: AppContext, form: FormData) -> tuple[Any, str]:
    token = form_value(form, "token")
    row = await authenticate(conn, context, form_value(form, "payment_id"), token, kind="provider")
    assert token is not None
    check_csrf(token, form_value(form, "csrf"), CSRF_PURPOSE)
    return row, token


def _delay(form: FormData, name: str, label: str, errors: list[dict[str, str]]) -> int:
    raw = (form_value(form, name) or "").strip()
    if not raw:
        return 0
    if raw.isascii() and raw.isdigit() and int(raw) <= MAX_DELAY_SECONDS:
        return int(raw)
    errors.append(
        {"field": name, "message": f"{label} must be a whole number of seconds, 0 to 2592000."}
    )
    return 0


# --- redirect providers: the consent page ------------------------------------------------------


@router.post("/mock-bank/authorize", response_class=HTMLResponse)
@page_route
async def consent_decision(request: Request, context: Context) -> Response:
    """The payer's decision on the consent page."""
    async with request.form() as form:
        decision = form_value(form, "decision")
        async with context.pool.acquire() as conn:
            row, token = await _authenticate_form(conn, context, form)
            if decision not in ("authorise", "cancel"):
                raise _tampered()
            errors: list[dict[str, str]] = []
            username = (form_value(form, "username") or "").strip()
            if decision == "cancel":
                username = ""
            elif not username or len(username) > MAX_USERNAME:
                errors.append({"field": "username", "message": "Enter a username (see the list)."})
            execution = _delay(form, "execution_delay", "The execution delay", errors)
            settlement = _delay(form, "settlement_delay", "The settlement delay", errors)
            if errors and decision == "authorise":
                _ensure_bank_can_act(row)
                page = await _bank_page_context(conn, row, token)
                values = {
                    name: form_value(form, name) or ""
                    for name in ("username", "execution_delay", "settlement_delay")
                }
                return render_page(
                    "mock_bank/authorize.html", 400, **page, errors=errors, values=values
                )
    if decision == "cancel":
        return await _apply(context, row["id"], "Cancel")
    return await _apply(
        context,
        row["id"],
        action_for_username(username),
        execution_delay=execution,
        settlement_delay=settlement,
    )


# --- the embedded provider: username, then password --------------------------------------------


@router.post("/mock-bank/embedded", response_class=HTMLResponse)
@page_route
async def embedded_step(request: Request, context: Context) -> Response:
    """Step 1 leads to step 2 (the password); step 2 or Cancel applies the outcome."""
    async with request.form() as form:
        step = form_value(form, "step")
        decision = form_value(form, "decision") or "continue"
        username = (form_value(form, "username") or "").strip()
        password = form_value(form, "password") or ""
        async with context.pool.acquire() as conn:
            row, token = await _authenticate_form(conn, context, form)
            if step not in ("username", "password") or decision not in ("continue", "cancel"):
                raise _tampered()
            if decision == "continue":
                errors: list[dict[str, str]] = []
                if not username or len(username) > MAX_USERNAME:
                    errors.append({"field": "username", "message": "Enter your username."})
                    step = "username"
                elif step == "password" and not password:
                    errors.append({"field": "password", "message": "Enter your password."})
                if errors or step == "username":
                    _ensure_bank_can_act(row)
                    page = await _bank_page_context(conn, row, token)
                    return render_page(
                        "mock_bank/embedded.html",
                        400 if errors else 200,
                        **page,
                        step=step if errors else "password",
                        errors=errors,
                        username=username,
                    )
    if decision == "cancel":
        return await _apply(context, row["id"], "Cancel")
    return await _apply(context, row["id"], action_for_username(username))


# --- mandates: the consent page -----------------------------------------------------------------

VRP_CSRF_PURPOSE = b"mock-bank-vrp"


async def _consent_context(conn: Any, row: Any, token: str) -> dict[str, Any]:
    provider = find_provider(row["provider_id"] or "")
    merchant = await merchant_name(conn, row["merchant_id"])
    return {
        "mandate": mandate_view(row, merchant),
        "bank": provider.display_name if provider else "Mock Bank",
        "bank_icon": f"/static/providers/{provider.id}-icon.svg" if provider else None,
        "token": token,
        "csrf": csrf_value(token, VRP_CSRF_PURPOSE),
    }


def _ensure_at_bank(row: Any) -> None:
    ensure_mandate_open(row)
    if row["provider_id"] is None:
        raise PageError(
            409,
            "No bank has been chosen yet",
            "Choose a bank first; nothing has been changed.",
        )


@router.post("/mock-bank/vrp-consent", response_class=HTMLResponse)
@page_route
async def vrp_consent_decision(request: Request, context: Context) -> Response:
    """The payer's decision on the consent page, applied to the locked mandate."""
    async with request.form() as form:
        token = form_value(form, "token")
        decision = form_value(form, "decision")
        raw_id = form_value(form, "mandate_id")
        submitted_csrf = form_value(form, "csrf")
    actions = {"authorise": "Authorise", "reject": "Reject"}
    async with context.pool.acquire() as conn:
        found = await authenticate_mandate(
            conn, context, raw_id, token, kind=mandates.PROVIDER_TOKEN_KIND
        )
        assert token is not None
        check_csrf(token, submitted_csrf, VRP_CSRF_PURPOSE)
        if decision not in actions:
            raise _tampered()
        async with conn.transaction():
            row = await mandates.get_mandate_row(conn, found["id"], None, lock=True)
            if row["bank_action"] != actions[decision]:  # the same decision answers the same
                _ensure_at_bank(row)
            target = await mandates.bank_action(
                conn, row, actions[decision], context.clock.now(), powers=context.settings.powers
            )
            updated = await mandates.get_mandate_row(conn, row["id"], None)
            merchant = await merchant_name(conn, row["merchant_id"])
    if target:
        return redirect(target)
    return render_page("mock_bank/vrp_done.html", mandate=mandate_view(updated, merchant))


# --- the login page: the redirect uri's target ---------------------------------------------------


@router.get("/mock-bank/login/{resource_id}", response_class=HTMLResponse)
@page_route
async def login_page(resource_id: str) -> Response:
    """The page the redirect uri opens: its script sends the fragment's token to the bank."""
    return render_page("mock_bank/login.html", resource_id=resource_id)


@router.post("/mock-bank/login/{resource_id}", response_class=HTMLResponse)
@page_route
async def login(resource_id: str, request: Request, context: Context) -> Response:
    """The bank's page for the payment or mandate the token grants: the consent page, the
    embedded provider's first step, or the mandate's consent page."""
    async with request.form() as form:
        token = form_value(form, "token")
    async with context.pool.acquire() as conn:
        if _is_mandate_token(context, token):
            return await _mandate_login(conn, context, resource_id, token)
        row = await authenticate(conn, context, resource_id, token, kind="provider")
        assert token is not None
        _ensure_bank_can_act(row)
        page = await _bank_page_context(conn, row, token)
    provider = find_provider(row["provider_id"])
    if provider is not None and provider.flow == "embedded":
        return render_page(
            "mock_bank/embedded.html", **page, step="username", errors=[], username=""
        )
    return render_page("mock_bank/authorize.html", **page, errors=[], values={})


def _is_mandate_token(context: AppContext, token: str | None) -> bool:
    """True if `token` is the bank's token of a mandate (valid or expired), not a payment's."""
    try:
        context.tokens.read_resource_token(
            token or "", context.clock.now(), kind=mandates.PROVIDER_TOKEN_KIND
        )
    except TokenExpired:
        return True
    except TokenError:
        return False
    return True


async def _mandate_login(
    conn: Any, context: AppContext, resource_id: str, token: str | None
) -> Response:
    row = await authenticate_mandate(
        conn, context, resource_id, token, kind=mandates.PROVIDER_TOKEN_KIND
    )
    assert token is not None
    _ensure_at_bank(row)
    page = await _consent_context(conn, row, token)
    return render_page("mock_bank/vrp_consent.html", **page)


__all__ = ["router"]
