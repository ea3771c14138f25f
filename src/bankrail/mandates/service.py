"""Mandate use cases in PostgreSQL: creation, the consent journey, the bank's decisions,
revocation, expiry, the funds check, the constraints, and the charge a payment on a mandate
makes against them.

Every step locks the mandate row and records its event in the same transaction. A payment on
a mandate is decided while the mandate row is locked, so concurrent payments on one mandate
are serialised and can never together exceed a period's limit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bankrail.core.ids import new_id
from bankrail.core.pagination import Window, newest_first_page
from bankrail.core.problems import Conflict, NotFound, invalid_field
from bankrail.core.timefmt import iso_utc, parse_timestamp
from bankrail.core.urls import is_absolute_http_uri, with_query
from bankrail.db.pool import Connection
from bankrail.events.outbox import record_event
from bankrail.jobs.queue import enqueue
from bankrail.mandates.models import (
    DEFAULT_REMITTER_BALANCE,
    Alignment,
    Constraints,
    FailureReason,
    InvalidTransition,
    MandateState,
    MandateStatus,
    Period,
    PeriodicLimit,
    RevocationSource,
    remaining,
)
from bankrail.mandates.schemas import PERIODS, MandateRequest
from bankrail.merchants.return_uris import NOT_ALLOWED, allowed_return_uris, is_allowed
from bankrail.merchants.service import require_account
from bankrail.payments.providers import Provider, find_provider, search
from bankrail.rails.mock_bank import remitter_for
from bankrail.security.tokens import TokenIssuer

EXPIRE_JOB = "mandate.expire"
CURRENCY = "GBP"
CONSENT_TOKEN_TTL = timedelta(days=366)  # the payer may revoke at their bank for as long
PROVIDER_TOKEN_KIND = "mandate-provider"  # noqa: S105 (a token kind, not a secret)
RESOURCE_TOKEN_KIND = "mandate"  # noqa: S105

MANDATE_COLUMNS = (
    "id, merchant_id, merchant_account_id, type, currency, user_id, user_details,"
    " selection_type, provider_id, reference, constraints, metadata, return_uri, status,"
    " failure_stage, failure_reason, revocation_source, bank_action, remitter_balance_in_minor,"
    " remitter, created_at, authorized_at, failed_at, revoked_at"
)
# The payments that count against a mandate's limits: not failed, and not about to fail.
COUNTED = "status <> 'payment_failed' AND pending_failure IS NULL"


# --- reading --------------------------------------------------------------------------------------


def state_of(row: Any) -> MandateState:
    """The lifecycle state of a mandates row."""
    return MandateState(
        status=MandateStatus(row["status"]),
        created_at=row["created_at"],
        authorized_at=row["authorized_at"],
        failed_at=row["failed_at"],
        failure_stage=MandateStatus(row["failure_stage"]) if row["failure_stage"] else None,
        failure_reason=FailureReason(row["failure_reason"]) if row["failure_reason"] else None,
        revoked_at=row["revoked_at"],
        revocation_source=(
            RevocationSource(row["revocation_source"]) if row["revocation_source"] else None
        ),
    )


def constraints_of(row: Any) -> Constraints:
    """The constraints stored with a mandate."""
    stored = row["constraints"]
    limits = {
        Period(name): PeriodicLimit(limit["maximum_amount"], Alignment(limit["period_alignment"]))
        for name, limit in stored["periodic_limits"].items()
    }
    return Constraints(
        maximum_individual_amount=stored["maximum_individual_amount"],
        periodic_limits=limits,
        valid_from=parse_timestamp(stored["valid_from"]) if stored.get("valid_from") else None,
        valid_to=parse_timestamp(stored["valid_to"]) if stored.get("valid_to") else None,
    )


async def get_mandate_row(
    conn: Connection, mandate_id: uuid.UUID, merchant_id: uuid.UUID | None, *, lock: bool = False
) -> Any:
    """The mandate row (locked for the transaction when `lock`); 404 when absent or another
    merchant's."""
    row = await conn.fetchrow(
        f"SELECT {MANDATE_COLUMNS} FROM mandates WHERE id = $1"
        " AND ($2::uuid IS NULL OR merchant_id = $2)" + (" FOR UPDATE" if lock else ""),
        mandate_id,
        merchant_id,
    )
    if row is None:
        raise NotFound(f"Mandate {mandate_id} not found.")
    return row


def render(row: Any) -> dict[str, Any]:
    """The mandate resource."""
    selection: dict[str, Any] = {"type": row["selection_type"]}
    if row["provider_id"]:
        selection["provider_id"] = row["provider_id"]
    mandate: dict[str, Any] = {
        "id": str(row["id"]),
        "type": row["type"],
        "status": row["status"],
        "currency": row["currency"],
        "beneficiary": {
            "type": "merchant_account",
            "merchant_account_id": str(row["merchant_account_id"]),
        },
        "reference": row["reference"],
        "constraints": row["constraints"],
        "provider_selection": selection,
        "user": {"id": row["user_id"], **row["user_details"]},
        "metadata": row["metadata"] or {},
        "created_at": iso_utc(row["created_at"]),
    }
    for column in ("authorized_at", "failed_at", "revoked_at"):
        if row[column]:
            mandate[column] = iso_utc(row[column])
    if row["remitter"]:
        mandate["remitter"] = row["remitter"]
    for column in ("failure_stage", "failure_reason", "revocation_source"):
        if row[column]:
            mandate[column] = row[column]
    return mandate


async def list_mandates(
    conn: Connection,
    merchant_id: uuid.UUID,
    window: Window,
    *,
    types: frozenset[str],
    user_id: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the merchant's mandates of `types`, newest first, and the next cursor."""
    after_time, after_id = window.after()
    rows = await conn.fetch(
        f"SELECT {MANDATE_COLUMNS} FROM mandates WHERE merchant_id = $1"
        " AND type = ANY($2::text[]) AND ($3::text IS NULL OR user_id = $3)"
        " AND ($4::timestamptz IS NULL OR created_at >= $4)"
        " AND ($5::timestamptz IS NULL OR created_at <= $5)"
        " AND ($6::timestamptz IS NULL OR (created_at, id) < ($6, $7::uuid))"
        " ORDER BY created_at DESC, id DESC LIMIT $8",
        merchant_id,
        sorted(types),
        user_id,
        window.since,
        window.until,
        after_time,
        after_id,
        window.limit + 1,
    )
    page, next_cursor = newest_first_page(rows, window.limit)
    return [render(row) for row in page], next_cursor


# --- creation and the consent journey -----------------------------------------------------------


def mandate_providers(mandate_type: str) -> list[Provider]:
    """The general-availability providers that take mandates of this type in GBP."""
    return [p for p in search(currencies=[CURRENCY]) if f"vrp_{mandate_type}" in p.mandates]


def _check_provider(provider_id: str, mandate_type: str, field: str) -> Provider:
    provider = find_provider(provider_id)
    if provider is None:
        raise invalid_field(field, f"unknown provider {provider_id!r}")
    if f"vrp_{mandate_type}" not in provider.mandates or not provider.serves(CURRENCY):
        raise invalid_field(field, f"{provider_id} does not offer {mandate_type} mandates")
    return provider


async def create_mandate(
    conn: Connection, merchant_id: uuid.UUID, request: MandateRequest, now: datetime
) -> dict[str, Any]:
    """Record a new mandate awaiting the payer's consent; 400/404 for a bad request."""
    if request.currency != CURRENCY:
        raise invalid_field("currency", f"mandates are offered in {CURRENCY} only")
    details = request.mandate
    account = await require_account(
        conn, uuid.UUID(details.beneficiary.merchant_account_id), merchant_id
    )
    if account.currency != CURRENCY:
        raise invalid_field(
            "mandate.beneficiary.merchant_account_id", f"must be a {CURRENCY} merchant account"
        )
    selection = details.provider_selection
    field = "mandate.provider_selection.provider_id"
    if selection.type == "preselected":
        if selection.provider_id is None:
            raise invalid_field(field, "required when the type is preselected")
        _check_provider(selection.provider_id, details.type, field)
    elif selection.provider_id is not None:
        raise invalid_field(field, "may be given only when the type is preselected")
    user = request.user.model_dump(exclude_none=True) if request.user else {}
    user_id = user.pop("id", None) or str(uuid.uuid4())
    constraints = request.constraints
    stored = {
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
    mandate_id = new_id()
    state = MandateState(MandateStatus.AUTHORIZATION_REQUIRED, now)
    await conn.execute(
        "INSERT INTO mandates (id, merchant_id, merchant_account_id, type, currency, user_id,"
        " user_details, selection_type, provider_id, reference, constraints, metadata, status,"
        " created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        mandate_id,
        merchant_id,
        account.id,
        details.type,
        CURRENCY,
        user_id,
        user,
        selection.type,
        selection.provider_id,
        details.reference,
        stored,
        request.metadata,
        state.status.value,
        now,
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


def flow_answer(row: Any, public_url: str, tokens: TokenIssuer, now: datetime) -> dict[str, Any]:
    """The status and, while the payer still has a step to take, the next action."""
    answer: dict[str, Any] = {"status": row["status"]}
    if row["status"] != MandateStatus.AUTHORIZING or row["bank_action"] is not None:
        return answer
    if row["provider_id"] is None:
        action: dict[str, Any] = {
            "type": "provider_selection",
            "providers": [p.to_api(public_url) for p in mandate_providers(row["type"])],
        }
    else:
        uri = with_query(
            f"{public_url}/mock-bank/vrp-consent",
            mandate_id=str(row["id"]),
            token=provider_token(tokens, row["id"], now),
        )
        action = {"type": "redirect", "uri": uri}
    answer["authorization_flow"] = {"actions": {"next": action}}
    return answer


async def _save(conn: Connection, row: Any, state: MandateState, **extra: Any) -> Any:
    """Persist a new state (and extra columns) and announce it when it is announced."""
    columns = {
        "status": state.status.value,
        "authorized_at": state.authorized_at,
        "failed_at": state.failed_at,
        "failure_stage": state.failure_stage.value if state.failure_stage else None,
        "failure_reason": state.failure_reason.value if state.failure_reason else None,
        "revoked_at": state.revoked_at,
        "revocation_source": state.revocation_source.value if state.revocation_source else None,
        **extra,
    }
    assignments = ", ".join(f"{name} = ${i + 2}" for i, name in enumerate(columns))
    updated = await conn.fetchrow(
        f"UPDATE mandates SET {assignments} WHERE id = $1 RETURNING {MANDATE_COLUMNS}",
        row["id"],
        *columns.values(),
    )
    if state.status.value != row["status"]:
        await _announce(conn, updated, state)
    return updated


async def _announce(conn: Connection, row: Any, state: MandateState) -> None:
    body: dict[str, Any] = {"mandate_id": str(row["id"])}
    if state.status is MandateStatus.AUTHORIZED:
        assert state.authorized_at is not None
        event_type, moment = "mandate_authorized", state.authorized_at
        body["authorized_at"] = iso_utc(moment)
    elif state.status is MandateStatus.FAILED:
        assert state.failed_at is not None
        assert state.failure_stage is not None
        assert state.failure_reason is not None
        event_type, moment = "mandate_failed", state.failed_at
        body["failed_at"] = iso_utc(moment)
        body["failure_stage"] = state.failure_stage.value
        body["failure_reason"] = state.failure_reason.value
    elif state.status is MandateStatus.REVOKED:
        assert state.revoked_at is not None
        assert state.revocation_source is not None
        event_type, moment = "mandate_revoked", state.revoked_at
        body["revoked_at"] = iso_utc(moment)
        body["revocation_source"] = state.revocation_source.value
    else:
        return  # authorizing is not announced
    body["metadata"] = row["metadata"] or {}
    await record_event(
        conn,
        merchant_id=row["merchant_id"],
        family="payments",
        event_type=event_type,
        body=body,
        now=moment,
    )


def _conflict(exc: InvalidTransition) -> Conflict:
    return Conflict(f"This action is not possible now: {exc}.")


async def _expire_if_due(conn: Connection, row: Any, now: datetime) -> Any | None:
    """Fail the mandate with `expired` if its window has passed; the updated row, or None."""
    state = state_of(row)
    if state.is_expired(now):
        return await _save(conn, row, state.fail(now, FailureReason.EXPIRED))
    return None


async def start_authorization(
    conn: Connection,
    row: Any,
    *,
    return_uri: str | None,
    now: datetime,
    allow_listed_only: bool,
    field: str = "redirect.return_uri",
) -> Any:
    """The payer starts the journey: the mandate becomes `authorizing`. `return_uri` must be
    an absolute http(s) URI (and, with `allow_listed_only`, one the merchant allowed)."""
    if return_uri is not None:
        if not is_absolute_http_uri(return_uri):
            raise invalid_field(field, "must be an absolute http(s) URI")
        if allow_listed_only and not is_allowed(
            return_uri, await allowed_return_uris(conn, row["merchant_id"])
        ):
            raise invalid_field(field, NOT_ALLOWED)
    if await _expire_if_due(conn, row, now) is not None:
        raise Conflict("The mandate expired: it was not authorised within 15 minutes.")
    try:
        state = state_of(row).start_authorization()
    except InvalidTransition as exc:
        raise _conflict(exc) from exc
    return await _save(conn, row, state, return_uri=return_uri or row["return_uri"])


async def select_provider(conn: Connection, row: Any, provider_id: str, now: datetime) -> Any:
    """Record the bank the payer chose from those offered."""
    if row["status"] != MandateStatus.AUTHORIZING or row["provider_id"] is not None:
        raise Conflict("A provider can be chosen only while authorizing, and only once.")
    provider = _check_provider(provider_id, row["type"], "provider_id")
    return await _save(conn, row, state_of(row), provider_id=provider.id)


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
    remitter_balance: int | None = None,
) -> str:
    """Apply the payer's decision at the mock bank (`Authorise`, `Reject` or `Revoke`);
    returns where the payer goes next. Repeating the last action answers the same again."""
    if row["bank_action"] == action:
        return redirect_back(row)
    expired = await _expire_if_due(conn, row, now)
    if expired is not None:
        return redirect_back(expired)
    state = state_of(row)
    ready = state.status is MandateStatus.AUTHORIZING and row["provider_id"] is not None
    if action in ("Authorise", "Reject") and not ready:
        raise Conflict(f"The mandate is {state.status}; the bank cannot {action.lower()} it now.")
    try:
        if action == "Authorise":
            remitter = remitter_for(row["user_id"], CURRENCY, row["user_details"].get("name"))
            identifier = remitter.identifiers.as_list()[0]
            updated = await _save(
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
        elif action == "Reject":
            failed = state.fail(now, FailureReason.AUTHORIZATION_FAILED)
            updated = await _save(conn, row, failed, bank_action=action)
        else:
            revoked = state.revoke(now, RevocationSource.USER)
            updated = await _save(conn, row, revoked, bank_action=action)
    except InvalidTransition as exc:
        raise _conflict(exc) from exc
    return redirect_back(updated)


async def revoke(conn: Connection, row: Any, now: datetime) -> None:
    """The merchant revokes an authorised mandate; 409 for a mandate in another status."""
    try:
        state = state_of(row).revoke(now, RevocationSource.CLIENT)
    except InvalidTransition as exc:
        raise _conflict(exc) from exc
    await _save(conn, row, state)


async def expire_mandate(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
    """Fail a mandate still unauthorised when its 15 minutes are up (a job handler)."""
    row = await conn.fetchrow(
        f"SELECT {MANDATE_COLUMNS} FROM mandates WHERE id = $1 FOR UPDATE",
        uuid.UUID(payload["mandate_id"]),
    )
    if row is not None:
        await _expire_if_due(conn, row, now)


# --- funds, constraints and payments ------------------------------------------------------------


def confirm_funds(row: Any, amount: int, currency: str, now: datetime) -> dict[str, Any]:
    """Whether the payer's account holds `amount` now; 409 unless the mandate is authorised."""
    if row["status"] != MandateStatus.AUTHORIZED:
        raise Conflict(
            f"The mandate is {row['status']}; funds can be confirmed only once authorised."
        )
    if currency != row["currency"]:
        raise invalid_field("currency", f"must be {row['currency']}, the mandate's currency")
    return {
        "confirmed": amount <= row["remitter_balance_in_minor"],
        "confirmed_at": iso_utc(now),
    }


async def taken_in_periods(
    conn: Connection, row: Any, periods: dict[Period, tuple[datetime, datetime]]
) -> dict[Period, int]:
    """What the mandate's counted payments took in each period."""
    if not periods:
        return {}
    names = list(periods)
    sums = ", ".join(
        f"COALESCE(SUM(amount_in_minor) FILTER (WHERE created_at >= ${2 * i + 2}"
        f" AND created_at < ${2 * i + 3}), 0)"
        for i in range(len(names))
    )
    bounds = [moment for name in names for moment in periods[name]]
    record = await conn.fetchrow(
        f"SELECT {sums} FROM payments WHERE mandate_id = $1 AND {COUNTED}", row["id"], *bounds
    )
    assert record is not None
    return {name: int(record[i]) for i, name in enumerate(names)}


async def current_constraints(conn: Connection, row: Any, now: datetime) -> dict[str, Any]:
    """The constraints with each limit's current period and what it has left."""
    constraints = constraints_of(row)
    periods = constraints.current_periods(row["authorized_at"], now)
    taken = await taken_in_periods(conn, row, periods)
    answer: dict[str, Any] = {
        "maximum_individual_amount": constraints.maximum_individual_amount,
        "current_period_limits": {
            period.value: {
                "start_date": iso_utc(start),
                "end_date": iso_utc(end),
                "maximum_available_amount": remaining(
                    constraints.periodic_limits[period], taken[period]
                ),
            }
            for period, (start, end) in periods.items()
        },
    }
    for name in ("valid_from", "valid_to"):
        if row["constraints"].get(name):
            answer[name] = row["constraints"][name]
    return answer


@dataclass(frozen=True)
class MandateCharge:
    """What a payment on a mandate takes from it: where the money goes, who pays, and the
    failure decided at acceptance (None when the payment keeps within every constraint)."""

    mandate_id: uuid.UUID
    merchant_account_id: uuid.UUID
    user_id: str
    user_details: dict[str, Any]
    provider_id: str | None
    pending_failure: str | None


async def charge(
    conn: Connection,
    merchant_id: uuid.UUID,
    mandate_id: uuid.UUID,
    amount: int,
    currency: str,
    now: datetime,
) -> MandateCharge:
    """Decide a payment on the merchant's mandate, with the mandate row locked until the
    payment is recorded in the same transaction. 400 (on `payment_method.mandate_id`) for a
    mandate that is unknown, another merchant's, or not authorised; a payment outside the
    constraints is accepted with pending failure `constraint_violation`, one over the payer's
    balance with `insufficient_funds`."""
    field = "payment_method.mandate_id"
    row = await conn.fetchrow(
        f"SELECT {MANDATE_COLUMNS} FROM mandates WHERE id = $1 AND merchant_id = $2 FOR UPDATE",
        mandate_id,
        merchant_id,
    )
    if row is None:
        raise invalid_field(field, "no such mandate")
    if row["status"] != MandateStatus.AUTHORIZED:
        raise invalid_field(field, f"the mandate is {row['status']}, not authorized")
    if currency != row["currency"]:
        raise invalid_field("currency", f"must be {row['currency']}, the mandate's currency")
    constraints = constraints_of(row)
    periods = constraints.current_periods(row["authorized_at"], now)
    taken = await taken_in_periods(conn, row, periods)
    failure: str | None = None
    if not constraints.allows(amount, now, taken):
        failure = "constraint_violation"
    elif amount > row["remitter_balance_in_minor"]:
        failure = "insufficient_funds"
    return MandateCharge(
        mandate_id=row["id"],
        merchant_account_id=row["merchant_account_id"],
        user_id=row["user_id"],
        user_details=row["user_details"],
        provider_id=row["provider_id"],
        pending_failure=failure,
    )


async def overview(
    conn: Connection, merchant_id: uuid.UUID | None, now: datetime, *, limit: int = 50
) -> list[dict[str, Any]]:
    """The newest mandates (of one merchant, or of every merchant for None) for the console:
    each with its limits and what their current periods have left, and its newest payments."""
    rows = await conn.fetch(
        f"SELECT {MANDATE_COLUMNS} FROM mandates WHERE ($1::uuid IS NULL OR merchant_id = $1)"
        " ORDER BY created_at DESC, id DESC LIMIT $2",
        merchant_id,
        limit,
    )
    found: list[dict[str, Any]] = []
    for row in rows:
        current = await current_constraints(conn, row, now)
        payments = await conn.fetch(
            "SELECT id, amount_in_minor, currency, status, failure_reason, created_at"
            " FROM payments WHERE mandate_id = $1 ORDER BY created_at DESC, id DESC LIMIT 10",
            row["id"],
        )
        limits = row["constraints"]["periodic_limits"]
        found.append(
            {
                **render(row),
                "limits": [
                    {
                        "period": period,
                        "maximum_amount": limits[period]["maximum_amount"],
                        "alignment": limits[period]["period_alignment"],
                        "remaining": current["current_period_limits"][period][
                            "maximum_available_amount"
                        ],
                    }
                    for period in PERIODS
                    if period in limits
                ],
                "payments": [dict(payment) for payment in payments],
            }
        )
    return found
