"""The payments row: its columns, reading and locking it, its lifecycle state, saving a new
state (with its status history and webhook event), and the payment resource rendered from it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from bankrail.core.problems import Conflict, NotFound
from bankrail.core.timefmt import iso_utc
from bankrail.db.pool import Connection
from bankrail.events.outbox import record_event
from bankrail.payments.models import (
    ANNOUNCED,
    FailureReason,
    InvalidTransition,
    PaymentState,
    PaymentStatus,
)
from bankrail.payments.sources import JOINED_SOURCE_FIELDS, get_payment_source, joined_source

__all__ = [
    "DOCUMENT_FROM",
    "DOCUMENT_SELECT",
    "DOCUMENT_VERSION",
    "HELD_DOCUMENT_SELECT",
    "PAYMENT_COLUMNS",
    "Journey",
    "document_key",
    "get_payment_document",
    "get_payment_row",
    "lock_payment",
    "render_row",
    "save",
    "state_of",
    "transition_conflict",
]

PAYMENT_COLUMNS = (
    "id, merchant_id, merchant_account_id, amount_in_minor, currency, user_id, user_details,"
    " selection_type, selection_filter, provider_id, scheme_id, metadata, return_uri, status,"
    " failure_stage, failure_reason, payment_source_id, bank_action, created_at, authorized_at,"
    " executed_at, settled_at, failed_at, history, refunded_amount_in_minor, mandate_id,"
    " mandate_reference, pending_failure, sent, next_action, mandate_retry, user_interaction,"
    " flow"
)


LOCK_PAYMENTS = (
    f"SELECT {PAYMENT_COLUMNS} FROM payments p WHERE p.id = ANY($1::uuid[])"
    " AND EXISTS (SELECT FROM unnest($1::uuid[], $2::uuid[]) AS w (id, owner)"
    " WHERE w.id = p.id AND (w.owner IS NULL OR w.owner = p.merchant_id))"
    " ORDER BY p.id FOR UPDATE OF p"
)
"""The payments of a batch's actions, each of the merchant that names it (or of any, for
the payer's resource token), read and locked in one statement
(security/idempotent_commit.py `LockedEffect`)."""


async def lock_payment(
    conn: Connection,
    payment_id: uuid.UUID,
    merchant_id: uuid.UUID | None = None,
    *,
    locked: Any | None = None,
) -> Any:
    """The payment row, locked for the transaction; 404 when absent or another merchant's.
    `locked` is the row as the request's batch read and locked it for this merchant
    (`LOCK_PAYMENTS`, handed by security/idempotent_commit.py), if it did: then no statement
    is sent for it."""
    if locked is not None:
        return locked
    row = await conn.fetchrow(
        f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE id = $1"
        " AND ($2::uuid IS NULL OR merchant_id = $2) FOR UPDATE",
        payment_id,
        merchant_id,
    )
    if row is None:
        raise NotFound(f"Payment {payment_id} not found.")
    return row


async def get_payment_row(
    conn: Connection, payment_id: uuid.UUID, merchant_id: uuid.UUID | None
) -> Any:
    """The payment row without locking; 404 when absent or another merchant's."""
    row = await conn.fetchrow(
        f"SELECT {PAYMENT_COLUMNS} FROM payments"
        " WHERE id = $1 AND ($2::uuid IS NULL OR merchant_id = $2)",
        payment_id,
        merchant_id,
    )
    if row is None:
        raise NotFound(f"Payment {payment_id} not found.")
    return row


def state_of(row: Any) -> PaymentState:
    """The lifecycle state of a payments row."""
    return PaymentState(
        status=PaymentStatus(row["status"]),
        created_at=row["created_at"],
        authorized_at=row["authorized_at"],
        executed_at=row["executed_at"],
        settled_at=row["settled_at"],
        failed_at=row["failed_at"],
        failure_stage=PaymentStatus(row["failure_stage"]) if row["failure_stage"] else None,
        failure_reason=FailureReason(row["failure_reason"]) if row["failure_reason"] else None,
        retry=bool(row["sent"] and row["sent"].get("retry") is not None),
    )


def transition_conflict(exc: InvalidTransition) -> Conflict:
    """The 409 for an action the payment's state machine does not allow now."""
    return Conflict(f"This action is not possible now: {exc}.")


Journey = Callable[[Mapping[str, Any]], dict[str, Any] | None]
"""A step of the payer's journey, given the payments row as `save` is about to write it
(its history aside): the next action to keep in `next_action`, None to keep the one there."""


async def save(
    conn: Connection,
    row: Any,
    state: PaymentState,
    now: datetime,
    *,
    journey: Journey | None = None,
    **extra: Any,
) -> Any:
    """Persist a new state (and extra columns), append history, announce it if due. With a
    `journey`, the next action it gives for the row as written is kept by the same UPDATE
    (a step of the payer's journey: one statement, not two)."""
    columns = {
        "status": state.status.value,
        "authorized_at": state.authorized_at,
        "executed_at": state.executed_at,
        "settled_at": state.settled_at,
        "failed_at": state.failed_at,
        "failure_stage": state.failure_stage.value if state.failure_stage else None,
        "failure_reason": state.failure_reason.value if state.failure_reason else None,
        **extra,
    }
    if journey is not None:
        action = journey({**dict(row), **columns})
        if action is not None:
            columns["next_action"] = action
    names = list(columns)
    assignments = ", ".join(f"{name} = ${i + 2}" for i, name in enumerate(names))
    changed = state.status.value != row["status"]
    history_sql = (
        f", history = history || jsonb_build_array(jsonb_build_object('status', "
        f"${len(names) + 2}::text, 'at', ${len(names) + 3}::text))"
        if changed
        else ""
    )
    args: list[Any] = [row["id"], *columns.values()]
    if changed:
        args += [state.status.value, iso_utc(now)]
    updated = await conn.fetchrow(
        f"UPDATE payments SET {assignments}{history_sql} WHERE id = $1 RETURNING {PAYMENT_COLUMNS}",
        *args,
    )
    if changed and state.status in ANNOUNCED:
        await _announce(conn, updated, state)
    return updated


def _payment_method(row: Any) -> dict[str, Any]:
    if row["mandate_id"] is not None:
        return _mandate_method(row)
    method: dict[str, Any] = {"type": "bank_transfer"}
    if row["provider_id"]:
        method["provider_id"] = row["provider_id"]
    if row["scheme_id"]:
        method["scheme_id"] = row["scheme_id"]
    return method


def _mandate_method(row: Any) -> dict[str, Any]:
    method: dict[str, Any] = {"type": "mandate", "mandate_id": str(row["mandate_id"])}
    if row["mandate_reference"]:
        method["reference"] = row["mandate_reference"]
    if row["mandate_retry"] is not None:
        method["retry"] = row["mandate_retry"]
    if row["user_interaction"] is not None:
        method["user_interaction"] = row["user_interaction"]
    return method


async def _announce(conn: Connection, row: Any, state: PaymentState) -> None:
    body: dict[str, Any] = {
        "payment_id": str(row["id"]),
        "payment_method": _payment_method(row),
        "metadata": row["metadata"] or {},
    }
    if state.status is PaymentStatus.EXECUTED:
        assert state.executed_at is not None
        body["executed_at"] = iso_utc(state.executed_at)
    elif state.status is PaymentStatus.SETTLED:
        assert state.settled_at is not None
        body["settled_at"] = iso_utc(state.settled_at)
        body["user_id"] = row["user_id"]
        body["payment_source"] = await _source_document(conn, row["payment_source_id"])
    else:
        assert state.failed_at is not None
        assert state.failure_stage is not None
        body["failed_at"] = iso_utc(state.failed_at)
        body["failure_stage"] = state.failure_stage.value
        body["failure_reason"] = state.failure_reason.value if state.failure_reason else None
    await record_event(
        conn,
        merchant_id=row["merchant_id"],
        family="payments",
        event_type=state.status.value,
        body=body,
        now=state.failed_at or state.settled_at or state.executed_at or state.created_at,
    )


async def _source_document(conn: Connection, source_id: uuid.UUID | None) -> dict[str, Any] | None:
    source = await get_payment_source(conn, source_id) if source_id else None
    return source.to_api() if source else None


RENDERED_TIMESTAMPS = ("created_at", "authorized_at", "executed_at", "settled_at", "failed_at")
"""The timestamps of the payment resource."""

# The timestamps as PostgreSQL renders them, in `iso_utc`'s format (microseconds, `Z`):
# formatting them in Python was a quarter of the API's CPU for a page (docs/performance.md).
_RENDERED_AT = "to_char(p.{0} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
_DOCUMENT_FIELDS: tuple[tuple[str, str], ...] = (
    *(
        (f"p.{column}", column)
        for column in (
            "merchant_account_id",
            "amount_in_minor",
            "currency",
            "user_id",
            "selection_type",
            "selection_filter",
            "provider_id",
            "scheme_id",
            "metadata",
            "status",
            "failure_stage",
            "failure_reason",
            "history",
            "refunded_amount_in_minor",
            "mandate_id",
            "mandate_reference",
            "mandate_retry",
            "user_interaction",
            "sent",
            "next_action",
        )
    ),
    *((_RENDERED_AT.format(column), f"{column}_utc") for column in RENDERED_TIMESTAMPS),
    *JOINED_SOURCE_FIELDS,
)
"""(expression, name) of what `render_row` reads besides the payment's id and `created_at`."""
DOCUMENT_FROM = " FROM payments p LEFT JOIN payment_sources s ON s.id = p.payment_source_id"
"""The rows `render_row` reads: the payment (`p`) and its payment source (`s`) joined."""
_DOCUMENT_COLUMNS = "p.id, p.created_at, " + ", ".join(
    f"{expression} AS {name}" for expression, name in _DOCUMENT_FIELDS
)
DOCUMENT_SELECT = f"SELECT {_DOCUMENT_COLUMNS}{DOCUMENT_FROM}"
"""The one statement's head that reads payments as `render_row` renders them (the single
GET and the page add their WHERE): the payment, its timestamps rendered (`<column>_utc`),
and its payment source joined."""

# Every row `render_row` reads from, by its `xmin`: the id of the transaction that wrote that
# version of it. Any UPDATE of a payment (or of its source: a later settlement from the same
# account writes the holder's name again) writes a new version with a new `xmin`, so a
# document kept by these versions (payments/documents.py) is never served once the payment
# changed. A table joined into `DOCUMENT_FROM` must add its `xmin` here and to `_HELD`.
DOCUMENT_VERSION = "p.xmin AS version, s.xmin AS source_version"
"""The version of a payment's document, read with `DOCUMENT_FROM` (`version`,
`source_version`: None without a source)."""

_HELD = "(p.id::text || ':' || p.xmin::text || ':' || coalesce(s.xmin::text, '')) = ANY($1)"
HELD_DOCUMENT_SELECT = (
    f"SELECT {DOCUMENT_VERSION}, h.held, p.id, p.created_at, "
    + ", ".join(
        f"CASE WHEN h.held THEN NULL ELSE {expression} END AS {name}"
        for expression, name in _DOCUMENT_FIELDS
    )
    # OFFSET 0 keeps the subquery from being pulled up: flattened, PostgreSQL evaluated
    # `_HELD` once in every CASE (thirty times a row), which doubled the statement's cost.
    + f"{DOCUMENT_FROM} CROSS JOIN LATERAL (SELECT {_HELD} AS held OFFSET 0) h"
)
"""`DOCUMENT_SELECT` with the version of each document it reads, for the payments whose
document the caller does not hold already: `$1` lists the documents it holds (`document_key`
of each); a row of one of them (`held` true) has its id, `created_at` and version, and nulls
for the rest, which PostgreSQL neither reads, formats nor sends."""


def document_key(payment_id: uuid.UUID, version: int, source_version: int | None) -> str:
    """How `HELD_DOCUMENT_SELECT` names a document held: the payment's id and its version."""
    return f"{payment_id}:{version}:{'' if source_version is None else source_version}"


async def get_payment_document(
    conn: Connection, payment_id: uuid.UUID, merchant_id: uuid.UUID | None
) -> dict[str, Any]:
    """The payment resource (spec 2.7 and docs/api.md) in one statement; 404 when absent
    or another merchant's."""
    row = await conn.fetchrow(
        f"{DOCUMENT_SELECT} WHERE p.id = $1 AND ($2::uuid IS NULL OR p.merchant_id = $2)",
        payment_id,
        merchant_id,
    )
    if row is None:
        raise NotFound(f"Payment {payment_id} not found.")
    return render_row(row)


def render_row(row: Any) -> dict[str, Any]:
    """The payment resource (spec 2.7 and docs/api.md) of a row read by `DOCUMENT_SELECT`,
    for `GET /v3/payments/{id}` and each item of a page alike. The request's own objects
    (provider selection, beneficiary, retry, sub-merchants) read back as they were sent
    (fidelity P5). A page of payments renders fifty of these: the row is read by name once
    per column and the status compared as the text it is (docs/performance.md)."""
    status: str = row["status"]
    metadata = row["metadata"]
    provider_id = row["provider_id"]
    scheme_id = row["scheme_id"]
    payment: dict[str, Any] = {
        "id": str(row["id"]),
        "amount_in_minor": row["amount_in_minor"],
        "currency": row["currency"],
        "user": {"id": row["user_id"]},
        "payment_method": _method_of(row, provider_id, scheme_id),
        "created_at": row["created_at_utc"],
        "status": status,
        "status_history": row["history"],
        "metadata": metadata if metadata else {},
        "refunded_amount_in_minor": row["refunded_amount_in_minor"],
    }
    merchant_account_id = row["merchant_account_id"]
    if merchant_account_id is not None:
        payment["merchant_account_id"] = str(merchant_account_id)
    sent = row["sent"]
    if sent and "sub_merchants" in sent:
        payment["sub_merchants"] = sent["sub_merchants"]
    if provider_id:
        payment["provider_id"] = provider_id
    if scheme_id:
        payment["scheme_id"] = scheme_id
    for name, column in _LATER_TIMESTAMPS:
        text = row[column]
        if text is not None:
            payment[name] = text
    if "settled_at" in payment:
        # The sandbox's funds are available to the beneficiary once settled (fidelity P7).
        payment["creditable_at"] = payment["settled_at"]
    if status in _FAILED:
        payment["failure_stage"] = row["failure_stage"]
        payment["failure_reason"] = row["failure_reason"]
    elif status == _AUTHORIZING:
        next_action = row["next_action"]
        if next_action is not None:
            payment["authorization_flow"] = {"actions": {"next": next_action}}
    payment_source = joined_source(row)
    if payment_source is not None:
        payment["payment_source"] = payment_source
    return payment


_LATER_TIMESTAMPS = tuple((name, f"{name}_utc") for name in RENDERED_TIMESTAMPS[1:])
"""(field, column) of the timestamps after `created_at`, each present once reached."""
_FAILED = frozenset({PaymentStatus.FAILED.value, PaymentStatus.ATTEMPT_FAILED.value})
_AUTHORIZING = PaymentStatus.AUTHORIZING.value


def _method_of(row: Any, provider_id: str | None, scheme_id: str | None) -> dict[str, Any]:
    """`payment_method` as sent; for rows without the request's echo (created before it),
    from the columns."""
    if row["mandate_id"] is not None:
        return _mandate_method(row)
    sent = row["sent"]
    if sent is None:
        selection: dict[str, Any] = {"type": row["selection_type"]}
        if row["selection_filter"]:
            selection["filter"] = row["selection_filter"]
        beneficiary = {
            "type": "merchant_account",
            "merchant_account_id": str(row["merchant_account_id"]),
        }
    else:
        selection = dict(sent["provider_selection"])
        beneficiary = sent["beneficiary"]
    # The provider and scheme the payment uses: preselected ones as sent; the payer's choice
    # once made (before, a user_selected payment names none).
    if provider_id and (row["selection_type"] == "user_selected" or "provider_id" not in selection):
        selection["provider_id"] = provider_id
        if scheme_id:
            selection["scheme_id"] = scheme_id
    elif sent is None and scheme_id:
        selection["scheme_id"] = scheme_id
    method: dict[str, Any] = {
        "type": "bank_transfer",
        "provider_selection": selection,
        "beneficiary": beneficiary,
    }
    if sent is not None and "retry" in sent:
        method["retry"] = sent["retry"]
    return method
