"""Operator routes (docs/operations.md) for merchants, clients, keys, webhooks, accounts and
thresholds."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Response
from fastapi import Path as PathParam

from bankrail.core.problems import InvalidParameters, invalid_field
from bankrail.core.timefmt import iso_utc
from bankrail.core.urls import is_absolute_http_uri
from bankrail.events.destinations import webhook_destination_problem
from bankrail.http.auth import MANDATE_SCOPES, PAYMENTS_SCOPE, Admin
from bankrail.http.deps import Context
from bankrail.http.openapi import ERRORS_ADMIN
from bankrail.http.responses import json_response
from bankrail.merchants import console_users, return_uris, service, sweeping
from bankrail.merchants.balances import reevaluate_notifications
from bankrail.merchants.schemas import (
    BalanceThreshold,
    ClientCredentials,
    ConsoleUserOut,
    MerchantAccountOut,
    MerchantOut,
    NewClient,
    NewConsoleUser,
    NewMerchant,
    NewMerchantAccount,
    NewSigningKey,
    ReturnUris,
    ReturnUrisOut,
    SigningKeyOut,
    SweepingDestinationOut,
    SweepingDestinationRequest,
    WebhookSettings,
    WebhookSettingsOut,
)

router = APIRouter(prefix="/admin", tags=["operator"], responses=ERRORS_ADMIN)


@router.post("/merchants", status_code=201, response_model=MerchantOut)
async def create_merchant(body: NewMerchant, context: Context, _: Admin) -> Response:
    """Create a merchant (with no accounts)."""
    async with context.pool.acquire() as conn:
        merchant_id = await service.create_merchant(conn, body.name, context.clock.now())
    return json_response(201, {"id": str(merchant_id), "name": body.name})


@router.post("/merchants/{merchant_id}/clients", status_code=201, response_model=ClientCredentials)
async def create_client(
    merchant_id: uuid.UUID, body: NewClient, context: Context, _: Admin
) -> Response:
    """Issue client credentials (default scopes: `payments`)."""
    scopes = body.scopes if body.scopes is not None else ["payments"]
    async with context.pool.acquire() as conn:
        client_id, secret = await service.create_client(
            conn, merchant_id, scopes, context.clock.now()
        )
    return json_response(
        201, {"client_id": client_id, "client_secret": secret, "scopes": sorted(set(scopes))}
    )


@router.post("/merchants/{merchant_id}/signing-keys", status_code=201, response_model=SigningKeyOut)
async def register_signing_key(
    merchant_id: uuid.UUID, body: NewSigningKey, context: Context, _: Admin
) -> Response:
    """Register an ES512 (P-521) public key the merchant signs requests with."""
    async with context.pool.acquire() as conn:
        kid = await service.register_signing_key(
            conn, merchant_id, body.public_key_pem, body.kid, context.clock.now()
        )
    return json_response(201, {"kid": kid})


@router.delete("/merchants/{merchant_id}/signing-keys/{kid:path}", status_code=204)
async def revoke_signing_key(
    merchant_id: uuid.UUID,
    kid: Annotated[str, PathParam(min_length=1, max_length=200)],
    context: Context,
    _: Admin,
) -> Response:
    """Revoke a signing key: signatures made with it fail at once on this host and within a
    second on every other. 404 when the merchant has no such active key."""
    await context.revoke_credential(service.revoke_signing_key, merchant_id, kid)
    return Response(status_code=204)


@router.delete("/merchants/{merchant_id}/clients/{client_id}", status_code=204)
async def revoke_client(
    merchant_id: uuid.UUID,
    client_id: Annotated[str, PathParam(min_length=1, max_length=200)],
    context: Context,
    _: Admin,
) -> Response:
    """Revoke an API client: its secret, its access tokens and its console sessions stop
    working at once on this host and within a second on every other. 404 when the merchant
    has no such active client."""
    await context.revoke_credential(service.revoke_client, merchant_id, client_id)
    return Response(status_code=204)


ALL_SCOPES = [PAYMENTS_SCOPE, *MANDATE_SCOPES.values()]


@router.post(
    "/merchants/{merchant_id}/console-users", status_code=201, response_model=ConsoleUserOut
)
async def create_console_user(
    merchant_id: uuid.UUID, body: NewConsoleUser, context: Context, _: Admin
) -> Response:
    """Create a console user (email and password sign-in to the console for this merchant).
    The answer's `set_password_url` works once, for 72 hours of service time; the user acts
    in the console with `scopes` (default: every scope of the API)."""
    scopes = body.scopes if body.scopes is not None else ALL_SCOPES
    async with context.pool.acquire() as conn:
        user = await console_users.create_console_user(
            conn, merchant_id, body.email, scopes, context.clock.now()
        )
    url = f"{context.settings.public_url}/console/set-password?token={user.setup_token}"
    return json_response(
        201,
        {
            "id": str(user.id),
            "merchant_id": str(user.merchant_id),
            "email": user.email,
            "scopes": user.scopes,
            "set_password_url": url,
            "set_password_expires_at": iso_utc(user.setup_expires_at),
        },
    )


async def _check_webhook_uri(field: str, uri: str, production: bool) -> None:
    if not is_absolute_http_uri(uri):
        raise invalid_field(field, "must be an absolute http(s) URI")
    problem = await webhook_destination_problem(uri, production)
    if problem is not None:
        raise invalid_field(field, problem)


@router.put("/merchants/{merchant_id}/webhooks", response_model=WebhookSettingsOut)
async def set_webhooks(
    merchant_id: uuid.UUID, body: WebhookSettings, context: Context, _: Admin
) -> Response:
    """Set the payments (v3) and payouts (v1) webhook URIs; an explicit null clears one."""
    given = body.model_fields_set
    for field in ("payments_uri", "payouts_uri"):
        value = getattr(body, field)
        if value is not None:
            await _check_webhook_uri(field, value, not context.settings.sandbox)
    async with context.pool.acquire() as conn:
        result = await service.set_webhooks(
            conn,
            merchant_id,
            body.payments_uri,
            body.payouts_uri,
            clear_payments="payments_uri" in given and body.payments_uri is None,
            clear_payouts="payouts_uri" in given and body.payouts_uri is None,
        )
    return json_response(200, result)


@router.put("/merchants/{merchant_id}/return-uris", response_model=ReturnUrisOut)
async def set_return_uris(
    merchant_id: uuid.UUID, body: ReturnUris, context: Context, _: Admin
) -> Response:
    """Replace the https URIs a payer may be sent back to (`return_uri` of the hosted payment
    page and the authorisation flow). Enforced in production mode: a `return_uri` must have the
    scheme, host and port of one of them and a path under its path; an empty list allows none.
    Sandbox mode stores them and accepts any `return_uri`."""
    errors: dict[str, list[str]] = {}
    checked: list[str] = []
    for index, uri in enumerate(body.uris):
        try:
            checked.append(return_uris.check_allowed_uri(uri))
        except ValueError as exc:
            errors[f"uris[{index}]"] = [str(exc)]
    if errors:
        raise InvalidParameters("Every allowed return URI must be an absolute https URI.", errors)
    async with context.pool.acquire() as conn:
        stored = await return_uris.set_return_uris(conn, merchant_id, checked)
    return json_response(200, {"uris": stored})


@router.post(
    "/merchants/{merchant_id}/merchant-accounts",
    status_code=201,
    response_model=MerchantAccountOut,
)
async def create_merchant_account(
    merchant_id: uuid.UUID, body: NewMerchantAccount, context: Context, _: Admin
) -> Response:
    """Open a GBP or EUR merchant account with fresh identifiers."""
    async with context.pool.acquire() as conn, conn.transaction():
        account = await service.create_merchant_account(
            conn, merchant_id, body.currency, body.account_holder_name, context.clock.now()
        )
    return json_response(201, account.to_v3())


@router.put(
    "/merchant-accounts/{merchant_account_id}/balance-threshold",
    response_model=MerchantAccountOut,
)
async def set_balance_threshold(
    merchant_account_id: str, body: BalanceThreshold, context: Context, _: Admin
) -> Response:
    """Set (or clear with null) the low-balance threshold; the state is evaluated at once."""
    now = context.clock.now()
    account_id = service.account_uuid(merchant_account_id)
    async with context.pool.acquire() as conn, conn.transaction():
        await service.set_balance_threshold(conn, account_id, body.threshold_in_minor)
        await reevaluate_notifications(conn, account_id, now)
        account = await service.require_account(conn, account_id)
    return json_response(200, account.to_v3())


@router.put(
    "/merchant-accounts/{merchant_account_id}/sweeping-destination",
    response_model=SweepingDestinationOut,
)
async def set_sweeping_destination(
    merchant_account_id: str, body: SweepingDestinationRequest, context: Context, _: Admin
) -> Response:
    """Approve the IBAN the account sweeps to (a GB IBAN for GBP, a non-GB one for EUR);
    null withdraws it (in sandbox mode the account then sweeps to its generated IBAN)."""
    generated = context.settings.powers.sandbox_routes
    async with context.pool.acquire() as conn, conn.transaction():
        account = await service.require_account(conn, merchant_account_id)
        iban = sweeping.check_destination(account, body.iban) if body.iban else None
        await sweeping.set_destination(conn, account, iban)
    destination = sweeping.destination_of(account, iban, generated)
    return json_response(200, {"approved_iban": iban, "iban": destination})


@router.get("/merchants", response_model=list[MerchantOut])
async def list_merchants(context: Context, _: Admin) -> Response:
    """Every merchant, oldest first."""
    rows = await context.pool.fetch("SELECT id, name FROM merchants ORDER BY created_at, id")
    return json_response(200, [{"id": str(r["id"]), "name": r["name"]} for r in rows])
