"""The hosted payment page for mandates: where a merchant sends a payer to set up a mandate.

`GET /hpp/mandates?mandate_id=..&resource_token=..&return_uri=..` shows the merchant, the
mandate's limits and the banks that take it; choosing one starts the consent journey and
sends the payer to the (mock) bank's consent page, which brings them back to the merchant's
`return_uri` with `mandate_id` added. The page authenticates with the mandate's
`resource_token` only, and answers bad input as the payment page does (docs/hosted-payment-page.md).
The helpers that show a mandate are shared with the mock bank's consent page.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from bankrail.core.money import format_amount
from bankrail.core.powers import SandboxPowers
from bankrail.core.urls import with_query
from bankrail.db.pool import Connection
from bankrail.http.context import AppContext
from bankrail.http.deps import Context
from bankrail.mandates import service as mandates
from bankrail.mandates.models import MandateStatus
from bankrail.mandates.schemas import PERIODS
from bankrail.pages._hosted import (
    PageError,
    allowed_return_uri,
    authenticate_bound,
    check_csrf,
    csrf_value,
    form_value,
    merchant_name,
    page_route,
    provider_view,
    redirect,
    render_page,
    require_providers,
)
from bankrail.rails.providers import Provider, find_provider, offered

router = APIRouter(include_in_schema=False)

PERIOD_LABELS = {
    "day": "Each day",
    "week": "Each week",
    "fortnight": "Each fortnight",
    "month": "Each month",
    "half_year": "Each half year",
    "year": "Each year",
}
ALIGNMENT_LABELS = {
    "consent": "from your consent",
    "calendar": "calendar",
}
TYPE_LABELS = {
    "commercial": "recurring payments to {merchant}",
    "sweeping": "moves of your money to your account with {merchant}",
}
CSRF_PURPOSE = b"hpp-mandate"


async def authenticate_mandate(
    conn: Connection, context: AppContext, raw_id: str | None, token: str | None, *, kind: str
) -> Any:
    """The mandate this mandate-bound token (the `resource_token`, or the bank's) grants
    access to: 401 page for a missing, forged, expired or foreign token, 404 page for an unknown
    mandate. The token is checked before the database is asked."""
    return await authenticate_bound(
        conn,
        context,
        raw_id,
        token,
        kind=kind,
        load=lambda c, mandate_id: mandates.get_mandate_row(c, mandate_id, None),
        noun="mandate",
        not_found=_not_found,
        unauthenticated=_unauthenticated,
    )


def _unauthenticated(reason: str) -> PageError:
    return PageError(
        401,
        "This link has expired or is not valid",
        "We could not confirm that this link belongs to this mandate, so nothing has been "
        "changed. Go back to the merchant and start again.",
        detail=reason,
    )


def _not_found() -> PageError:
    return PageError(
        404,
        "Mandate not found",
        "There is no mandate with this id. Go back to the merchant and start again.",
    )


def ensure_mandate_open(row: Any, back_uri: str | None = None) -> None:
    """409 page unless the payer may still give or refuse consent."""
    waiting = row["status"] in (MandateStatus.AUTHORIZATION_REQUIRED, MandateStatus.AUTHORIZING)
    if not waiting or row["bank_action"] is not None:
        raise PageError(
            409,
            "This mandate has already been decided",
            "There is nothing more to do here; nothing has been changed.",
            detail=f"Status: {row['status']}",
            back_uri=back_uri,
            back_label="Return to the merchant" if back_uri else None,
        )


def beneficiary_label(row: Any, merchant: str) -> str:
    """Who the payer's money goes to: the merchant, or the external account the mandate
    names (its holder, sort code and account number)."""
    external = row["beneficiary"]
    if external is None:
        return merchant
    identifier = external["account_identifier"]
    code = identifier["sort_code"]
    return (
        f"{external['account_holder_name']} (sort code {code[0:2]}-{code[2:4]}-{code[4:6]},"
        f" account {identifier['account_number']})"
    )


def mandate_view(row: Any, merchant: str) -> dict[str, Any]:
    """What the templates show of a mandate: who is paid, and within which limits."""
    constraints = row["constraints"]
    currency = row["currency"]
    limits = [
        {
            "period": PERIOD_LABELS[name],
            "amount": format_amount(limit["maximum_amount"], currency),
            "alignment": ALIGNMENT_LABELS[limit["period_alignment"]],
        }
        for name in PERIODS
        if (limit := constraints["periodic_limits"].get(name)) is not None
    ]
    return {
        "id": str(row["id"]),
        "merchant": merchant,
        "beneficiary": beneficiary_label(row, merchant),
        "purpose": TYPE_LABELS[row["type"]].format(merchant=merchant),
        "type": row["type"],
        "reference": row["reference"],
        "maximum_individual": format_amount(constraints["maximum_individual_amount"], currency),
        "limits": limits,
        "valid_from": constraints.get("valid_from"),
        "valid_to": constraints.get("valid_to"),
        "status": row["status"],
    }


def _banks(row: Any, powers: SandboxPowers) -> list[Provider]:
    if row["provider_id"]:
        chosen = find_provider(row["provider_id"])
        return [chosen] if chosen in offered(powers) else []
    return mandates.mandate_providers(row["type"], powers, row["provider_filter"])


@router.get("/hpp/mandates", response_class=HTMLResponse)
@page_route
async def hosted_mandate_page(request: Request, context: Context) -> Response:
    """The payer's first page for a mandate: who asks, the limits, and the banks."""
    params = request.query_params
    token = params.get("resource_token")
    async with context.pool.acquire() as conn:
        row = await authenticate_mandate(
            conn, context, params.get("mandate_id"), token, kind=mandates.RESOURCE_TOKEN_KIND
        )
        return_uri = await allowed_return_uri(conn, context, row, params.get("return_uri"))
        merchant = await merchant_name(conn, row["merchant_id"])
    assert token is not None
    back_uri = with_query(return_uri, mandate_id=str(row["id"]))
    ensure_mandate_open(row, back_uri)
    powers = context.settings.powers
    require_providers(powers, back_uri, merchant)
    return render_page(
        "hpp/mandate.html",
        mandate=mandate_view(row, merchant),
        providers=[provider_view(p) for p in _banks(row, powers)],
        resource_token=token,
        return_uri=return_uri,
        back_uri=back_uri,
        csrf=csrf_value(token, CSRF_PURPOSE),
    )


@router.post("/hpp/mandates/{mandate_id}/provider", response_class=HTMLResponse)
@page_route
async def choose_mandate_bank(mandate_id: str, request: Request, context: Context) -> Response:
    """The payer picked a bank: start the consent journey (and record the choice) in one
    transaction, then send the payer to the bank's consent page."""
    async with request.form() as form:
        token = form_value(form, "resource_token")
        return_uri = form_value(form, "return_uri")
        submitted_csrf = form_value(form, "csrf")
        provider_id = form_value(form, "provider_id")
    now = context.clock.now()
    async with context.pool.acquire() as conn:
        found = await authenticate_mandate(
            conn, context, mandate_id, token, kind=mandates.RESOURCE_TOKEN_KIND
        )
        assert token is not None
        check_csrf(token, submitted_csrf, CSRF_PURPOSE)
        return_uri = await allowed_return_uri(conn, context, found, return_uri)
        async with conn.transaction():
            row = await mandates.get_mandate_row(conn, found["id"], None, lock=True)
            ensure_mandate_open(row, with_query(return_uri, mandate_id=str(row["id"])))
            powers = context.settings.powers
            if provider_id not in {p.id for p in _banks(row, powers)}:
                raise PageError(
                    403,
                    "This bank cannot be chosen",
                    "The bank you chose is not offered for this mandate, so nothing has been "
                    "changed. Go back and choose one of the banks listed.",
                )
            if row["status"] == MandateStatus.AUTHORIZATION_REQUIRED:
                row = await mandates.start_authorization(
                    conn,
                    row,
                    return_uri=return_uri,
                    now=now,
                    allow_listed_only=False,
                    powers=powers,
                )
            if row["provider_id"] is None:
                assert provider_id is not None
                row = await mandates.select_provider(conn, row, provider_id, now, powers)
            answer = mandates.flow_answer(
                row, context.settings.public_url, context.tokens, now, powers
            )
    return redirect(str(answer["authorization_flow"]["actions"]["next"]["uri"]))


__all__ = ["authenticate_mandate", "ensure_mandate_open", "mandate_view", "router"]
