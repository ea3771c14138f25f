"""Operator routes (docs/operations.md) for merchants, clients, keys, webhooks, accounts and
thresholds."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import Field
from starlette.responses import Response

from bankrail.core.problems import InvalidParameters, invalid_field
from bankrail.core.timefmt import iso_utc
from bankrail.core.urls import is_absolute_http_uri
from bankrail.events.destinations import webhook_destination_problem
from bankrail.http.auth import MANDATE_SCOPES, PAYMENTS_SCOPE
from bankrail.http.openapi import ERRORS_ADMIN
from bankrail.http.pipeline import OPERATOR, Call, Endpoint, routes
from bankrail.http.responses import json_response
from bankrail.merchants import closing, console_users, return_uris, service, sweeping
from bankrail.merchants.balances import reevaluate_notifications
from bankrail.merchants.schemas import (
    BalanceThreshold,
    ClientCredentials,
    ClosedMerchantOut,
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


async def create_merchant(call: Call[NewMerchant, None]) -> Response:
    """Create a merchant (with no accounts)."""
    body, context = call.body, call.context
    async with context.pool.acquire() as conn:
        merchant_id = await service.create_merchant(conn, body.name, context.clock.now())
    return json_response(201, {"id": str(merchant_id), "name": body.name})


async def delete_merchant(call: Call[None, None]) -> Response:
    """Remove a merchant entirely: its objects, webhook deliveries, accounts, clients, keys
    and console users (the ledger keeps its balanced history). In production mode this is
    refused (409) while the merchant has ledger history: close it instead."""
    merchant_id, context = call.params["merchant_id"], call.context
    async with context.pool.acquire() as conn:
        await closing.delete_merchant(
            conn, merchant_id, context.clock.now(), sandbox=context.settings.sandbox
        )
    context.forget_credentials()
    return Response(status_code=204)


async def close_merchant(call: Call[None, None]) -> Response:
    """Close a merchant, keeping its history: its API clients and signing keys are revoked
    and its console users disabled (at once on this host, within a second on every other),
    and no new ones can be made for it. Closing again answers the same."""
    merchant_id, context = call.params["merchant_id"], call.context
    async with context.pool.acquire() as conn:
        closed_at = await closing.close_merchant(conn, merchant_id, context.clock.now())
        name = await service.merchant_name(conn, merchant_id)
    context.forget_credentials()
    return json_response(
        200, {"id": str(merchant_id), "name": name, "closed_at": iso_utc(closed_at)}
    )


async def create_client(call: Call[NewClient, None]) -> Response:
    """Issue client credentials (default scopes: `payments`)."""
    merchant_id, body, context = call.params["merchant_id"], call.body, call.context
    scopes = body.scopes if body.scopes is not None else ["payments"]
    async with context.pool.acquire() as conn:
        client_id, secret = await service.create_client(
            conn, merchant_id, scopes, context.clock.now()
        )
    return json_response(
        201, {"client_id": client_id, "client_secret": secret, "scopes": sorted(set(scopes))}
    )


async def register_signing_key(call: Call[NewSigningKey, None]) -> Response:
    """Register an ES512 (P-521) public key the merchant signs requests with."""
    merchant_id, body, context = call.params["merchant_id"], call.body, call.context
    async with context.pool.acquire() as conn:
        kid = await service.register_signing_key(
            conn, merchant_id, body.public_key_pem, body.kid, context.clock.now()
        )
    return json_response(201, {"kid": kid})


async def revoke_signing_key(call: Call[None, None]) -> Response:
    """Revoke a signing key: signatures made with it fail at once on this host and within a
    second on every other. 404 when the merchant has no such active key."""
    merchant_id, kid, context = call.params["merchant_id"], call.params["kid"], call.context
    await context.revoke_credential(service.revoke_signing_key, merchant_id, kid)
    return Response(status_code=204)


async def revoke_client(call: Call[None, None]) -> Response:
    """Revoke an API client: its secret, its access tokens and its console sessions stop
    working at once on this host and within a second on every other. 404 when the merchant
    has no such active client."""
    merchant_id, client_id, context = (
        call.params["merchant_id"],
        call.params["client_id"],
        call.context,
    )
    await context.revoke_credential(service.revoke_client, merchant_id, client_id)
    return Response(status_code=204)


ALL_SCOPES = [PAYMENTS_SCOPE, *MANDATE_SCOPES.values()]


async def create_console_user(call: Call[NewConsoleUser, None]) -> Response:
    """Create a console user (email and password sign-in to the console for this merchant).
    The answer's `set_password_url` works once, for 72 hours of service time; the user acts
    in the console with `scopes` (default: every scope of the API)."""
    merchant_id, body, context = call.params["merchant_id"], call.body, call.context
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


async def set_webhooks(call: Call[WebhookSettings, None]) -> Response:
    """Set the payments (v3) and payouts (v1) webhook URIs; an explicit null clears one."""
    merchant_id, body, context = call.params["merchant_id"], call.body, call.context
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


async def set_return_uris(call: Call[ReturnUris, None]) -> Response:
    """Replace the https URIs a payer may be sent back to (`return_uri` of the hosted payment
    page and the authorisation flow). Enforced in production mode: a `return_uri` must have the
    scheme, host and port of one of them and a path under its path; an empty list allows none.
    Sandbox mode stores them and accepts any `return_uri`."""
    merchant_id, body, context = call.params["merchant_id"], call.body, call.context
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


async def create_merchant_account(call: Call[NewMerchantAccount, None]) -> Response:
    """Open a GBP or EUR merchant account with fresh identifiers."""
    merchant_id, body, context = call.params["merchant_id"], call.body, call.context
    async with context.pool.acquire() as conn, conn.transaction():
        account = await service.create_merchant_account(
            conn, merchant_id, body.currency, body.account_holder_name, context.clock.now()
        )
    return json_response(201, account.to_v3())


async def set_balance_threshold(call: Call[BalanceThreshold, None]) -> Response:
    """Set (or clear with null) the low-balance threshold; the state is evaluated at once."""
    merchant_account_id, body, context = call.params["merchant_account_id"], call.body, call.context
    now = context.clock.now()
    account_id = service.account_uuid(merchant_account_id)
    async with context.pool.acquire() as conn, conn.transaction():
        await service.set_balance_threshold(conn, account_id, body.threshold_in_minor)
        await reevaluate_notifications(conn, account_id, now)
        account = await service.require_account(conn, account_id)
    return json_response(200, account.to_v3())


async def set_sweeping_destination(call: Call[SweepingDestinationRequest, None]) -> Response:
    """Approve the IBAN the account sweeps to (a GB IBAN for GBP, a non-GB one for EUR);
    null withdraws it (in sandbox mode the account then sweeps to its generated IBAN)."""
    merchant_account_id, body, context = call.params["merchant_account_id"], call.body, call.context
    generated = context.settings.powers.sandbox_routes
    async with context.pool.acquire() as conn, conn.transaction():
        account = await service.require_account(conn, merchant_account_id)
        iban = sweeping.check_destination(account, body.iban) if body.iban else None
        await sweeping.set_destination(conn, account, iban)
    destination = sweeping.destination_of(account, iban, generated)
    return json_response(200, {"approved_iban": iban, "iban": destination})


async def list_merchants(call: Call[None, None]) -> Response:
    """Every merchant, oldest first."""
    context = call.context
    rows = await context.pool.fetch("SELECT id, name FROM merchants ORDER BY created_at, id")
    return json_response(200, [{"id": str(r["id"]), "name": r["name"]} for r in rows])


_NAME = Annotated[str, Field(min_length=1, max_length=200)]

ROUTES = routes(
    Endpoint(
        "POST",
        "/admin/merchants",
        create_merchant,
        OPERATOR,
        body=NewMerchant,
        status_code=201,
        response_model=MerchantOut,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "DELETE",
        "/admin/merchants/{merchant_id}",
        delete_merchant,
        OPERATOR,
        params={"merchant_id": uuid.UUID},
        status_code=204,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "POST",
        "/admin/merchants/{merchant_id}/close",
        close_merchant,
        OPERATOR,
        params={"merchant_id": uuid.UUID},
        response_model=ClosedMerchantOut,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "POST",
        "/admin/merchants/{merchant_id}/clients",
        create_client,
        OPERATOR,
        body=NewClient,
        params={"merchant_id": uuid.UUID},
        status_code=201,
        response_model=ClientCredentials,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "POST",
        "/admin/merchants/{merchant_id}/signing-keys",
        register_signing_key,
        OPERATOR,
        body=NewSigningKey,
        params={"merchant_id": uuid.UUID},
        status_code=201,
        response_model=SigningKeyOut,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "DELETE",
        "/admin/merchants/{merchant_id}/signing-keys/{kid:path}",
        revoke_signing_key,
        OPERATOR,
        params={
            "merchant_id": uuid.UUID,
            "kid": Annotated[str, Field(min_length=1, max_length=200)],
        },
        status_code=204,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "DELETE",
        "/admin/merchants/{merchant_id}/clients/{client_id}",
        revoke_client,
        OPERATOR,
        params={
            "merchant_id": uuid.UUID,
            "client_id": Annotated[str, Field(min_length=1, max_length=200)],
        },
        status_code=204,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "POST",
        "/admin/merchants/{merchant_id}/console-users",
        create_console_user,
        OPERATOR,
        body=NewConsoleUser,
        params={"merchant_id": uuid.UUID},
        status_code=201,
        response_model=ConsoleUserOut,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "PUT",
        "/admin/merchants/{merchant_id}/webhooks",
        set_webhooks,
        OPERATOR,
        body=WebhookSettings,
        params={"merchant_id": uuid.UUID},
        response_model=WebhookSettingsOut,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "PUT",
        "/admin/merchants/{merchant_id}/return-uris",
        set_return_uris,
        OPERATOR,
        body=ReturnUris,
        params={"merchant_id": uuid.UUID},
        response_model=ReturnUrisOut,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "POST",
        "/admin/merchants/{merchant_id}/merchant-accounts",
        create_merchant_account,
        OPERATOR,
        body=NewMerchantAccount,
        params={"merchant_id": uuid.UUID},
        status_code=201,
        response_model=MerchantAccountOut,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "PUT",
        "/admin/merchant-accounts/{merchant_account_id}/balance-threshold",
        set_balance_threshold,
        OPERATOR,
        body=BalanceThreshold,
        response_model=MerchantAccountOut,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "PUT",
        "/admin/merchant-accounts/{merchant_account_id}/sweeping-destination",
        set_sweeping_destination,
        OPERATOR,
        body=SweepingDestinationRequest,
        response_model=SweepingDestinationOut,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "GET",
        "/admin/merchants",
        list_merchants,
        OPERATOR,
        response_model=list[MerchantOut],
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
)
"""The operator's routes for merchants, clients, keys, webhooks, accounts, thresholds and
sweeping destinations."""
