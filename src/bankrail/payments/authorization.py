"""The payer's authorisation journey of a payment: the return URI checks, the providers on
offer and the next action, starting the journey, choosing a provider, the mock bank's
decision, and which payment a payer's browser came back for.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

from bankrail.core.powers import SandboxPowers
from bankrail.core.problems import Conflict, InvalidParameters, invalid_field
from bankrail.core.urls import with_query
from bankrail.db.pool import Connection
from bankrail.jobs.queue import enqueue
from bankrail.merchants.return_uris import check_return_uri
from bankrail.payments._store import save, state_of, transition_conflict
from bankrail.payments.jobs import ADVANCE_JOB
from bankrail.payments.models import (
    AUTHORIZATION_WINDOW,
    EXPIRABLE,
    FailureReason,
    InvalidTransition,
    PaymentStatus,
)
from bankrail.rails.providers import (
    Provider,
    find_provider,
    offered,
    require_offered,
    search,
)
from bankrail.security.tokens import TokenIssuer

__all__ = [
    "bank_action",
    "check_provider",
    "next_action",
    "offered_providers",
    "payment_id_from_return",
    "provider_token",
    "redirect_back",
    "select_provider",
    "start_authorization",
]


def check_provider(
    provider_id: str, scheme_id: str | None, currency: str, prefix: str = ""
) -> Provider:
    """The provider of the catalogue that `provider_id` names, when it serves `currency` (and
    offers `scheme_id`); 400 naming its field (under `prefix`) otherwise. Whether this
    deployment offers it is asked when the payer's journey starts (`start_authorization`)."""
    provider = find_provider(provider_id)
    if provider is None:
        raise invalid_field(f"{prefix}provider_id", f"unknown provider {provider_id!r}")
    if not provider.serves(currency):
        raise invalid_field(f"{prefix}provider_id", f"{provider_id} does not serve {currency}")
    if scheme_id is not None and scheme_id not in provider.schemes:
        raise invalid_field(f"{prefix}scheme_id", f"{provider_id} does not offer {scheme_id}")
    return provider


def offered_providers(row: Any, powers: SandboxPowers) -> list[Provider]:
    """The providers a `user_selected` payment offers its payer in this deployment."""
    chosen = row["selection_filter"] or {}
    found = search(
        offered(powers),
        currencies=[row["currency"]],
        countries=chosen.get("countries"),
        customer_segments=chosen.get("customer_segments"),
        release_channel=chosen.get("release_channel"),
    )
    allowed = chosen.get("provider_ids")
    scheme = row["scheme_id"]
    return [
        p
        for p in found
        if (allowed is None or p.id in allowed) and (scheme is None or scheme in p.schemes)
    ]


def provider_token(tokens: TokenIssuer, payment_id: uuid.UUID, now: datetime) -> str:
    """The token of the mock bank's pages and action API for one payment; it lasts as long as
    the payer has to authorise."""
    return tokens.issue_resource_token(payment_id, now, AUTHORIZATION_WINDOW, kind="provider")


def next_action(
    row: Any, public_url: str, provider_token: str, powers: SandboxPowers
) -> dict[str, Any]:
    """What the payer must do next: pick a provider, go to the bank, or fill in a form."""
    if row["provider_id"] is None:
        return {
            "type": "provider_selection",
            "providers": [p.to_api(public_url) for p in offered_providers(row, powers)],
        }
    provider = find_provider(row["provider_id"])
    assert provider is not None
    if provider.flow == "embedded":
        return {
            "type": "form",
            "inputs": [
                {
                    "type": "text",
                    "id": "psu-username",
                    "mandatory": True,
                    "display_text": "Username at the bank (test_executed, "
                    "test_authorisation_failed or test_execution_rejected)",
                },
                {
                    "type": "text",
                    "id": "psu-password",
                    "mandatory": True,
                    "sensitive": True,
                    "display_text": "Password (any)",
                },
            ],
        }
    uri = with_query(
        f"{public_url}/mock-bank/authorize", payment_id=str(row["id"]), token=provider_token
    )
    return {"type": "redirect", "uri": uri}


async def start_authorization(
    conn: Connection,
    row: Any,
    *,
    return_uri: str | None,
    now: datetime,
    allow_listed_only: bool,
    powers: SandboxPowers,
    field: str = "redirect.return_uri",
) -> Any:
    """The payer starts the journey: the payment becomes `authorizing`.

    `return_uri`, where the bank sends the payer back, must be an absolute http(s) URI; with
    `allow_listed_only` (production mode, for a URI the caller chose) one that the merchant's
    allowed return URIs cover, else 400 naming `field`. Then 409 when this deployment offers
    no provider (`require_offered`).
    """
    if return_uri is not None:
        await check_return_uri(
            conn, row["merchant_id"], return_uri, field, allow_listed_only=allow_listed_only
        )
    require_offered(powers)
    state = state_of(row)
    try:
        state = state.start_authorization()
    except InvalidTransition as exc:
        raise transition_conflict(exc) from exc
    return await save(conn, row, state, now, return_uri=return_uri or row["return_uri"])


async def select_provider(
    conn: Connection,
    row: Any,
    provider_id: str,
    scheme_id: str | None,
    now: datetime,
    powers: SandboxPowers,
) -> Any:
    """Record the provider the payer chose from those offered (409 when none is)."""
    require_offered(powers)
    if state_of(row).status is not PaymentStatus.AUTHORIZING or row["provider_id"] is not None:
        raise Conflict("A provider can be chosen only while authorizing, and only once.")
    provider = check_provider(provider_id, scheme_id, row["currency"])
    if row["scheme_id"] is not None and row["scheme_id"] not in provider.schemes:
        raise invalid_field(
            "provider_id", f"{provider_id} does not offer the payment's scheme {row['scheme_id']}"
        )
    if provider.id not in {p.id for p in offered_providers(row, powers)}:
        raise invalid_field("provider_id", f"{provider_id} is not offered for this payment")
    return await save(
        conn,
        row,
        state_of(row),
        now,
        provider_id=provider.id,
        scheme_id=scheme_id or row["scheme_id"] or provider.schemes[0],
    )


def redirect_back(row: Any) -> str:
    """The merchant's return URI with the payment id added."""
    uri = row["return_uri"]
    if not uri:
        return ""
    return with_query(uri, payment_id=str(row["id"]))


async def bank_action(
    conn: Connection,
    row: Any,
    action: str,
    now: datetime,
    *,
    powers: SandboxPowers,
    execution_delay: int = 0,
    settlement_delay: int = 0,
) -> str:
    """Apply the payer's decision at the mock bank; returns where the payer goes next.

    Every payer decision of a mock provider (its pages, its headless action, the embedded
    form) comes here: 409 when this deployment does not offer the mock providers. Repeating
    the action already taken answers the same again and changes nothing; another action on a
    payment the bank already decided is a conflict.
    """
    require_offered(powers)
    if row["bank_action"] is not None:
        if row["bank_action"] == action:
            return redirect_back(row)
        raise Conflict(f"The bank already recorded {row['bank_action']} for this payment.")
    state = state_of(row)
    if state.status in EXPIRABLE and now >= state.expires_at():
        # The payer came back after the authorisation window: the payment expires now,
        # even if its expiry job has not run yet, and the payer is sent back.
        expired = await save(conn, row, state.fail(now, FailureReason.EXPIRED), now)
        return redirect_back(expired)
    if state.status is not PaymentStatus.AUTHORIZING or row["provider_id"] is None:
        raise Conflict(f"The payment is {state.status}; the bank cannot act on it now.")
    if action == "Cancel":
        state = state.fail(now, FailureReason.USER_CANCELED_AT_PROVIDER)
    elif action == "RejectAuthorisation":
        state = state.fail(now, FailureReason.AUTHORIZATION_FAILED)
    else:
        state = state.authorize(now)
        await enqueue(
            conn,
            ADVANCE_JOB,
            {"payment_id": str(row["id"]), "settlement_delay": settlement_delay},
            now + timedelta(seconds=execution_delay),
        )
    updated = await save(conn, row, state, now, bank_action=action)
    return redirect_back(updated)


def payment_id_from_return(query: str | None, fragment: str | None) -> uuid.UUID:
    """The payment id in what the payer's browser came back with; 400 if none."""
    for part in (query, fragment):
        if not part:
            continue
        values = parse_qs(part.lstrip("?#")).get("payment_id")
        if values:
            try:
                return uuid.UUID(values[0])
            except ValueError:
                break
    raise InvalidParameters(
        "No payment_id in the query or fragment.", {"query": ["must contain payment_id"]}
    )
