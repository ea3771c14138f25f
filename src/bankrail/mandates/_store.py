"""The mandates row: its columns, its lifecycle state and constraints, reading it (one, or a
page of the merchant's), the mandate resource, and saving a new state with its webhook event.
"""

from __future__ import annotations

import uuid
from typing import Any

from bankrail.core.pagination import Window, newest_first_page
from bankrail.core.problems import Conflict, NotFound
from bankrail.core.timefmt import iso_utc, parse_timestamp
from bankrail.db.pool import Connection
from bankrail.events.outbox import record_event
from bankrail.mandates.models import (
    Alignment,
    Constraints,
    FailureReason,
    InvalidTransition,
    MandateState,
    MandateStatus,
    Period,
    PeriodicLimit,
    RevocationSource,
)

__all__ = [
    "MANDATE_COLUMNS",
    "beneficiary_of",
    "constraints_of",
    "get_mandate_row",
    "list_mandates",
    "render",
    "save",
    "state_of",
    "transition_conflict",
]

MANDATE_COLUMNS = (
    "id, merchant_id, merchant_account_id, type, currency, user_id, user_details,"
    " selection_type, provider_id, reference, constraints, metadata, return_uri, status,"
    " failure_stage, failure_reason, revocation_source, bank_action, remitter_balance_in_minor,"
    " remitter, created_at, authorized_at, failed_at, revoked_at, beneficiary, provider_filter,"
    " use_case, related_products, flow"
)


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


LOCK_MANDATES = (
    f"SELECT {MANDATE_COLUMNS} FROM mandates m WHERE m.id = ANY($1::uuid[])"
    " AND EXISTS (SELECT FROM unnest($1::uuid[], $2::uuid[]) AS w (id, owner)"
    " WHERE w.id = m.id AND (w.owner IS NULL OR w.owner = m.merchant_id))"
    " ORDER BY m.id FOR UPDATE OF m"
)
"""The mandates of a batch's actions, each of the merchant that names it, read and locked in
one statement (security/idempotent_commit.py `LockedEffect`)."""


async def get_mandate_row(
    conn: Connection,
    mandate_id: uuid.UUID,
    merchant_id: uuid.UUID | None,
    *,
    lock: bool = False,
    locked: Any | None = None,
) -> Any:
    """The mandate row (locked for the transaction when `lock`); 404 when absent or another
    merchant's. `locked` is the row as the request's batch read and locked it for this
    merchant (`LOCK_MANDATES`, handed by security/idempotent_commit.py), if it did: then no
    statement is sent for it."""
    if locked is not None:
        return locked
    row = await conn.fetchrow(
        f"SELECT {MANDATE_COLUMNS} FROM mandates WHERE id = $1"
        " AND ($2::uuid IS NULL OR merchant_id = $2)" + (" FOR UPDATE" if lock else ""),
        mandate_id,
        merchant_id,
    )
    if row is None:
        raise NotFound(f"Mandate {mandate_id} not found.")
    return row


def beneficiary_of(row: Any) -> dict[str, Any]:
    """Who the mandate's payments pay: the external account as sent, or the merchant
    account."""
    if row["beneficiary"] is not None:
        return dict(row["beneficiary"])
    return {"type": "merchant_account", "merchant_account_id": str(row["merchant_account_id"])}


def render(row: Any) -> dict[str, Any]:
    """The mandate resource."""
    selection: dict[str, Any] = {"type": row["selection_type"]}
    if row["provider_id"]:
        selection["provider_id"] = row["provider_id"]
    if row["provider_filter"] is not None:
        selection["filter"] = row["provider_filter"]
    mandate: dict[str, Any] = {
        "id": str(row["id"]),
        "type": row["type"],
        "status": row["status"],
        "currency": row["currency"],
        "beneficiary": beneficiary_of(row),
        "reference": row["reference"],
        "constraints": row["constraints"],
        "provider_selection": selection,
        "user": {"id": row["user_id"], **row["user_details"]},
        "metadata": row["metadata"] or {},
        "created_at": iso_utc(row["created_at"]),
    }
    for column in ("use_case", "related_products"):
        if row[column] is not None:
            mandate[column] = row[column]
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


async def save(conn: Connection, row: Any, state: MandateState, **extra: Any) -> Any:
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


def transition_conflict(exc: InvalidTransition) -> Conflict:
    """The 409 for an action the mandate's state machine does not allow now."""
    return Conflict(f"This action is not possible now: {exc}.")
