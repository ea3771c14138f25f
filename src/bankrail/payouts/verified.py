"""Verified payouts in PostgreSQL: their creation answer, and the payee's steps at the payout
page (pages/hpp_payouts.py) that take them from `authorization_required` onto the rails.

The rules are `payouts.verification`'s; this module reads and writes. A verified payout is
accepted by the one payout path (`accept_payouts`), which holds its funds; once its payee
authorises a proven account it becomes `pending` with the advance job every payout has, and
runs as any payout. A decline or a failed verification ends it `failed`, and so does the end
of its authorisation window while the payee has not acted (`expire_authorization`, the job
queued at acceptance): the hold is released and `payout_failed` is sent, in one statement.
Every way off its own stages is written by the rails' one writer of steps
(`rails.advancement.RailBatch`), as every later step is.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

from bankrail.core.ids import new_id
from bankrail.core.problems import NotFound
from bankrail.db.pool import Connection
from bankrail.events.outbox import new_event
from bankrail.ledger.movements import PAYOUT, Ledgers, release
from bankrail.merchants.balances import reevaluate_notifications
from bankrail.payouts.acceptance import ADVANCE_JOB
from bankrail.payouts.models import PayoutRequest
from bankrail.payouts.service import STATE_COLUMNS, activity_details, v3_terminal_event
from bankrail.payouts.verification import (
    AUTHORIZATION_WINDOW,
    EXPIRE_JOB,
    Outcome,
    VerifiedStage,
    authorize,
    choose_provider,
    expiry,
)
from bankrail.rails.advancement import RailBatch, step_item
from bankrail.rails.lifecycle import Advance, FailureReason, RailState, Stage
from bankrail.rails.pay_ins import KnownAccount, settled_pay_ins
from bankrail.security.tokens import TokenIssuer

# The kind of the token that opens a verified payout's page (bound to the payout).
TOKEN_KIND = "payout"  # noqa: S105 (a token type, not a secret)
# How long the payee has to open the payout page: the payout's authorisation window, at whose
# end a payout still waiting fails (`expire_authorization`).
TOKEN_TTL = AUTHORIZATION_WINDOW

__all__ = [
    "EXPIRE_JOB",
    "TOKEN_KIND",
    "TOKEN_TTL",
    "decide",
    "expire_authorization",
    "payout_row",
    "prepared",
    "start_authorizing",
]


def prepared(
    request: PayoutRequest, tokens: TokenIssuer, now: datetime
) -> tuple[PayoutRequest, dict[str, Any]]:
    """A verified payout request with its payout id and user id chosen (the user's own id
    when sent), and its 202 answer `{id, status, resource_token, user: {id}}`."""
    payout_id = new_id()
    user = request.beneficiary["user"]
    user_id = user.get("id") or str(new_id())
    beneficiary = {**request.beneficiary, "user": {**user, "id": user_id}}
    token = tokens.issue_resource_token(payout_id, now, TOKEN_TTL, kind=TOKEN_KIND)
    answer = {
        "id": str(payout_id),
        "status": VerifiedStage.AUTHORIZATION_REQUIRED.value,
        "resource_token": token,
        "user": {"id": user_id},
    }
    return replace(request, payout_id=payout_id, beneficiary=beneficiary), answer


# A verified payout with the ledger rows of its account (a failure releases its hold).
_ROW = (
    "SELECT {}, p.provider_id, ma.held_ledger_id, ma.available_ledger_id"
    " FROM payouts p JOIN merchant_accounts ma ON ma.id = p.merchant_account_id"
    " WHERE p.id = $1 AND p.beneficiary->>'type' = 'user_determined'"
).format(", ".join(f"p.{name.strip()}" for name in STATE_COLUMNS.split(",")))


async def payout_row(conn: Connection, payout_id: uuid.UUID, *, lock: bool = False) -> Any:
    """A verified payout's row (locked for the caller's transaction when `lock`); NotFound
    for any other id."""
    row = await conn.fetchrow(_ROW + (" FOR UPDATE OF p" if lock else ""), payout_id)
    if row is None:
        raise NotFound(f"Payout {payout_id} not found.")
    return row


async def start_authorizing(conn: Connection, row: Any, provider_id: str) -> Any:
    """The payee chose `provider_id`: the payout is `authorizing` at it (the row, re-read).
    Raises InvalidTransition when the payout is past that, or at another provider."""
    stage = choose_provider(row["stage"], row["provider_id"], provider_id)
    await conn.execute(
        "UPDATE payouts SET stage = $2, provider_id = $3 WHERE id = $1",
        row["id"],
        stage.value,
        provider_id,
    )
    return await payout_row(conn, row["id"])


async def decide(
    conn: Connection, row: Any, *, account: KnownAccount | None, now: datetime
) -> Outcome:
    """The payee's decision at the provider (a locked `authorizing` row, in the caller's
    transaction): authorise with `account`, or decline (None). A proven account puts the
    payout on the rails (`pending`, its job queued); otherwise it fails with the
    verification's reason."""
    beneficiary = row["beneficiary"]
    verification = beneficiary["verification"]
    pay_ins = []
    if account is not None and verification.get("transaction_search_criteria"):
        pay_ins = await settled_pay_ins(conn, row["merchant_id"], account.identifiers)
    outcome = authorize(
        row["stage"],
        verification=verification,
        user_name=beneficiary["user"]["name"],
        account=account,
        pay_ins=pay_ins,
    )
    if account is not None and outcome.stage is Stage.PENDING:
        await _to_rails(conn, row, account, now)
    else:
        await _fail(conn, row, outcome, now)
    return outcome


async def expire_authorization(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
    """Fail a verified payout whose payee has not chosen and proven an account by the end of
    its authorisation window (a job handler, in the job's transaction): `failed` with
    `expired`, its hold released and `payout_failed` sent, written together by the rails' one
    writer of steps. Nothing happens to a payout that has left its own stages (authorised
    onto the rails, or failed) or whose window is still open."""
    try:
        row = await payout_row(conn, uuid.UUID(payload["payout_id"]), lock=True)
    except NotFound:
        return  # its merchant was deleted
    pending = row["pending_failure"]
    outcome = expiry(
        row["stage"], row["created_at"], now, FailureReason(pending) if pending else None
    )
    if outcome is not None:
        await _fail(conn, row, outcome, now)


async def _to_rails(conn: Connection, row: Any, account: KnownAccount, now: datetime) -> None:
    """Hand the payout to the rails: it pays `account` and is `pending` with its advance job
    due now, written by the rails' one writer of steps like every later step."""
    ids = account.identifiers
    await conn.execute(
        "UPDATE payouts SET beneficiary_name = $2, beneficiary_iban = $3,"
        " beneficiary_sort_code = $4, beneficiary_account_number = $5 WHERE id = $1",
        row["id"],
        account.account_holder_name,
        ids.iban or None,
        ids.sort_code,
        ids.account_number,
    )
    state = RailState(Stage.PENDING, row["created_at"])
    batch = RailBatch(now)
    batch.steps.append(
        step_item(
            "payout",
            row,
            Advance(state, (state,), now, moves_money=False),
            job=ADVANCE_JOB,
            details={
                "beneficiary_name": account.account_holder_name,
                "beneficiary_iban": ids.iban or None,
            },
        )
    )
    await batch.write(conn)


async def _fail(conn: Connection, row: Any, outcome: Outcome, now: datetime) -> None:
    """End the payout `failed` with the outcome's reason, written by the rails' one writer of
    steps: its activity row, `payout_failed`, and the release of the funds held at
    acceptance (none were when it was accepted with a failure pending)."""
    assert outcome.failure_reason is not None
    state = RailState(Stage.PENDING, row["created_at"]).fail(now, outcome.failure_reason)
    held = row["pending_failure"] is None
    batch = RailBatch(now)
    batch.steps.append(
        step_item(
            "payout",
            row,
            Advance(state, (state,), None, moves_money=held),
            job=ADVANCE_JOB,
            details=activity_details(state),
        )
    )
    terminal = v3_terminal_event(row, state)
    assert terminal is not None
    event_type, body = terminal
    batch.events.append(
        new_event(
            merchant_id=row["merchant_id"], family="payments", event_type=event_type, body=body
        )
    )
    if held:
        account = Ledgers(
            row["merchant_account_id"],
            row["currency"],
            row["available_ledger_id"],
            row["held_ledger_id"],
        )
        batch.moves.append(release(account, PAYOUT, row["amount_in_minor"], row["id"]))
    await batch.write(conn)
    if held:
        await reevaluate_notifications(conn, row["merchant_account_id"], now)
