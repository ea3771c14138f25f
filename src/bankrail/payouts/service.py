"""Accepting payouts and moving them through the simulated rails, in PostgreSQL.

Acceptance (`accept_payouts` in payouts/acceptance.py, re-exported here: the one path of every
payout created) screens the beneficiary and holds the funds in the transaction that stores the
answer, so `available_balance_in_minor` falls at once and concurrent payouts can never
overdraw. This module holds the rest: a payout's identifiers, its lifecycle as the jobs record
it, and how it is shown. Each later step runs as a durable job in the transaction that also
records its ledger postings and its events: a crash between steps resumes after restart, and no
step happens twice.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from bankrail.core.iban import normalise_iban
from bankrail.core.problems import (
    NotFound,
    ProblemError,
)
from bankrail.core.timefmt import iso_utc, iso_utc_7
from bankrail.db.pool import Connection
from bankrail.events.outbox import Ordering
from bankrail.merchants.models import AccountIdentifiers
from bankrail.payouts.acceptance import ADVANCE_JOB as ADVANCE_JOB
from bankrail.payouts.acceptance import Keyed as Keyed
from bankrail.payouts.acceptance import PayoutAcceptance as PayoutAcceptance
from bankrail.payouts.acceptance import accept_payouts as accept_payouts
from bankrail.payouts.models import v1_reason, v1_status
from bankrail.payouts.schemas import V3PayoutRequest
from bankrail.payouts.verification import BEFORE_RAILS
from bankrail.rails.lifecycle import (
    REJECTIONS,
    RailState,
    Stage,
    state_of,
)


def external_identifiers(raw: dict[str, Any], field: str) -> AccountIdentifiers:
    """Identifiers from a validated `account_identifier` object."""
    if raw["type"] == "iban":
        return AccountIdentifiers(normalise_iban(raw["iban"], f"{field}.iban"), None, None)
    return AccountIdentifiers("", raw["sort_code"], raw["account_number"])


def iban_identifiers(raw_iban: str, field: str) -> AccountIdentifiers:
    """Identifiers for a bare IBAN (v1)."""
    return AccountIdentifiers(normalise_iban(raw_iban, field), None, None)


def beneficiary_identifiers(
    beneficiary: dict[str, Any], field: str
) -> AccountIdentifiers | ProblemError | None:
    """An open-loop beneficiary's identifiers, normalised, or the problem that normalising
    them raises (reported in the rules' order, `models.decide_payout`); None for a
    closed-loop or verified one."""
    if beneficiary["type"] in ("payment_source", "user_determined"):
        return None
    try:
        return external_identifiers(beneficiary["account_identifier"], field)
    except ProblemError as problem:
        return problem


def request_options(body: V3PayoutRequest) -> dict[str, Any]:
    """The `PayoutRequest` fields of a v3 request's optional `scheme_selection` and
    `sub_merchants`, as sent less their null members (None: not sent)."""
    return {
        name: value.model_dump(exclude_none=True) if value is not None else None
        for name, value in (
            ("scheme_selection", body.scheme_selection),
            ("sub_merchants", body.sub_merchants),
        )
    }


# The payouts columns that `state_of`, `render_v3` and the job need.
STATE_COLUMNS = (
    "id, api, merchant_id, merchant_account_id, transaction_id, amount_in_minor, currency,"
    " beneficiary, reference, metadata, scheme_id, destination_account_id, stage,"
    " pending_failure, failure_reason, created_at, authorized_at, submitted_at, executed_at,"
    " failed_at, beneficiary_name, beneficiary_iban, context_code, scheme_selection,"
    " sub_merchants"
)


def _iso(moment: datetime | None) -> str | None:
    return iso_utc(moment) if moment else None


def activity_details(state: RailState) -> dict[str, Any]:
    """What a payout's row in the account's activity list records of its lifecycle."""
    return {
        "authorized_at": _iso(state.authorized_at),
        "submitted_at": _iso(state.submitted_at),
        "executed_at": _iso(state.executed_at),
        "failed_at": _iso(state.failed_at),
        "failure_reason": state.failure_reason.value if state.failure_reason else None,
        "v1_status": v1_status(state),
    }


def v3_terminal_event(row: Any, state: RailState) -> tuple[str, dict[str, Any]] | None:
    """The `payout_executed` or `payout_failed` event (type and body) of a v3 payout that
    has reached `state`; None for v1 payouts and states that are not terminal."""
    if row["api"] != "v3" or state.stage not in (Stage.EXECUTED, Stage.FAILED):
        return None
    record = render_v3(row, state)
    body: dict[str, Any] = {
        "payout_id": record["id"],
        "merchant_account_id": record["merchant_account_id"],
        "scheme_id": record["scheme_id"],
        "beneficiary": record["beneficiary"],
        "metadata": record.get("metadata") or {},
    }
    if state.stage is Stage.EXECUTED:
        body["executed_at"] = record["executed_at"]
        return "payout_executed", body
    body["failed_at"] = record["failed_at"]
    body["failure_reason"] = record["failure_reason"]
    return "payout_failed", body


def v1_event(row: Any, state: RailState) -> tuple[str, dict[str, Any], Ordering]:
    """The payouts API v1 event for a payout reaching `state`: its type, its body (dated
    when the state was reached, as the transaction record is), and its place among the
    payout's events, which are delivered in that order."""
    transaction_id = str(row["transaction_id"])
    stamp = iso_utc_7(state.step_at)
    if state.stage is Stage.AUTHORIZED:
        event_type, body = "payout_authorised", {"authorised_at": stamp}
    elif state.stage is Stage.SUBMITTED:
        event_type, body = "payout_submitted", {"submitted_at": stamp}
    elif state.stage is Stage.EXECUTED:
        event_type, body = "payout_settled", {"settled_at": stamp}
    else:
        assert state.failure_reason is not None
        reason = v1_reason(state.failure_reason)
        if state.failure_reason in REJECTIONS:
            event_type, body = "payout_rejected", {"rejected_at": stamp, "reason": reason}
        else:
            event_type, body = "payout_failed", {"failed_at": stamp, "reason": reason}
    ordering = Ordering(row["id"], state.event_sequence)
    return event_type, {"transaction_id": transaction_id, **body}, ordering


def render_v3(row: Any, state: RailState | None = None) -> dict[str, Any]:
    """The v3 payout record (spec 2.4); a verified payout waiting for its payee shows its
    own stage (`authorization_required`, `authorizing`) as its status."""
    waiting = state is None and row["stage"] in BEFORE_RAILS
    if state is None:
        state = RailState(Stage.PENDING, row["created_at"]) if waiting else state_of(row)
    record: dict[str, Any] = {
        "id": str(row["id"]),
        "merchant_account_id": str(row["merchant_account_id"]),
        "amount_in_minor": row["amount_in_minor"],
        "currency": row["currency"],
        "beneficiary": row["beneficiary"],
        "scheme_id": row["scheme_id"],
        "status": row["stage"] if waiting else state.v3_status,
        "created_at": iso_utc(state.created_at),
    }
    if state.authorized_at:
        record["authorized_at"] = iso_utc(state.authorized_at)
    if state.executed_at:
        record["executed_at"] = iso_utc(state.executed_at)
    if state.failed_at:
        record["failed_at"] = iso_utc(state.failed_at)
        record["failure_reason"] = state.failure_reason.value if state.failure_reason else None
    for optional in ("metadata", "scheme_selection", "sub_merchants"):
        if row[optional] is not None:
            record[optional] = row[optional]
    return record


async def get_v3_payout(
    conn: Connection, payout_id: uuid.UUID, merchant_id: uuid.UUID
) -> dict[str, Any]:
    """The caller's payout; another merchant's is 404."""
    row = await conn.fetchrow(
        f"SELECT {STATE_COLUMNS} FROM payouts WHERE id = $1 AND merchant_id = $2",
        payout_id,
        merchant_id,
    )
    if row is None:
        raise NotFound(f"Payout {payout_id} not found.")
    return render_v3(row)
