"""The hosted payout page: where the payee of a verified payout chooses and proves the account
it pays (docs/sandbox.md, "The payout page").

`GET /hpp/payouts#payout_id=..&resource_token=..&return_uri=..` (the SDKs' link; the page moves
the fragment into the query) shows the amount, the merchant and the providers the payout's
`provider_selection` allows. Choosing one makes the payout `authorizing` and opens the
provider's page (`/hpp/payouts/{id}/bank`), where the mock provider shows the payee's accounts
(those the merchant's settled pay-ins came from, one new account in the payee's name and one
in another name) and lets the tester authorise with one of them or decline. The decision is
verified (`payouts.verification`) and the result page returns the payee to the merchant's
`return_uri` with `payout_id` added.

The pages authenticate with the payout's resource token only; errors are HTML pages with the
right status, as on the hosted payment page (`pages/_hosted.py`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from bankrail.core.money import format_amount
from bankrail.core.urls import with_query
from bankrail.db.pool import Connection
from bankrail.http.deps import Context
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
)
from bankrail.payouts import verified
from bankrail.payouts.verification import BEFORE_RAILS, VerifiedStage, selectable_providers
from bankrail.rails.lifecycle import InvalidTransition
from bankrail.rails.mock_bank import remitter_for
from bankrail.rails.pay_ins import KnownAccount, paying_accounts
from bankrail.rails.providers import Provider, verified_payout_providers

router = APIRouter(include_in_schema=False)

CSRF_PURPOSE = b"hpp-payouts"
# The mock provider's account in a name that is not the payee's (fails name verification).
OTHER_NAME = "Alex Other"
FAILURE_MESSAGES = {
    "authorization_failed": "You declined the payout at your bank.",
    "name_verification_failed": "The name on the account you chose is not the name the "
    "merchant has for you.",
    "transaction_verification_failed": "The account you chose does not show the earlier "
    "payment the merchant asked us to find.",
    "expired": "This payout was not claimed in time.",
    "insufficient_funds": "The merchant could not fund this payout.",
    "blocked": "This payout was stopped by screening.",
}


def _not_found() -> PageError:
    return PageError(404, "Payout not found", "There is no payout with this id.")


def _unauthenticated(reason: str) -> PageError:
    return PageError(
        401,
        "This link has expired or is not valid",
        "We could not confirm that this link belongs to this payout, so nothing has been "
        "changed. Go back to the merchant and ask for a new link.",
        detail=reason,
    )


async def _authenticate(
    conn: Connection, context: Context, raw_id: str | None, token: str | None
) -> Any:
    return await authenticate_bound(
        conn,
        context,
        raw_id,
        token,
        kind=verified.TOKEN_KIND,
        load=lambda c, payout_id: verified.payout_row(c, payout_id),
        noun="payout",
        not_found=_not_found,
        unauthenticated=_unauthenticated,
    )


def _view(row: Any, merchant: str) -> dict[str, str]:
    return {
        "id": str(row["id"]),
        "amount": format_amount(row["amount_in_minor"], row["currency"]),
        "merchant": merchant,
        "payee": row["beneficiary"]["user"]["name"],
        "status": row["stage"],
    }


def _providers(row: Any, context: Context) -> list[Provider]:
    return selectable_providers(
        row["beneficiary"]["provider_selection"],
        row["currency"],
        verified_payout_providers(context.settings.powers),
    )


def _pages_query(token: str, return_uri: str) -> str:
    return urlencode({"resource_token": token, "return_uri": return_uri})


def _require_stage(row: Any, stage: str, back_uri: str, merchant: str) -> None:
    if row["stage"] != stage:
        raise PageError(
            409,
            "This payout can no longer be changed here",
            "There is nothing more to do on this page; nothing has been changed.",
            detail=f"Status: {row['stage']}",
            back_uri=back_uri,
            back_label=f"Return to {merchant}",
        )


@router.get("/hpp/payouts", response_class=HTMLResponse)
@page_route
async def hosted_payout_page(request: Request, context: Context) -> Response:
    """The payee's first page: amount, merchant and the providers to choose from. Without a
    query it answers 200 with a script that reads the link's fragment."""
    params = request.query_params
    raw_id, token = params.get("payout_id"), params.get("resource_token")
    if not params:
        return render_page("hpp/payout_link.html")
    async with context.pool.acquire() as conn:
        row = await _authenticate(conn, context, raw_id, token)
        return_uri = await allowed_return_uri(conn, context, row, params.get("return_uri"))
        merchant = await merchant_name(conn, row["merchant_id"])
    assert token is not None
    back_uri = with_query(return_uri, payout_id=str(row["id"]))
    if row["stage"] not in BEFORE_RAILS:
        return _result(row, merchant, back_uri)
    providers = [provider_view(p) for p in _providers(row, context)]
    if not providers:
        raise PageError(
            409,
            "No bank is available",
            "This service cannot take you to a bank at the moment; nothing has been changed.",
            back_uri=back_uri,
            back_label=f"Return to {merchant}",
        )
    return render_page(
        "hpp/payout.html",
        payout=_view(row, merchant),
        providers=providers,
        resource_token=token,
        return_uri=return_uri,
        back_uri=back_uri,
        csrf=csrf_value(token, CSRF_PURPOSE),
    )


@router.post("/hpp/payouts/{payout_id}/provider", response_class=HTMLResponse)
@page_route
async def choose_payout_provider(payout_id: str, request: Request, context: Context) -> Response:
    """The payee chose a provider: the payout is `authorizing` there; on to its page."""
    async with request.form() as form:
        token = form_value(form, "resource_token")
        return_uri = form_value(form, "return_uri")
        submitted_csrf = form_value(form, "csrf")
        provider_id = form_value(form, "provider_id") or ""
    async with context.pool.acquire() as conn:
        found = await _authenticate(conn, context, payout_id, token)
        assert token is not None
        check_csrf(token, submitted_csrf, CSRF_PURPOSE)
        return_uri = await allowed_return_uri(conn, context, found, return_uri)
        if provider_id not in {p.id for p in _providers(found, context)}:
            raise PageError(403, "This bank cannot be chosen", "Nothing has been changed.")
        async with conn.transaction():
            row = await verified.payout_row(conn, found["id"], lock=True)
            try:
                await verified.start_authorizing(conn, row, provider_id)
            except InvalidTransition as exc:
                raise PageError(
                    409, "This payout can no longer be changed here", str(exc)
                ) from None
    query = _pages_query(token, return_uri)
    return redirect(f"{context.settings.public_url}/hpp/payouts/{payout_id}/bank?{query}")


async def _accounts(conn: Connection, row: Any) -> list[KnownAccount]:
    """The payee's accounts at the mock provider, each once: those the merchant's settled
    pay-ins came from, a new one in the payee's name, one in another name."""
    user = row["beneficiary"]["user"]
    found = await paying_accounts(conn, row["merchant_id"], user["id"], user["name"])
    for remitter in (
        remitter_for(f"verified:{user['id']}", row["currency"], user["name"]),
        remitter_for(f"verified-other:{user['id']}", row["currency"], OTHER_NAME),
    ):
        found.append(KnownAccount(remitter.account_holder_name, remitter.identifiers))
    unique: dict[str, KnownAccount] = {}
    for account in found:
        unique.setdefault(_account_key(account), account)
    return list(unique.values())


def _account_key(account: KnownAccount) -> str:
    ids = account.identifiers
    return ids.iban or f"{ids.sort_code}{ids.account_number}"


def _account_view(account: KnownAccount) -> dict[str, str]:
    ids = account.identifiers
    number = ids.account_number or ids.iban[-8:]
    return {
        "key": _account_key(account),
        "holder": account.account_holder_name,
        "label": f"Account ending {number[-4:]}",
        "identifier": ids.iban or f"{ids.sort_code} {ids.account_number}",
    }


@router.get("/hpp/payouts/{payout_id}/bank", response_class=HTMLResponse)
@page_route
async def payout_bank_page(payout_id: str, request: Request, context: Context) -> Response:
    """The mock provider's page: the payee picks the account to be paid and authorises, or
    declines."""
    params = request.query_params
    token = params.get("resource_token")
    async with context.pool.acquire() as conn:
        row = await _authenticate(conn, context, payout_id, token)
        return_uri = await allowed_return_uri(conn, context, row, params.get("return_uri"))
        merchant = await merchant_name(conn, row["merchant_id"])
        accounts = await _accounts(conn, row)
    assert token is not None
    back_uri = with_query(return_uri, payout_id=str(row["id"]))
    _require_stage(row, VerifiedStage.AUTHORIZING, back_uri, merchant)
    return render_page(
        "hpp/payout_bank.html",
        payout=_view(row, merchant),
        accounts=[_account_view(a) for a in accounts],
        resource_token=token,
        return_uri=return_uri,
        csrf=csrf_value(token, CSRF_PURPOSE),
    )


@router.post("/hpp/payouts/{payout_id}/bank", response_class=HTMLResponse)
@page_route
async def payout_bank_decision(payout_id: str, request: Request, context: Context) -> Response:
    """The payee's decision at the mock provider: authorise with an account, or decline."""
    async with request.form() as form:
        token = form_value(form, "resource_token")
        return_uri = form_value(form, "return_uri")
        submitted_csrf = form_value(form, "csrf")
        action = form_value(form, "action")
        key = form_value(form, "account")
    if action not in ("authorise", "decline"):
        raise PageError(400, "Choose authorise or decline", "Nothing has been changed.")
    async with context.pool.acquire() as conn:
        found = await _authenticate(conn, context, payout_id, token)
        assert token is not None
        check_csrf(token, submitted_csrf, CSRF_PURPOSE)
        return_uri = await allowed_return_uri(conn, context, found, return_uri)
        accounts = {_account_key(a): a for a in await _accounts(conn, found)}
        account = accounts.get(key or "")
        if account is None and action == "authorise":
            raise PageError(400, "Choose an account", "Choose the account to be paid.")
        async with conn.transaction():
            row = await verified.payout_row(conn, found["id"], lock=True)
            back_uri = with_query(return_uri, payout_id=payout_id)
            _require_stage(row, VerifiedStage.AUTHORIZING, back_uri, "the merchant")
            await verified.decide(
                conn,
                row,
                account=account if action == "authorise" else None,
                now=context.clock.now(),
            )
    query = _pages_query(token, return_uri)
    return redirect(f"{context.settings.public_url}/hpp/payouts/{payout_id}/result?{query}")


def _result(row: Any, merchant: str, back_uri: str) -> HTMLResponse:
    failed = row["stage"] == "failed"
    reason = row["failure_reason"] or ""
    return render_page(
        "hpp/payout_result.html",
        payout=_view(row, merchant),
        failed=failed,
        failure_reason=reason,
        failure_message=FAILURE_MESSAGES.get(reason, "The payout could not be completed."),
        back_uri=back_uri,
    )


@router.get("/hpp/payouts/{payout_id}/result", response_class=HTMLResponse)
@page_route
async def payout_result(payout_id: str, request: Request, context: Context) -> Response:
    """Where the payee lands after the provider: the outcome, and the way back to the
    merchant with `payout_id` added."""
    params = request.query_params
    async with context.pool.acquire() as conn:
        row = await _authenticate(conn, context, payout_id, params.get("resource_token"))
        return_uri = await allowed_return_uri(conn, context, row, params.get("return_uri"))
        merchant = await merchant_name(conn, row["merchant_id"])
    return _result(row, merchant, with_query(return_uri, payout_id=str(row["id"])))


__all__ = ["router"]
