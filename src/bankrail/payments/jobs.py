"""The bank's steps of a payment, as job handlers: after authorisation it is executed, then
settled (the merchant is credited and the payment source recorded) by `advance_payment`; one
still unauthorised when its window is up fails with `expired` (`expire_payment`).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from bankrail.core.timefmt import iso_utc
from bankrail.db.pool import Connection
from bankrail.jobs.queue import enqueue
from bankrail.ledger.movements import settle_pay_in
from bankrail.mandates.charges import attempt_charge
from bankrail.merchants.activity import record_activity
from bankrail.merchants.balances import move
from bankrail.merchants.models import MerchantAccount
from bankrail.merchants.service import get_account
from bankrail.payments._store import PAYMENT_COLUMNS, save, state_of
from bankrail.payments.models import EXPIRABLE, FailureReason, PaymentState, PaymentStatus
from bankrail.payments.sources import record_payment_source
from bankrail.rails.mock_bank import remitter_for

__all__ = ["ADVANCE_JOB", "EXPIRE_JOB", "advance_payment", "expire_payment"]

ADVANCE_JOB = "payment.advance"
EXPIRE_JOB = "payment.expire"


async def advance_payment(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
    """The bank's next step after authorisation (a job handler)."""
    row = await conn.fetchrow(
        f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE id = $1 FOR UPDATE",
        uuid.UUID(payload["payment_id"]),
    )
    if row is None:
        return
    state = state_of(row)
    if state.status is PaymentStatus.AUTHORIZED:
        if row["pending_failure"]:
            # A payment on a mandate that its acceptance found outside the mandate's limits.
            reason = FailureReason(row["pending_failure"])
            await save(conn, row, state.fail(now, reason), now, pending_failure=None)
            return
        if row["bank_action"] == "RejectExecution":
            await save(conn, row, state.fail(now, FailureReason.PROVIDER_REJECTED), now)
            return
        if row["mandate_id"] is not None:
            # The payer's bank pays from the payer's balance, or asks to retry, or refuses.
            attempt = await attempt_charge(conn, row, now)
            if attempt.retry_at is not None:
                await enqueue(conn, ADVANCE_JOB, dict(payload), attempt.retry_at)
                return
            if attempt.failure is not None:
                await save(conn, row, state.fail(now, FailureReason(attempt.failure)), now)
                return
        await save(conn, row, state.execute(now), now)
        delay = int(payload.get("settlement_delay", 0))
        await enqueue(
            conn, ADVANCE_JOB, {"payment_id": str(row["id"])}, now + timedelta(seconds=delay)
        )
    elif state.status is PaymentStatus.EXECUTED:
        await _settle(conn, row, state, now)


async def _settle(conn: Connection, row: Any, state: PaymentState, now: datetime) -> None:
    if row["merchant_account_id"] is None:
        # A payment to an external account (a bank transfer to one, or a payment on a mandate
        # that pays one): the payer's bank pays the beneficiary directly; no merchant account
        # is credited, no merchant money moves, no payment source is kept.
        await save(conn, row, state.settle(now), now)
        return
    account = await get_account(conn, row["merchant_account_id"])
    assert account is not None
    remitter = remitter_for(row["user_id"], row["currency"], row["user_details"].get("name"))
    source = await record_payment_source(
        conn,
        merchant_id=row["merchant_id"],
        merchant_account_id=account.id,
        user_id=row["user_id"],
        account_holder_name=remitter.account_holder_name,
        identifiers=remitter.identifiers,
        payment_id=row["id"],
        now=now,
    )
    rail = row["scheme_id"] or "bank_transfer"
    await move(conn, settle_pay_in(account, rail, row["amount_in_minor"], row["id"]), now)
    await _record_activity(conn, row, account, source.id, now)
    await save(conn, row, state.settle(now), now, payment_source_id=source.id)


async def _record_activity(
    conn: Connection,
    row: Any,
    account: MerchantAccount,
    source_id: uuid.UUID,
    now: datetime,
) -> None:
    await record_activity(
        conn,
        item_id=row["id"],
        merchant_account_id=account.id,
        type_="payment",
        amount=row["amount_in_minor"],
        currency=row["currency"],
        status="settled",
        now=now,
        details={
            "user_id": row["user_id"],
            "provider_id": row["provider_id"],
            "scheme_id": row["scheme_id"],
            "payment_source_id": str(source_id),
            "settled_at": iso_utc(now),
        },
    )


async def expire_payment(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
    """Fail a payment still unauthorised when its 15 minutes are up (a job handler)."""
    row = await conn.fetchrow(
        f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE id = $1 FOR UPDATE",
        uuid.UUID(payload["payment_id"]),
    )
    if row is None:
        return
    state = state_of(row)
    if state.status in EXPIRABLE and now >= state.expires_at():
        await save(conn, row, state.expire(now), now)
