"""Creating payments on mandates: the one path of every payment a merchant takes on a payer's
mandate (`POST /v3/payments` with `payment_method.type` `mandate`).

`create_mandate_payments` locks the requests' keys and mandates and reads their stored
answers (one statement), reads the mandates and what their limits' current periods have taken
(two statements), decides each request in order (`mandates.charges.decide_charge`, each seeing
what the batch's earlier payments took), and writes the payments, their first jobs and the
answers under their keys in one statement, through the same writer as every other payment
(`bankrail_write_payment_creations`), in the caller's transaction: this module's read, rules
and write (`STEPS`) run by the one keyed batch core (security/keyed_batch.py).
`MandatePaymentCreation` runs it as group commit within one process.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bankrail.core.ids import new_id
from bankrail.core.jsonbody import dumps
from bankrail.core.problems import IDEMPOTENCY_REUSE, ProblemType, invalid_field
from bankrail.core.timefmt import iso_utc
from bankrail.db.pool import Connection, Pool
from bankrail.mandates.models import Period, RetryPolicy
from bankrail.mandates.service import (
    COUNTED,
    MANDATE_COLUMNS,
    MandateCharge,
    constraints_of,
    decide_charge,
)
from bankrail.payments.jobs import ADVANCE_JOB, EXPIRE_JOB
from bankrail.payments.models import PaymentStatus
from bankrail.payments.schemas import PaymentRequest, PaymentRetry
from bankrail.rails.providers import find_provider
from bankrail.security.idempotency import (
    AnswersToStore,
    KeyedRequest,
    ProblemRenderer,
    key_item,
)
from bankrail.security.keyed_batch import Answer, Decided, KeyedAcceptor, decide_batch

__all__ = ["MandatePaymentCreation", "MandatePaymentToCreate", "create_mandate_payments"]

# A limit's current period on one mandate: what the payments of a batch are counted under.
_PeriodKey = tuple[uuid.UUID, datetime, datetime]


@dataclass(frozen=True)
class MandatePaymentToCreate:
    """A request for a payment on a mandate; `keyed` None: the caller stores no answer."""

    request: PaymentRequest
    merchant_id: uuid.UUID
    now: datetime
    keyed: KeyedRequest | None = None
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE
    store_client_errors: bool = True
    # The payment's resource_token for the 201 answer, given the new payment's id.
    resource_token: Callable[[uuid.UUID], str] | None = None

    @property
    def mandate_id(self) -> uuid.UUID:
        """The mandate the payment is taken on."""
        assert self.request.payment_method.mandate_id is not None
        return uuid.UUID(self.request.payment_method.mandate_id)


# A request's outcome, with the answer's JSON value when it created a payment.
Created = Decided[dict[str, Any]]


@dataclass
class _Write:
    payments: list[dict[str, Any]] = field(default_factory=list)
    taken: dict[_PeriodKey, int] = field(default_factory=dict)  # read, then the batch's own
    terms: list[dict[str, Any]] = field(default_factory=list)  # retry and user_interaction


_READ = "SELECT * FROM bankrail_read_mandate_payment_requests($1::jsonb)"
_MANDATES = f"SELECT {MANDATE_COLUMNS} FROM mandates WHERE id = ANY($1::uuid[])"
_TAKEN = (
    "SELECT x.n, (SELECT coalesce(sum(p.amount_in_minor), 0) FROM payments p"
    f" WHERE p.mandate_id = x.mandate_id AND p.created_at >= x.start AND p.created_at < x.stop"
    f" AND {COUNTED}) AS taken"
    " FROM unnest($1::uuid[], $2::timestamptz[], $3::timestamptz[])"
    " WITH ORDINALITY AS x (mandate_id, start, stop, n)"
)
_WRITE = "SELECT bankrail_write_payment_creations($1, $2, $3)"
# A payment's retry policy and the payer's presence, for the payments whose request gave them.
_TERMS = (
    "UPDATE payments p SET mandate_retry = t.retry, retry_until = t.until,"
    " user_interaction = t.user_interaction FROM jsonb_to_recordset($1::jsonb)"
    " AS t (id uuid, retry jsonb, until timestamptz, user_interaction text) WHERE p.id = t.id"
)


class _Steps:
    """The read, rules and write of payments on mandates (security/keyed_batch.py)."""

    async def read(
        self, conn: Connection, batch: Sequence[MandatePaymentToCreate]
    ) -> tuple[list[dict[str, Any]], _Write]:
        """The keys' locks and stored answers with the mandates locked (one statement),
        the mandates' rows, and what their limits' current periods have taken; each row
        carries its mandate (None: not the merchant's) and its periods."""
        claimed = await conn.fetch(_READ, [_read_item(item) for item in batch])
        found = {row["mandate_id"] for row in claimed if row["mandate_id"] is not None}
        mandates = {m["id"]: m for m in await conn.fetch(_MANDATES, list(found))} if found else {}
        rows = []
        for item, row in zip(batch, claimed, strict=True):
            mandate = mandates.get(row["mandate_id"])
            periods = _periods(mandate, item.now) if mandate is not None else {}
            rows.append({**dict(row), "mandate": mandate, "periods": periods})
        return rows, _Write(taken=await _taken(conn, [row["periods"] for row in rows]))

    async def decide(
        self, item: MandatePaymentToCreate, row: Any, write: _Write
    ) -> tuple[Answer, dict[str, Any]]:
        """`mandates.charges.decide_charge`, each request seeing what the batch's earlier
        payments took; the 201 answer and its JSON value."""
        mandate, periods = row["mandate"], row["periods"]
        request = item.request
        if mandate is None:
            raise invalid_field("payment_method.mandate_id", "no such mandate")
        taken = {period: write.taken[key] for period, key in periods.items()}
        charge = decide_charge(
            mandate,
            request.amount_in_minor,
            request.currency,
            item.now,
            taken,
            _retry_policy(request),
        )
        if charge.pending_failure is None:  # it counts against the limits from now on
            for key in periods.values():
                write.taken[key] += request.amount_in_minor
        value = _add_payment(write, item, charge)
        return (201, dumps(value)), value

    async def write(self, conn: Connection, write: _Write, answers: AnswersToStore) -> None:
        """The payments, their first jobs and the answers, in one statement, through the
        writer of every payment; then, in the same transaction, the retry policy and the
        payer's presence of the payments whose request gave them."""
        await conn.execute(_WRITE, write.payments, EXPIRE_JOB, answers.rows)
        if write.terms:  # retry and user_interaction, same transaction
            await conn.execute(_TERMS, write.terms)


STEPS = _Steps()


async def create_mandate_payments(
    conn: Connection,
    batch: Sequence[MandatePaymentToCreate],
    render_problem: ProblemRenderer | None = None,
) -> list[Created]:
    """Create payments on mandates, in the caller's transaction; a batch of one is the
    general case. Returns each request's outcome in order: the answer (a 201 with the
    payment `authorized`, or a 4xx problem: 400 on `payment_method.mandate_id` for a mandate
    that is unknown, another merchant's or not authorised, on `currency` for another
    currency), stored under its key if it has one; or a problem not stored (the key in
    flight or reused with another request, or any problem of a request without a key).

    A payment outside the mandate's constraints is accepted and then fails with
    `constraint_violation`, one over the payer's balance with `insufficient_funds`; the
    payments of one mandate, in a batch or in concurrent batches, never together exceed a
    limit."""
    return await decide_batch(conn, STEPS, batch, render_problem)


def _read_item(item: MandatePaymentToCreate) -> dict[str, Any]:
    return {
        **key_item(item.keyed),
        "merchant_id": str(item.merchant_id),
        "mandate_id": str(item.mandate_id),
    }


def _periods(mandate: Any, now: datetime) -> dict[Period, _PeriodKey]:
    """Each of the mandate's limits' current period at `now`."""
    bounds = constraints_of(mandate).current_periods(mandate["authorized_at"], now)
    return {period: (mandate["id"], start, stop) for period, (start, stop) in bounds.items()}


async def _taken(
    conn: Connection, periods: list[dict[Period, _PeriodKey]]
) -> dict[_PeriodKey, int]:
    """What the counted payments took in each of these periods (each read once)."""
    keys = list({key for item in periods for key in item.values()})
    if not keys:
        return {}
    columns = list(zip(*keys, strict=True))
    rows = await conn.fetch(_TAKEN, *(list(column) for column in columns))
    return {keys[row["n"] - 1]: int(row["taken"]) for row in rows}


def _retry_policy(request: PaymentRequest) -> RetryPolicy | None:
    """The request's retry policy (`payment_method.retry`), if it gave one."""
    retry = request.payment_method.retry
    if not isinstance(retry, PaymentRetry):  # None (a bank transfer's `{}` is refused here)
        return None
    return RetryPolicy.from_stored(retry.model_dump(by_alias=True))


def _terms(item: MandatePaymentToCreate, payment_id: uuid.UUID) -> dict[str, Any] | None:
    """The payment's retry policy and the payer's presence as stored, None when the request
    gave neither."""
    method = item.request.payment_method
    if method.retry is None and method.user_interaction is None:
        return None
    policy = _retry_policy(item.request)
    return {
        "id": str(payment_id),
        "retry": method.retry.model_dump(by_alias=True, exclude_none=True)
        if method.retry
        else None,
        "until": iso_utc(item.now + policy.window) if policy else None,
        "user_interaction": method.user_interaction,
    }


def _add_payment(
    write: _Write, item: MandatePaymentToCreate, charge: MandateCharge
) -> dict[str, Any]:
    """Add the payment's row (authorised: the mandate is the payer's authorisation) and
    return its answer."""
    request = item.request
    provider = find_provider(charge.provider_id) if charge.provider_id else None
    payment_id = new_id()
    at = iso_utc(item.now)
    status = PaymentStatus.AUTHORIZED.value
    write.payments.append(
        {
            "id": str(payment_id),
            "merchant_id": str(item.merchant_id),
            "account_id": (str(charge.merchant_account_id) if charge.merchant_account_id else None),
            "amount": request.amount_in_minor,
            "currency": request.currency,
            "user_id": charge.user_id,
            "user_details": charge.user_details,
            "selection_type": "preselected",
            "selection_filter": None,
            "provider_id": charge.provider_id,
            "scheme_id": provider.schemes[0] if provider else None,
            "metadata": request.metadata,
            "status": status,
            "created_at": at,
            "history": [{"status": status, "at": at}],
            "authorized_at": at,
            "mandate_id": str(charge.mandate_id),
            "mandate_reference": request.payment_method.reference,
            "pending_failure": charge.pending_failure,
            "job_kind": ADVANCE_JOB,
        }
    )
    terms = _terms(item, payment_id)
    if terms is not None:
        write.terms.append(terms)
    answer: dict[str, Any] = {"id": str(payment_id), "user": {"id": charge.user_id}}
    if item.resource_token is not None:
        answer["resource_token"] = item.resource_token(payment_id)
    answer["status"] = status
    return answer


class MandatePaymentCreation(KeyedAcceptor[MandatePaymentToCreate, _Write, dict[str, Any]]):
    """Group commit of requests for payments on mandates within one process
    (security/keyed_batch.py): the way `create_mandate_payments` is run for requests under an
    Idempotency-Key. `accept` hands back the answer once committed and raises the problems
    that are not stored."""

    def __init__(self, pool: Pool, render_problem: ProblemRenderer, max_batch: int = 64) -> None:
        super().__init__(pool, STEPS, render_problem, max_batch)
