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

from bankrail.core.problems import Conflict, ProblemError
from bankrail.db.pool import Connection
from bankrail.merchants.return_uris import check_return_uri
from bankrail.payments._store import (
    LOCK_PAYMENTS,
    PAYMENT_COLUMNS,
    get_payment_document,
    get_payment_row,
    lock_payment,
    save,
    state_of,
)
from bankrail.payments.authorization import (
    bank_action,
    give_consent,
    next_action,
    offered_providers,
    provider_token,
    redirect_back,
    resource_from_return,
    select_provider,
    start_authorization,
    submit_form,
)
from bankrail.payments.creation import PaymentToCreate, create_payments, return_uris
from bankrail.payments.jobs import ADVANCE_JOB, EXPIRE_JOB, advance_payment, expire_payment
from bankrail.payments.mandate_creation import MandatePaymentToCreate, create_mandate_payments
from bankrail.payments.models import CANCELLABLE, FailureReason
from bankrail.payments.schemas import PaymentRequest

__all__ = [
    "ADVANCE_JOB",
    "EXPIRE_JOB",
    "LOCK_PAYMENTS",
    "PAYMENT_COLUMNS",
    "advance_payment",
    "bank_action",
    "cancel_payment",
    "create_payment",
    "expire_payment",
    "get_payment_document",
    "get_payment_row",
    "give_consent",
    "lock_payment",
    "next_action",
    "offered_providers",
    "provider_token",
    "redirect_back",
    "require_allowed_creation_return_uris",
    "resource_from_return",
    "select_provider",
    "start_authorization",
    "state_of",
    "submit_form",
]


async def create_payment(
    conn: Connection, merchant_id: uuid.UUID, request: PaymentRequest, now: datetime
) -> dict[str, Any]:
    """Record a new payment awaiting authorisation, in the caller's transaction, through the
    one path that creates them (`creation.create_payments`, a batch of one); 400/404 for a
    bad request.

    A payment on a mandate is created by its own path (`mandate_creation`, a batch of one):
    it is recorded `authorized` with no payer journey, and its next step executes it, or
    fails it with the failure decided now."""
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
    [(outcome, value)] = await create_mandate_payments(
        conn, [MandatePaymentToCreate(request, merchant_id, now)]
    )
    if isinstance(outcome, ProblemError):
        raise outcome
    assert value is not None
    return {"id": uuid.UUID(value["id"]), "user_id": value["user"]["id"], "status": value["status"]}


async def require_allowed_creation_return_uris(
    conn: Connection, merchant_id: uuid.UUID, request: PaymentRequest
) -> None:
    """Production mode: 400 naming the field unless the merchant's allowed return URIs cover
    every return URI the creation names (`authorization_flow.redirect`, `hosted_page`), as
    when the journey starts later."""
    for field, uri in return_uris(request):
        await check_return_uri(conn, merchant_id, uri, field, allow_listed_only=True)


async def cancel_payment(conn: Connection, row: Any, now: datetime) -> None:
    """The merchant cancels: fails with `canceled` at the current status."""
    state = state_of(row)
    if state.status not in CANCELLABLE:
        raise Conflict(f"A payment that is {state.status} can no longer be cancelled.")
    await save(conn, row, state.fail(now, FailureReason.CANCELED), now, bank_action="Cancel")
