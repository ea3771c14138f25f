"""The payer's authorisation journey of a payment: the return URI checks, the providers on
offer and the next action, starting the journey, choosing a provider, the consent and the
provider's forms, the mock bank's decision, and which payment or mandate a payer's browser
came back for.

The next action follows one rule (docs/api.md, "Authorization flow"): `provider_selection`
while no provider is chosen; then `consent` when the start request declared it; then the
provider's forms one by one (`form`); then `redirect` to the mock bank's login page, or for
the embedded provider, whose last form decides, `wait`.
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
from bankrail.payments._store import (
    Journey,
    get_payment_row,
    save,
    state_of,
    transition_conflict,
)
from bankrail.payments.jobs import ADVANCE_JOB
from bankrail.payments.models import (
    AUTHORIZATION_WINDOW,
    EXPIRABLE,
    FailureReason,
    InvalidTransition,
    PaymentStatus,
)
from bankrail.rails.mock_bank import action_for_username, login_uri
from bankrail.rails.provider_forms import SCA_CODE_INPUT, form_errors, forms_of
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
    "give_consent",
    "next_action",
    "offered_providers",
    "provider_token",
    "redirect_back",
    "resource_from_return",
    "select_provider",
    "start_authorization",
    "submit_form",
]

CONSENT_REQUESTED = "requested"
CONSENT_GIVEN = "given"


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
    """What the payer must do next: pick a provider, consent, fill in the provider's next
    form, go to the bank, or (the embedded provider's forms all done) wait."""
    if row["provider_id"] is None:
        return {
            "type": "provider_selection",
            "providers": [p.to_api(public_url) for p in offered_providers(row, powers)],
        }
    provider = find_provider(row["provider_id"])
    assert provider is not None
    flow = row["flow"] or {}
    if flow.get("consent") == CONSENT_REQUESTED:
        hint = "form" if provider.asks_forms else "redirect"
        return {"type": "consent", "subsequent_action_hint": hint}
    forms = forms_of(provider.id)
    done = int(flow.get("forms_done", 0))
    if done < len(forms):
        return {"type": "form", "inputs": list(forms[done])}
    if provider.flow == "embedded":
        return {"type": "wait"}
    return {"type": "redirect", "uri": login_uri(public_url, row["id"], provider_token)}


async def start_authorization(
    conn: Connection,
    row: Any,
    *,
    return_uri: str | None,
    now: datetime,
    allow_listed_only: bool,
    powers: SandboxPowers,
    field: str = "redirect.return_uri",
    consent: bool = False,
    journey: Journey | None = None,
) -> Any:
    """The payer starts the journey: the payment becomes `authorizing`; with `consent` (the
    start request declared it) the payer consents once a provider is chosen.

    `return_uri`, where the bank sends the payer back, must be an absolute http(s) URI; with
    `allow_listed_only` (production mode, for a URI the caller chose) one that the merchant's
    allowed return URIs cover, else 400 naming `field`. Then 409 when this deployment offers
    no provider (`require_offered`). `journey` gives the next action the same UPDATE keeps.
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
    flow = {"consent": CONSENT_REQUESTED} if consent else {}
    # A new attempt after a failed one (fidelity P8) leaves the bank's last decision and the
    # last attempt's journey behind.
    return await save(
        conn,
        row,
        state,
        now,
        journey=journey,
        return_uri=return_uri or row["return_uri"],
        bank_action=None,
        flow=flow,
    )


def _require_step(row: Any, step: str) -> dict[str, Any]:
    """The journey's progress, 409 unless the payer's next step is `step`."""
    if state_of(row).status is not PaymentStatus.AUTHORIZING or row["bank_action"] is not None:
        raise Conflict(f"The payment is {row['status']}; there is no {step} to give now.")
    if row["provider_id"] is None:
        raise Conflict(f"Choose a provider first; there is no {step} to give yet.")
    flow: dict[str, Any] = dict(row["flow"] or {})
    pending_consent = flow.get("consent") == CONSENT_REQUESTED
    if (step == "consent") != pending_consent:
        raise Conflict(
            "The payer's consent is awaited first." if pending_consent else "No consent is awaited."
        )
    return flow


async def give_consent(
    conn: Connection,
    row: Any,
    now: datetime,
    powers: SandboxPowers,
    journey: Journey | None = None,
) -> Any:
    """The payer consents (the start request declared `consent`); 409 when no consent is
    awaited: before a provider is chosen, once given, or when none was declared. `journey`
    gives the next action the same UPDATE keeps."""
    require_offered(powers)
    flow = _require_step(row, "consent")
    given = {**flow, "consent": CONSENT_GIVEN}
    return await save(conn, row, state_of(row), now, journey=journey, flow=given)


async def submit_form(
    conn: Connection,
    row: Any,
    inputs: dict[str, str],
    now: datetime,
    powers: SandboxPowers,
    journey: Journey | None = None,
) -> Any:
    """The payer's answers to the provider's current form: 400 naming each wrong input,
    409 when no form is awaited. The embedded provider's last form (the SCA code) decides
    as the mock bank's usernames do; any other form's `journey` gives the next action the
    same UPDATE keeps."""
    require_offered(powers)
    flow = _require_step(row, "form")
    forms = forms_of(row["provider_id"])
    done = int(flow.get("forms_done", 0))
    if done >= len(forms):
        raise Conflict("This payment's provider asks for no form now.")
    errors = form_errors(forms[done], inputs)
    if errors:
        raise InvalidParameters("The form's inputs are not valid.", errors)
    code = inputs.get(SCA_CODE_INPUT)
    decides = code is not None and done + 1 == len(forms)
    progress = {**flow, "forms_done": done + 1}
    row = await save(
        conn, row, state_of(row), now, journey=None if decides else journey, flow=progress
    )
    if decides:
        assert code is not None
        await bank_action(conn, row, action_for_username(code), now, powers=powers)
        return await get_payment_row(conn, row["id"], None)
    return row


async def select_provider(
    conn: Connection,
    row: Any,
    provider_id: str,
    scheme_id: str | None,
    now: datetime,
    powers: SandboxPowers,
    journey: Journey | None = None,
) -> Any:
    """Record the provider the payer chose from those offered (409 when none is); `journey`
    gives the next action the same UPDATE keeps."""
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
        journey=journey,
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
        expired = await save(conn, row, state.expire(now), now)
        return redirect_back(expired)
    if state.status is not PaymentStatus.AUTHORIZING or row["provider_id"] is None:
        raise Conflict(f"The payment is {state.status}; the bank cannot act on it now.")
    if action == "Cancel":
        state = state.fail(now, FailureReason.NOT_AUTHORIZED)
    elif action == "RejectAuthorisation":
        state = state.reject_authorization(now)
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


def resource_from_return(query: str | None, fragment: str | None) -> tuple[str, uuid.UUID]:
    """The resource (`payment` or `mandate`) and its id in what the payer's browser came back
    with: `payment_id` or `mandate_id` in the query or the fragment, each absent, empty, or
    starting with `?` / `#`; 400 if neither is there."""
    for part in (query, fragment):
        if not part:
            continue
        values = parse_qs(part.lstrip("?#"))
        for kind in ("payment", "mandate"):
            found = values.get(f"{kind}_id")
            if found:
                try:
                    return kind, uuid.UUID(found[0])
                except ValueError:
                    raise invalid_field("query", f"{kind}_id is not a UUID") from None
    raise InvalidParameters(
        "No payment_id or mandate_id in the query or fragment.",
        {"query": ["must contain payment_id or mandate_id"]},
    )
