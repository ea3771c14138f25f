"""Mandate use cases in PostgreSQL: creation, the consent journey, the bank's decisions,
revocation, expiry, the funds check, the constraints, and the charge a payment on a mandate
makes against them.

Every step locks the mandate row and records its event in the same transaction. A payment on
a mandate is decided while the mandate row is locked, so concurrent payments on one mandate
are serialised and can never together exceed a period's limit.

This module holds the mandate's lifecycle (creation, the consent journey, the bank's
decisions, revocation, expiry) and is where callers find every mandate use case: it
re-exports the mandates row and resource (`_store`) and the funds check, constraints, charge
and overview (`charges`).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from bankrail.core.ids import new_id
from bankrail.core.powers import SandboxPowers
from bankrail.core.problems import Conflict, invalid_field
from bankrail.core.timefmt import iso_utc
from bankrail.core.urls import with_query
from bankrail.db.pool import Connection
from bankrail.jobs.queue import enqueue
from bankrail.mandates._store import (
    LOCK_MANDATES,
    MANDATE_COLUMNS,
    constraints_of,
    get_mandate_row,
    list_mandates,
    render,
    save,
    state_of,
    transition_conflict,
)
from bankrail.mandates.charges import (
    COUNTED,
    Attempt,
    MandateCharge,
    attempt_charge,
    confirm_funds,
    current_constraints,
    decide_charge,
    overview,
    set_remitter_balance,
    taken_in_periods,
)
from bankrail.mandates.models import (
    DEFAULT_REMITTER_BALANCE,
    FailureReason,
    InvalidTransition,
    MandateState,
    MandateStatus,
    RevocationSource,
)
from bankrail.mandates.schemas import (
    PERIODS,
    MandateBeneficiary,
    MandateDetails,
    MandateExternalAccountBeneficiary,
    MandateRequest,
)
from bankrail.merchants.return_uris import check_return_uri
from bankrail.merchants.service import require_account
from bankrail.rails.mock_bank import login_uri, remitter_for
from bankrail.rails.providers import (
    Provider,
    find_provider,
    offered,
    require_offered,
    search,
)
from bankrail.security.tokens import TokenIssuer

__all__ = [
    "CONSENT_TOKEN_TTL",
    "COUNTED",
    "CURRENCY",
    "EXPIRE_JOB",
    "LOCK_MANDATES",
    "MANDATE_COLUMNS",
    "PROVIDER_TOKEN_KIND",
    "RESOURCE_TOKEN_KIND",
    "Attempt",
    "MandateCharge",
    "attempt_charge",
    "bank_action",
    "confirm_funds",
    "constraints_of",
    "create_mandate",
    "current_constraints",
    "decide_charge",
    "expire_mandate",
    "flow_answer",
    "get_mandate_row",
    "give_consent",
    "list_mandates",
    "mandate_providers",
    "overview",
    "provider_token",
    "redirect_back",
    "render",
    "resource_token",
    "revoke",
    "select_provider",
    "set_remitter_balance",
    "start_authorization",
    "state_of",
    "taken_in_periods",
]

EXPIRE_JOB = "mandate.expire"
CURRENCY = "GBP"
CONSENT_TOKEN_TTL = timedelta(days=366)  # the payer may revoke at their bank for as long
PROVIDER_TOKEN_KIND = "mandate-provider"  # noqa: S105 (a token kind, not a secret)
RESOURCE_TOKEN_KIND = "mandate"  # noqa: S105
CONSENT_REQUESTED = "requested"
CONSENT_GIVEN = "given"
# The mock bank's names of the payer's decisions, and the one each records.
ACTION_NAMES = {"RejectAuthorisation": "Reject"}


def mandate_providers(
    mandate_type: str, powers: SandboxPowers, provider_filter: dict[str, Any] | None = None
) -> list[Provider]:
    """The providers this deployment offers that take mandates of this type in GBP and that
    the mandate's `filter` allows: of its `countries` (any, when absent), of its
    `release_channel` or a more stable one (general availability only, when absent)."""
    wanted = provider_filter or {}
    found = search(
        offered(powers),
        currencies=[CURRENCY],
        countries=wanted.get("countries"),
        release_channel=wanted.get("release_channel"),
    )
    return [p for p in found if f"vrp_{mandate_type}" in p.mandates]


def _check_provider(provider_id: str, mandate_type: str, field: str) -> Provider:
    # Any of the catalogue: whether this deployment offers it is asked when the payer's
    # journey starts, as for payments.
    provider = find_provider(provider_id)
    if provider is None:
        raise invalid_field(field, f"unknown provider {provider_id!r}")
    if f"vrp_{mandate_type}" not in provider.mandates or not provider.serves(CURRENCY):
        raise invalid_field(field, f"{provider_id} does not offer {mandate_type} mandates")
    return provider


async def _beneficiary(
    conn: Connection, merchant_id: uuid.UUID, beneficiary: MandateBeneficiary
) -> tuple[uuid.UUID | None, dict[str, Any] | None]:
    """Who the mandate pays: (one of the merchant's GBP accounts, None), or (None, the
    external account as stored); 400/404 for an account that is not the merchant's GBP one."""
    if isinstance(beneficiary, MandateExternalAccountBeneficiary):
        return None, beneficiary.model_dump(exclude_none=True)
    account = await require_account(conn, uuid.UUID(beneficiary.merchant_account_id), merchant_id)
    if account.currency != CURRENCY:
        raise invalid_field(
            "mandate.beneficiary.merchant_account_id", f"must be a {CURRENCY} merchant account"
        )
    return account.id, None


def _check_selection(details: MandateDetails) -> None:
    """400 unless a preselected provider is given (and takes mandates of the type) or the
    payer selects one, optionally within a `filter`."""
    selection = details.provider_selection
    field = "mandate.provider_selection.provider_id"
    if selection.type == "preselected":
        if selection.provider_id is None:
            raise invalid_field(field, "required when the type is preselected")
        if selection.filter is not None:
            raise invalid_field(
                "mandate.provider_selection.filter",
                "may be given only when the type is user_selected",
            )
        _check_provider(selection.provider_id, details.type, field)
    elif selection.provider_id is not None:
        raise invalid_field(field, "may be given only when the type is preselected")


def _stored_constraints(request: MandateRequest) -> dict[str, Any]:
    """The constraints as the mandate stores (and reads back) them."""
    constraints = request.constraints
    stored: dict[str, Any] = {
        "maximum_individual_amount": constraints.maximum_individual_amount,
        "periodic_limits": {
            name: limit.model_dump()
            for name in PERIODS
            if (limit := getattr(constraints.periodic_limits, name)) is not None
        },
    }
    for name in ("valid_from", "valid_to"):
        moment = getattr(constraints, name)
        if moment is not None:
            stored[name] = iso_utc(moment)
    return stored


async def create_mandate(
    conn: Connection, merchant_id: uuid.UUID, request: MandateRequest, now: datetime
) -> dict[str, Any]:
    """Record a new mandate awaiting the payer's consent; 400/404 for a bad request."""
    if request.currency != CURRENCY:
        raise invalid_field("currency", f"mandates are offered in {CURRENCY} only")
    details = request.mandate
    account_id, external = await _beneficiary(conn, merchant_id, details.beneficiary)
    _check_selection(details)
    if details.use_case is not None and details.type != "commercial":
        raise invalid_field("mandate.use_case", "may be given only for a commercial mandate")
    user = request.user.model_dump(exclude_none=True) if request.user else {}
    user_id = user.pop("id", None) or str(uuid.uuid4())
    selection = details.provider_selection
    related = request.related_products
    mandate_id = new_id()
    state = MandateState(MandateStatus.AUTHORIZATION_REQUIRED, now)
    await conn.execute(
        "INSERT INTO mandates (id, merchant_id, merchant_account_id, type, currency, user_id,"
        " user_details, selection_type, provider_id, reference, constraints, metadata, status,"
        " created_at, beneficiary, provider_filter, use_case, related_products)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,"
        " $18)",
        mandate_id,
        merchant_id,
        account_id,
        details.type,
        CURRENCY,
        user_id,
        user,
        selection.type,
        selection.provider_id,
        details.reference,
        _stored_constraints(request),
        request.metadata,
        state.status.value,
        now,
        external,
        selection.filter.model_dump(exclude_none=True) if selection.filter else None,
        details.use_case,
        related.model_dump(exclude_none=True) if related is not None else None,
    )
    await enqueue(conn, EXPIRE_JOB, {"mandate_id": str(mandate_id)}, state.expires_at())
    return {"id": mandate_id, "user_id": user_id}


def resource_token(tokens: TokenIssuer, mandate_id: uuid.UUID, now: datetime) -> str:
    """The token the payer's pages (the hosted page) use for one mandate."""
    return tokens.issue_resource_token(
        mandate_id, now, timedelta(minutes=15), kind=RESOURCE_TOKEN_KIND
    )


def provider_token(tokens: TokenIssuer, mandate_id: uuid.UUID, now: datetime) -> str:
    """The token of the mock bank's consent page and action API for one mandate; it lasts as
    long as the payer may revoke the consent at their bank."""
    return tokens.issue_resource_token(mandate_id, now, CONSENT_TOKEN_TTL, kind=PROVIDER_TOKEN_KIND)


def flow_answer(
    row: Any, public_url: str, tokens: TokenIssuer, now: datetime, powers: SandboxPowers
) -> dict[str, Any]:
    """The status and, while the payer still has a step to take, the next action."""
    answer: dict[str, Any] = {"status": row["status"]}
    if row["status"] != MandateStatus.AUTHORIZING or row["bank_action"] is not None:
        return answer
    if row["provider_id"] is None:
        action: dict[str, Any] = {
            "type": "provider_selection",
            "providers": [
                p.to_api(public_url)
                for p in mandate_providers(row["type"], powers, row["provider_filter"])
            ],
        }
    elif (row["flow"] or {}).get("consent") == CONSENT_REQUESTED:
        action = {"type": "consent", "subsequent_action_hint": "redirect"}
    else:
        uri = login_uri(public_url, row["id"], provider_token(tokens, row["id"], now))
        action = {"type": "redirect", "uri": uri}
    answer["authorization_flow"] = {"actions": {"next": action}}
    return answer


async def _expire_if_due(conn: Connection, row: Any, now: datetime) -> Any | None:
    """Fail the mandate with `expired` if its window has passed; the updated row, or None."""
    state = state_of(row)
    if state.is_expired(now):
        return await save(conn, row, state.fail(now, FailureReason.EXPIRED))
    return None


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
) -> Any:
    """The payer starts the journey: the mandate becomes `authorizing`. `return_uri` must be
    an absolute http(s) URI (and, with `allow_listed_only`, one the merchant allowed); then
    409 when this deployment offers no provider. With `consent` (declared in the start
    request) the payer consents once a provider is chosen."""
    if return_uri is not None:
        await check_return_uri(
            conn, row["merchant_id"], return_uri, field, allow_listed_only=allow_listed_only
        )
    require_offered(powers)
    if await _expire_if_due(conn, row, now) is not None:
        raise Conflict("The mandate expired: it was not authorised within 15 minutes.")
    try:
        state = state_of(row).start_authorization()
    except InvalidTransition as exc:
        raise transition_conflict(exc) from exc
    flow = {"consent": CONSENT_REQUESTED} if consent else {}
    return await save(conn, row, state, return_uri=return_uri or row["return_uri"], flow=flow)


async def give_consent(conn: Connection, row: Any, powers: SandboxPowers) -> Any:
    """The payer consents (the start request declared `consent`) after choosing a provider;
    409 when no consent is awaited."""
    require_offered(powers)
    flow: dict[str, Any] = dict(row["flow"] or {})
    awaited = (
        row["status"] == MandateStatus.AUTHORIZING
        and row["bank_action"] is None
        and row["provider_id"] is not None
        and flow.get("consent") == CONSENT_REQUESTED
    )
    if not awaited:
        raise Conflict("No consent is awaited for this mandate now.")
    return await save(conn, row, state_of(row), flow={**flow, "consent": CONSENT_GIVEN})


async def select_provider(
    conn: Connection, row: Any, provider_id: str, now: datetime, powers: SandboxPowers
) -> Any:
    """Record the bank the payer chose from those offered (409 when none is; 400 on
    `provider_id` for one that does not take the mandate's type or that its filter leaves
    out)."""
    require_offered(powers)
    if row["status"] != MandateStatus.AUTHORIZING or row["provider_id"] is not None:
        raise Conflict("A provider can be chosen only while authorizing, and only once.")
    provider = _check_provider(provider_id, row["type"], "provider_id")
    if provider not in mandate_providers(row["type"], powers, row["provider_filter"]):
        raise invalid_field("provider_id", f"{provider_id} is not among the banks offered")
    return await save(conn, row, state_of(row), provider_id=provider.id)


def redirect_back(row: Any) -> str:
    """The merchant's return URI with the mandate id added."""
    uri = row["return_uri"]
    return with_query(uri, mandate_id=str(row["id"])) if uri else ""


async def bank_action(
    conn: Connection,
    row: Any,
    action: str,
    now: datetime,
    *,
    powers: SandboxPowers,
    remitter_balance: int | None = None,
) -> str:
    """Apply the payer's decision at the mock bank (`Authorise`, `Reject` (also named
    `RejectAuthorisation`), `Cancel` or `Revoke`); returns where the payer goes next.
    Repeating the last action answers the same again. Every such decision comes here: 409
    when this deployment does not offer the mock providers."""
    require_offered(powers)
    action = ACTION_NAMES.get(action, action)
    if row["bank_action"] == action:
        return redirect_back(row)
    expired = await _expire_if_due(conn, row, now)
    if expired is not None:
        return redirect_back(expired)
    state = state_of(row)
    ready = state.status is MandateStatus.AUTHORIZING and row["provider_id"] is not None
    if action in ("Authorise", "Reject", "Cancel") and not ready:
        raise Conflict(f"The mandate is {state.status}; the bank cannot {action.lower()} it now.")
    try:
        if action == "Authorise":
            remitter = remitter_for(row["user_id"], CURRENCY, row["user_details"].get("name"))
            identifier = remitter.identifiers.as_list()[0]
            updated = await save(
                conn,
                row,
                state.authorize(now),
                bank_action=action,
                remitter={
                    "account_holder_name": remitter.account_holder_name,
                    "account_identifier": identifier,
                },
                remitter_balance_in_minor=(
                    DEFAULT_REMITTER_BALANCE if remitter_balance is None else remitter_balance
                ),
            )
        elif action in ("Reject", "Cancel"):
            reason = (
                FailureReason.AUTHORIZATION_FAILED
                if action == "Reject"
                else FailureReason.NOT_AUTHORIZED
            )
            updated = await save(conn, row, state.fail(now, reason), bank_action=action)
        else:
            revoked = state.revoke(now, RevocationSource.USER)
            updated = await save(conn, row, revoked, bank_action=action)
    except InvalidTransition as exc:
        raise transition_conflict(exc) from exc
    return redirect_back(updated)


async def revoke(conn: Connection, row: Any, now: datetime) -> None:
    """The merchant revokes an authorised mandate; 409 for a mandate in another status."""
    try:
        state = state_of(row).revoke(now, RevocationSource.CLIENT)
    except InvalidTransition as exc:
        raise transition_conflict(exc) from exc
    await save(conn, row, state)


async def expire_mandate(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
    """Fail a mandate still unauthorised when its 15 minutes are up (a job handler)."""
    row = await conn.fetchrow(
        f"SELECT {MANDATE_COLUMNS} FROM mandates WHERE id = $1 FOR UPDATE",
        uuid.UUID(payload["mandate_id"]),
    )
    if row is not None:
        await _expire_if_due(conn, row, now)
