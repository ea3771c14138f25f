"""Accepting refunds: the one path of every refund, whatever asks for it (the API, the
console).

`accept_refunds` reads what the rules need for a batch of requests in one statement (the
keys' locks and stored answers, the payments with their rows locked, the accounts that
received them with their ledger rows locked and their balances), decides each request in
order (`models.check_refundable` on what is left after the batch's earlier refunds, then the
hold on what is left available), and writes the refunds, their first jobs, the payments'
refunded amounts, the answers under their keys, the holds and the balance notifications in
one statement, in the caller's transaction: this module's read, rules and write (`STEPS`)
run by the one keyed batch core (security/keyed_batch.py). `RefundAcceptance` runs it as
group commit within one process.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bankrail.core.ids import new_id
from bankrail.core.jsonbody import dumps
from bankrail.core.problems import IDEMPOTENCY_REUSE, Conflict, NotFound, ProblemType
from bankrail.db.pool import Connection, Pool
from bankrail.ledger.movements import REFUND
from bankrail.merchants.batch_holds import BatchHolds
from bankrail.merchants.models import AccountFacts
from bankrail.rails.lifecycle import FailureReason
from bankrail.rails.schemes import scheme_for
from bankrail.refunds.models import RefundablePayment, check_refundable
from bankrail.security.idempotency import (
    AnswersToStore,
    KeyedRequest,
    ProblemRenderer,
    key_item,
)
from bankrail.security.keyed_batch import Answer, Decided, KeyedAcceptor, decide_batch

__all__ = ["ADVANCE_JOB", "RefundAcceptance", "RefundToAccept", "accept_refunds"]

ADVANCE_JOB = "refund.advance"


@dataclass(frozen=True)
class RefundToAccept:
    """A request to refund part or all of a merchant's payment. `keyed` None: the caller
    stores no answer; `store_client_errors` False: a 4xx is raised, not stored (the console
    shows it on its form and lets the merchant try again under the same key)."""

    merchant_id: uuid.UUID
    payment_id: uuid.UUID
    amount: int | None  # None: all that is left to refund
    reference: str
    metadata: dict[str, str] | None
    now: datetime
    keyed: KeyedRequest | None = None
    store_client_errors: bool = True
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE


@dataclass
class _Write:
    """The rows of one batch's write (`bankrail_write_refund_acceptances`)."""

    refunds: list[dict[str, Any]] = field(default_factory=list)
    refunded: dict[uuid.UUID, int] = field(default_factory=dict)  # payment: amount added
    holds: BatchHolds = field(default_factory=lambda: BatchHolds(REFUND))


_READ = "SELECT * FROM bankrail_read_refund_requests($1::jsonb)"
_WRITE = "SELECT bankrail_write_refund_acceptances($1, $2, $3, $4, $5, $6, $7)"


class _Steps:
    """Refund acceptance's read, rules and write (security/keyed_batch.py)."""

    async def read(
        self, conn: Connection, batch: Sequence[RefundToAccept]
    ) -> tuple[list[Any], _Write]:
        """The keys' locks and stored answers, the payments with their rows locked, the
        accounts that received them with their ledger rows locked and their balances."""
        return await conn.fetch(_READ, [_read_item(item) for item in batch]), _Write()

    async def decide(
        self, item: RefundToAccept, row: Any, write: _Write
    ) -> tuple[Answer, uuid.UUID]:
        """`models.check_refundable` on what is left after the batch's earlier refunds, then
        the hold on what is left available; the 201 answer and the new refund's id."""
        refund_id, account, amount = _check(item, row, write)
        _add_refund(write, item, refund_id, account, amount)
        return (201, dumps({"id": str(refund_id)})), refund_id

    async def write(self, conn: Connection, write: _Write, answers: AnswersToStore) -> None:
        """The refunds, their first jobs, the payments' refunded amounts, the answers, the
        holds and the balance notifications, in one statement."""
        refunded = [{"payment_id": p, "amount": a} for p, a in write.refunded.items()]
        holds, states, events = write.holds.groups()
        await conn.execute(
            _WRITE, write.refunds, ADVANCE_JOB, refunded, answers.rows, holds, states, events
        )


STEPS = _Steps()


async def accept_refunds(
    conn: Connection, batch: Sequence[RefundToAccept], render_problem: ProblemRenderer
) -> list[Decided[uuid.UUID]]:
    """Accept refunds, in the caller's transaction: the one path of every refund; a batch of
    one is the general case. Returns each request's outcome in order, with the refund it
    created (None when it created none): the answer (a 201 `{"id": ...}`, or a 4xx problem:
    404 for a payment that is not the merchant's, 409 unless it has settled, 400 on
    `amount_in_minor` for more than is left to refund), stored under its key if it has one;
    or a problem not stored (the key in flight or reused with another request, or a 4xx the
    caller does not store).

    Funds are held at once from the account that received the payment; when its available
    balance cannot cover the refund, the refund is still accepted and then fails with
    `insufficient_funds`, as a payout does.
    """
    return await decide_batch(conn, STEPS, batch, render_problem)


def _read_item(item: RefundToAccept) -> dict[str, Any]:
    return {
        **key_item(item.keyed),
        "merchant_id": str(item.merchant_id),
        "payment_id": str(item.payment_id),
    }


def _check(item: RefundToAccept, row: Any, write: _Write) -> tuple[uuid.UUID, AccountFacts, int]:
    """The new refund's id, the account it is paid from and its amount, once the rules
    allow it."""
    if row["payment_id"] is None:
        raise NotFound(f"Payment {item.payment_id} not found.")
    if row["account_id"] is None:
        raise Conflict(
            "A payment to an external account cannot be refunded: no merchant account received it."
        )
    refunded = row["refunded_amount"] + write.refunded.get(item.payment_id, 0)
    amount = check_refundable(
        RefundablePayment(row["payment_status"], row["payment_amount"], refunded), item.amount
    )
    account = AccountFacts.from_row(row)
    return new_id(), account, amount


def _add_refund(
    write: _Write, item: RefundToAccept, refund_id: uuid.UUID, account: AccountFacts, amount: int
) -> None:
    covered = write.holds.available(account) >= amount
    if covered:
        write.holds.hold(account, amount, refund_id, item.now)
    write.refunded[item.payment_id] = write.refunded.get(item.payment_id, 0) + amount
    write.refunds.append(
        {
            "id": str(refund_id),
            "merchant_id": str(item.merchant_id),
            "payment_id": str(item.payment_id),
            "account_id": str(account.id),
            "amount": amount,
            "currency": account.currency,
            "reference": item.reference,
            "metadata": item.metadata,
            "scheme": scheme_for(account.currency, False),
            "pending_failure": None if covered else FailureReason.INSUFFICIENT_FUNDS.value,
            "details": {"payment_id": str(item.payment_id), "reference": item.reference},
            "now": item.now,
        }
    )


class RefundAcceptance(KeyedAcceptor[RefundToAccept, _Write, uuid.UUID]):
    """Group commit of refund requests within one process (security/keyed_batch.py): the way
    `accept_refunds` is run. `accept_created` hands back the answer once committed with the
    refund it created (None for a replayed answer), and raises the problems that are not
    stored."""

    def __init__(self, pool: Pool, render_problem: ProblemRenderer, max_batch: int = 64) -> None:
        super().__init__(pool, STEPS, render_problem, max_batch)
