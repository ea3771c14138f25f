"""Pay-ins in PostgreSQL: creation, the authorisation journey, the bank's steps, expiry.

Every step locks the payment row, checks the state machine, and writes its ledger postings,
activity and events in the same transaction, so a retried bank action or a duplicate job can
never settle or credit a payment twice.

This module creates and cancels payments, and is where callers find every payment use case:
it re-exports the payments row and resource (`_store`), the payer's journey and the mock
bank's decision (`authorization`), and the bank's steps after authorisation (`jobs`).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from bankrail.core.ids import new_id
from bankrail.core.problems import Conflict, ProblemError
from bankrail.core.timefmt import iso_utc
from bankrail.db.pool import Connection
from bankrail.jobs.queue import enqueue
from bankrail.mandates import service as mandates
from bankrail.payments._store import (
    PAYMENT_COLUMNS,
    get_payment_row,
    lock_payment,
    render,
    render_row,
    save,
    state_of,
)
from bankrail.payments.authorization import (
    bank_action,
    check_return_uri,
    next_action,
    offered_providers,
    payment_id_from_return,
    provider_token,
    redirect_back,
    require_allowed_return_uri,
    select_provider,
    start_authorization,
)
from bankrail.payments.creation import PaymentToCreate, create_payments
from bankrail.payments.jobs import ADVANCE_JOB, EXPIRE_JOB, advance_payment, expire_payment
from bankrail.payments.models import CANCELLABLE, FailureReason, PaymentStatus
from bankrail.payments.providers import find_provider
from bankrail.payments.schemas import PaymentRequest

__all__ = [
    "ADVANCE_JOB",
    "EXPIRE_JOB",
    "PAYMENT_COLUMNS",
    "advance_payment",
    "bank_action",
    "cancel_payment",
    "check_return_uri",
    "create_payment",
    "expire_payment",
    "get_payment_row",
    "lock_payment",
    "next_action",
    "offered_providers",
    "payment_id_from_return",
    "provider_token",
    "redirect_back",
    "render",
    "render_row",
    "require_allowed_return_uri",
    "select_provider",
    "start_authorization",
    "state_of",
]


async def create_payment(
    conn: Connection, merchant_id: uuid.UUID, request: PaymentRequest, now: datetime
) -> dict[str, Any]:
    """Record a new payment awaiting authorisation, in the caller's transaction, through the
    one path that creates them (`creation.create_payments`, a batch of one); 400/404 for a
    bad request.

    A payment on a mandate is decided here too, while the mandate row is locked (see
    `mandates.service.charge`): it is recorded `authorized` with no payer journey, and its
    next step executes it, or fails it with the failure decided now."""
    if request.payment_method.type == "mandate":
        return await _create_on_mandate(conn, merchant_id, request, now)
    [(outcome, payment)] = await create_payments(
        conn, [PaymentToCreate(request, merchant_id, now, respond=lambda _: (201, None))]
    )
    if isinstance(outcome, ProblemError):
        raise outcome
    assert payment is not None
    return {"id": payment.id, "user_id": payment.user_id, "status": payment.state.status.value}


async def _create_on_mandate(
    conn: Connection, merchant_id: uuid.UUID, request: PaymentRequest, now: datetime
) -> dict[str, Any]:
    method = request.payment_method
    assert method.mandate_id is not None
    charge = await mandates.charge(
        conn,
        merchant_id,
        uuid.UUID(method.mandate_id),
        request.amount_in_minor,
        request.currency,
        now,
    )
    provider = find_provider(charge.provider_id) if charge.provider_id else None
    payment_id = new_id()
    # The mandate is the payer's authorisation: the payment starts `authorized`.
    history = [{"status": PaymentStatus.AUTHORIZED.value, "at": iso_utc(now)}]
    await conn.execute(
        "INSERT INTO payments (id, merchant_id, merchant_account_id, amount_in_minor, currency,"
        " user_id, user_details, selection_type, provider_id, scheme_id, metadata, status,"
        " created_at, authorized_at, history, mandate_id, mandate_reference, pending_failure)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, 'preselected', $8, $9, $10, $11, $12, $12, $13,"
        " $14, $15, $16)",
        payment_id,
        merchant_id,
        charge.merchant_account_id,
        request.amount_in_minor,
        request.currency,
        charge.user_id,
        charge.user_details,
        charge.provider_id,
        provider.schemes[0] if provider else None,
        request.metadata,
        PaymentStatus.AUTHORIZED.value,
        now,
        history,
        charge.mandate_id,
        method.reference,
        charge.pending_failure,
    )
    await enqueue(conn, ADVANCE_JOB, {"payment_id": str(payment_id)}, now)
    return {"id": payment_id, "user_id": charge.user_id, "status": PaymentStatus.AUTHORIZED.value}


async def cancel_payment(conn: Connection, row: Any, now: datetime) -> None:
    """The merchant cancels: fails with `canceled` at the current status."""
    state = state_of(row)
    if state.status not in CANCELLABLE:
        raise Conflict(f"A payment that is {state.status} can no longer be cancelled.")
    await save(conn, row, state.fail(now, FailureReason.CANCELED), now, bank_action="Cancel")
