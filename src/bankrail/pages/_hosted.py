"""What the pages a payer sees share: the hosted payment page (`hpp`), the hosted mandate page
(`hpp_mandates`) and the mock bank's pages (`mock_bank`). Rendering with the page security
headers, error pages (`PageError`, `page_route`), anti-forgery fields, the return-URI checks,
authentication by a token bound to one payment or mandate, and what the templates show of a
payment and of a provider."""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec

from fastapi import Response
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.datastructures import FormData

from bankrail.core.money import format_amount
from bankrail.core.powers import NO_PROVIDER_AVAILABLE, SandboxPowers
from bankrail.core.problems import NotFound, ProblemError
from bankrail.core.urls import is_absolute_http_uri
from bankrail.db.pool import Connection
from bankrail.http.context import AppContext
from bankrail.merchants import return_uris
from bankrail.merchants import service as merchants_service
from bankrail.pages.errors import templates
from bankrail.payments import service
from bankrail.payments.models import PaymentStatus
from bankrail.rails.providers import Provider, find_provider, offered
from bankrail.security.tokens import TokenError

__all__ = [
    "FAILURE_MESSAGES",
    "PageError",
    "allowed_return_uri",
    "authenticate",
    "authenticate_bound",
    "check_csrf",
    "csrf_value",
    "ensure_open",
    "finished_error",
    "form_value",
    "merchant_name",
    "page_route",
    "payment_view",
    "provider_view",
    "providers_for",
    "redirect",
    "render_page",
    "require_providers",
    "require_return_uri",
]

P = ParamSpec("P")

MAX_RETURN_URI = 2000
COUNTRY_NAMES = {
    "GB": "United Kingdom",
    "DE": "Germany",
    "FR": "France",
    "NL": "Netherlands",
}
FAILURE_MESSAGES = {
    "not_authorized": "You cancelled the payment at your bank.",
    "user_canceled_at_provider": "You cancelled the payment at your bank.",
    "authorization_failed": "Your bank did not authorise the payment.",
    "provider_rejected": "Your bank rejected the payment after it was authorised.",
    "canceled": "The merchant cancelled the payment.",
    "expired": "The payment was not authorised in time.",
}


# --- rendering --------------------------------------------------------------------------------


def _security_headers(nonce: str | None = None) -> dict[str, str]:
    """Pages carry tokens in their URLs and forms: never cache them, never leak them in a
    Referer, never let another site frame them."""
    scripts = f"'nonce-{nonce}'" if nonce else "'none'"
    return {
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": (
            f"default-src 'none'; script-src {scripts}; style-src 'self'; img-src 'self';"
            " connect-src 'self'; base-uri 'none'; frame-ancestors 'none'"
        ),
    }


def render_page(template: str, status_code: int = 200, /, **context: Any) -> HTMLResponse:
    """Render one of the HPP or mock bank templates with the page security headers."""
    nonce = secrets.token_urlsafe(16)
    html = templates.get_template(template).render(nonce=nonce, **context)
    return HTMLResponse(html, status_code, headers=_security_headers(nonce))


def redirect(uri: str) -> RedirectResponse:
    """A 303 See Other (the answer to a form POST) that leaks nothing in the Referer."""
    return RedirectResponse(uri, 303, headers=_security_headers())


@dataclass
class PageError(Exception):
    """Bad input on a page: rendered as `hpp/error.html` with this status."""

    status: int
    title: str
    message: str
    detail: str | None = None
    back_uri: str | None = None
    back_label: str | None = None

    def render(self) -> HTMLResponse:
        """The error page."""
        return render_page(
            "hpp/error.html",
            self.status,
            status=self.status,
            title=self.title,
            message=self.message,
            detail=self.detail,
            back_uri=self.back_uri,
            back_label=self.back_label,
        )


def page_route(handler: Callable[P, Awaitable[Response]]) -> Callable[P, Awaitable[Response]]:
    """Render page errors, and the service's problem errors, as HTML error pages."""

    @functools.wraps(handler)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Response:
        try:
            return await handler(*args, **kwargs)
        except PageError as error:
            return error.render()
        except ProblemError as error:
            return PageError(error.problem.status, error.problem.title, error.detail).render()

    return wrapper


# --- shared checks ----------------------------------------------------------------------------


def form_value(form: FormData | Mapping[str, Any], name: str) -> str | None:
    """A text field of a submitted form (uploaded files do not count)."""
    value = form.get(name)
    return value if isinstance(value, str) else None


def csrf_value(token: str, purpose: bytes) -> str:
    """The anti-forgery field of a form: an HMAC of the page's token, keyed by the token."""
    return hmac.new(token.encode(), purpose, hashlib.sha256).hexdigest()


def check_csrf(token: str, submitted: str | None, purpose: bytes) -> None:
    """403 page unless the form's anti-forgery field belongs to the token it came with."""
    if not submitted or not hmac.compare_digest(submitted, csrf_value(token, purpose)):
        raise PageError(
            403,
            "This form could not be accepted",
            "The form was changed or did not come from this page. Nothing has been changed. "
            "Go back, reload the page and try again.",
        )


def require_return_uri(uri: str | None) -> str:
    """400 page unless `uri` is an absolute http(s) URI."""
    if (
        uri is None
        or not is_absolute_http_uri(uri)
        or len(uri) > MAX_RETURN_URI
        or any(ch.isspace() or ord(ch) < 32 for ch in uri)
    ):
        raise PageError(
            400,
            "This payment link is not valid",
            "The link's return address (return_uri) must be an absolute http or https URL. "
            "Nothing has been changed. Please contact the merchant.",
        )
    return uri


async def allowed_return_uri(
    conn: Connection, context: AppContext, row: Any, uri: str | None
) -> str:
    """`require_return_uri`, and in production mode a 400 page unless the merchant's allowed
    return URIs cover `uri`: the page then offers no link to it and sends the payer nowhere."""
    uri = require_return_uri(uri)
    if not context.settings.sandbox and not return_uris.is_allowed(
        uri, await return_uris.allowed_return_uris(conn, row["merchant_id"])
    ):
        raise PageError(
            400,
            "This payment link is not valid",
            "The link's return address (return_uri) is not one this merchant has registered, "
            "so you will not be sent there. Nothing has been changed. Please go back to the "
            "merchant's website and start the payment again.",
        )
    return uri


async def authenticate(
    conn: Connection,
    context: AppContext,
    raw_payment_id: str | None,
    token: str | None,
    *,
    kind: str,
) -> Any:
    """The payment that this payment-bound token (`resource` or `provider`) grants access to.

    401 page for a missing, forged, expired or foreign token (one issued for another payment);
    404 page for an unknown payment. The token is checked before the database is asked, so
    only the holder of a valid token learns whether another payment id exists.
    """
    return await authenticate_bound(
        conn,
        context,
        raw_payment_id,
        token,
        kind=kind,
        load=lambda c, payment_id: service.get_payment_row(c, payment_id, None),
        noun="payment",
        not_found=_not_found,
        unauthenticated=_unauthenticated,
    )


async def authenticate_bound(
    conn: Connection,
    context: AppContext,
    raw_id: str | None,
    token: str | None,
    *,
    kind: str,
    load: Callable[[Connection, uuid.UUID], Awaitable[Any]],
    noun: str,
    not_found: Callable[[], PageError],
    unauthenticated: Callable[[str], PageError],
) -> Any:
    """The row `load` finds for `raw_id`, when `token` is a valid token of `kind` bound to that
    id: `unauthenticated` page for a missing, forged, expired or foreign token, `not_found`
    page for an id that is malformed or names nothing (`load` raising NotFound). The token is
    checked before the database is asked."""
    try:
        object_id = uuid.UUID(raw_id or "")
    except ValueError:
        raise not_found() from None
    if not token:
        raise unauthenticated("No token came with the link.")
    try:
        claims = context.tokens.read_resource_token(token, context.clock.now(), kind=kind)
    except TokenError as exc:
        raise unauthenticated(f"{str(exc).capitalize()}.") from exc
    try:
        row = await load(conn, object_id)
    except NotFound:
        raise not_found() from None
    if claims.payment_id != object_id:
        raise unauthenticated(f"The token was issued for another {noun}.")
    return row


def _unauthenticated(reason: str) -> PageError:
    return PageError(
        401,
        "This link has expired or is not valid",
        "We could not confirm that this link belongs to this payment, so nothing has been "
        "changed. Go back to the merchant and start the payment again.",
        detail=reason,
    )


def _not_found() -> PageError:
    return PageError(
        404,
        "Payment not found",
        "There is no payment with this id. Go back to the merchant and start again.",
    )


def finished_error(row: Any, back_uri: str | None, merchant: str | None = None) -> PageError:
    """The 409 page for a payment that the payer can no longer act on."""
    failed = row["status"] == PaymentStatus.FAILED.value
    title = (
        "This payment has already failed" if failed else "This payment has already been completed"
    )
    reason = FAILURE_MESSAGES.get(row["failure_reason"] or "") if failed else None
    return PageError(
        409,
        title,
        reason or "There is nothing more to do here; nothing has been changed.",
        detail=f"Status: {row['status']}",
        back_uri=back_uri,
        back_label=f"Return to {merchant}" if merchant else None,
    )


def ensure_open(row: Any, back_uri: str | None, merchant: str | None = None) -> None:
    """409 page unless the payer may still choose a bank for this payment."""
    if row["status"] not in (
        PaymentStatus.AUTHORIZATION_REQUIRED.value,
        PaymentStatus.AUTHORIZING.value,
    ) or (row["bank_action"] is not None):
        raise finished_error(row, back_uri, merchant)


async def merchant_name(conn: Connection, merchant_id: uuid.UUID) -> str:
    """The display name of the merchant a payment pays."""
    return await merchants_service.merchant_name(conn, merchant_id) or "the merchant"


def require_providers(powers: SandboxPowers, back_uri: str, merchant: str) -> None:
    """409 page saying no bank is available, with the way back to the merchant, unless this
    deployment offers providers (the page's form of the flow's 409 problem)."""
    if not offered(powers):
        raise PageError(
            409,
            "No bank is available",
            "This service cannot take you to a bank at the moment, so nothing has been "
            "changed. Please go back to the merchant and choose another way to pay.",
            detail=NO_PROVIDER_AVAILABLE,
            back_uri=back_uri,
            back_label=f"Return to {merchant}",
        )


def providers_for(row: Any, powers: SandboxPowers) -> list[Provider]:
    """The banks the payer may pick: the preselected or chosen one, else those offered."""
    if row["provider_id"]:
        chosen = find_provider(row["provider_id"])
        return [chosen] if chosen in offered(powers) else []
    return service.offered_providers(row, powers)


def provider_view(provider: Provider) -> dict[str, str]:
    """What the templates show of a provider."""
    return {
        "id": provider.id,
        "display_name": provider.display_name,
        "country": COUNTRY_NAMES.get(provider.country_code, provider.country_code),
        "icon": f"/static/providers/{provider.id}-icon.svg",
    }


def payment_view(row: Any, merchant: str) -> dict[str, str]:
    """What the templates show of a payment."""
    return {
        "id": str(row["id"]),
        "amount": format_amount(row["amount_in_minor"], row["currency"]),
        "merchant": merchant,
        "status": row["status"],
    }
