"""The hosted payment page (HPP): where a merchant sends a payer to authorise a payment.

`GET /hpp/payments?payment_id=..&resource_token=..&return_uri=..` shows the amount, the
merchant and the banks the payment offers; choosing one starts the authorisation and sends the
payer to the (mock) bank, which brings them back to `GET /hpp/payments/{id}/result`; that page
waits for the outcome and then returns the payer to the merchant's `return_uri` with
`payment_id` added.

The pages authenticate with the payment's resource token only (never merchant credentials).
Bad input never changes state and answers an HTML page with the right status (401 bad token,
403 tampered form, 404 unknown payment, 409 finished payment, 400 bad `return_uri`); problem+json
is for the JSON APIs only. In production mode the `return_uri` must be one that the merchant's
allowed return URIs cover (`bankrail.merchants.return_uris`); otherwise the page is a 400 that
links nowhere, so the service's pages never send a payer to a site the operator did not allow.
The helpers that check and render all this are shared with the hosted mandate page and the
mock bank pages (`pages/_hosted.py`).
"""

from __future__ import annotations

import uuid
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from bankrail.core.urls import with_query
from bankrail.http.deps import Context
from bankrail.pages._hosted import (
    FAILURE_MESSAGES,
    PageError,
    allowed_return_uri,
    authenticate,
    check_csrf,
    csrf_value,
    ensure_open,
    finished_error,
    form_value,
    merchant_name,
    page_route,
    payment_view,
    provider_view,
    providers_for,
    redirect,
    render_page,
    require_providers,
)
from bankrail.payments import service
from bankrail.payments.flow_routes import FlowStep
from bankrail.payments.models import PaymentStatus
from bankrail.rails.mock_bank import login_uri

router = APIRouter(include_in_schema=False)

MAX_QUERY = 100
COMPLETED = frozenset(
    {PaymentStatus.AUTHORIZED.value, PaymentStatus.EXECUTED.value, PaymentStatus.SETTLED.value}
)
SUCCEEDED = frozenset({PaymentStatus.EXECUTED.value, PaymentStatus.SETTLED.value})


def _incomplete_link() -> PageError:
    return PageError(
        400,
        "This payment link is incomplete",
        "The link must carry payment_id, resource_token and return_uri. Please go back to the "
        "merchant and start the payment again.",
    )


# --- the hosted payment page -----------------------------------------------------------------


def _hpp_csrf(token: str) -> str:
    return csrf_value(token, b"hpp")


def result_uri(public_url: str, payment_id: uuid.UUID, token: str, return_uri: str) -> str:
    """The result page the bank sends the payer back to, carrying the merchant's return_uri."""
    query = urlencode({"resource_token": token, "return_uri": return_uri})
    return f"{public_url}/hpp/payments/{payment_id}/result?{query}"


@router.get("/hpp/payments", response_class=HTMLResponse)
@page_route
async def hosted_payment_page(request: Request, context: Context) -> Response:
    """The payer's first page: amount, merchant, and the banks to choose from."""
    params = request.query_params
    raw_id = params.get("payment_id")
    token = params.get("resource_token")
    return_uri = params.get("return_uri")
    if not raw_id and not token and not return_uri:
        # The link carries them in the fragment (the SDKs' links do), which only the browser
        # sees: a page whose script reads them (or says the link is incomplete).
        return render_page("hpp/link.html")
    if not raw_id or not token or return_uri is None:
        raise _incomplete_link()
    query = (params.get("q") or "").strip()[:MAX_QUERY]
    async with context.pool.acquire() as conn:
        row = await authenticate(conn, context, raw_id, token, kind="resource")
        return_uri = await allowed_return_uri(conn, context, row, return_uri)
        merchant = await merchant_name(conn, row["merchant_id"])
    back_uri = with_query(return_uri, payment_id=str(row["id"]))
    ensure_open(row, back_uri, merchant)
    powers = context.settings.powers
    require_providers(powers, back_uri, merchant)
    needle = query.casefold()
    providers = [
        {**provider_view(p), "hidden": bool(needle) and needle not in p.display_name.casefold()}
        for p in providers_for(row, powers)
    ]
    return render_page(
        "hpp/payment.html",
        payment=payment_view(row, merchant),
        providers=providers,
        shown=sum(1 for p in providers if not p["hidden"]),
        query=query,
        resource_token=token,
        return_uri=return_uri,
        back_uri=back_uri,
        csrf=_hpp_csrf(token),
    )


@router.post("/hpp/payments/{payment_id}/provider", response_class=HTMLResponse)
@page_route
async def choose_provider(payment_id: str, request: Request, context: Context) -> Response:
    """The payer picked a bank: start the authorisation (and record the choice) in one
    transaction, then send the payer to the bank."""
    async with request.form() as form:
        token = form_value(form, "resource_token")
        return_uri = form_value(form, "return_uri")
        submitted_csrf = form_value(form, "csrf")
        provider_id = form_value(form, "provider_id")
    public_url = context.settings.public_url
    async with context.pool.acquire() as conn:
        found = await authenticate(conn, context, payment_id, token, kind="resource")
        assert token is not None
        check_csrf(token, submitted_csrf, b"hpp")
        return_uri = await allowed_return_uri(conn, context, found, return_uri)
        async with conn.transaction():
            row = await service.lock_payment(conn, uuid.UUID(payment_id))
            ensure_open(row, with_query(return_uri, payment_id=str(row["id"])))
            chosen = row["provider_id"]
            authorizing = row["status"] == PaymentStatus.AUTHORIZING.value
            if authorizing and chosen is not None and chosen != provider_id:
                raise PageError(
                    409,
                    "A bank has already been chosen",
                    "This payment is already being authorised at another bank (perhaps in "
                    "another window). Nothing has been changed.",
                )
            powers = context.settings.powers
            if provider_id not in {p.id for p in providers_for(row, powers)}:
                raise PageError(
                    403,
                    "This bank cannot be chosen",
                    "The bank you chose is not offered for this payment, so nothing has been "
                    "changed. Go back and choose one of the banks listed.",
                )
            now = context.clock.now()
            if row["status"] == PaymentStatus.AUTHORIZATION_REQUIRED.value:
                # The bank returns the payer to this service's own result page, which
                # carries the merchant's return_uri, checked above.
                row = await service.start_authorization(
                    conn,
                    row,
                    return_uri=result_uri(public_url, row["id"], token, return_uri),
                    now=now,
                    allow_listed_only=False,
                    powers=powers,
                    journey=FlowStep(context),
                )
            if row["provider_id"] is None:
                # A step of the payer's journey as the API's: the payment shows its next action.
                row = await service.select_provider(
                    conn, row, provider_id, None, now, powers, journey=FlowStep(context)
                )
            bank_token = service.provider_token(context.tokens, row["id"], context.clock.now())
    # Whatever the provider asks (a redirect, forms, a consent the merchant declared), the
    # payer gives it at the mock bank, whose login page opens the right form.
    return redirect(login_uri(public_url, row["id"], bank_token))


@router.get("/hpp/payments/{payment_id}/result", response_class=HTMLResponse)
@page_route
async def payment_result(payment_id: str, request: Request, context: Context) -> Response:
    """Where the bank sends the payer back: waits for the outcome, then returns the payer to
    the merchant with `payment_id` added."""
    params = request.query_params
    token = params.get("resource_token")
    async with context.pool.acquire() as conn:
        row = await authenticate(conn, context, payment_id, token, kind="resource")
        return_uri = await allowed_return_uri(conn, context, row, params.get("return_uri"))
        merchant = await merchant_name(conn, row["merchant_id"])
    status = row["status"]
    outcome = (
        "succeeded"
        if status in SUCCEEDED
        else "failed"
        if status == PaymentStatus.FAILED.value
        else "pending"
    )
    reason = row["failure_reason"] or ""
    return render_page(
        "hpp/result.html",
        payment=payment_view(row, merchant),
        outcome=outcome,
        settled=status == PaymentStatus.SETTLED.value,
        failure_reason=reason,
        failure_message=FAILURE_MESSAGES.get(reason, "The payment could not be completed."),
        resource_token=token,
        back_uri=with_query(return_uri, payment_id=str(row["id"])),
    )


__all__ = [
    "COMPLETED",
    "PageError",
    "authenticate",
    "check_csrf",
    "csrf_value",
    "ensure_open",
    "finished_error",
    "merchant_name",
    "page_route",
    "redirect",
    "render_page",
    "router",
]
