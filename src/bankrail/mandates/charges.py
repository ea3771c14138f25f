"""What a mandate lets payments take: the funds check, the constraints with what each current
period has left, the rules of a payment on a mandate (`decide_charge`; the payments are
created by payments/mandate_creation.py, the mandate row locked), and the console's overview
of mandates with their limits and payments.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bankrail.core.problems import Conflict, NotFound, invalid_field
from bankrail.core.timefmt import iso_utc
from bankrail.db.pool import Connection
from bankrail.mandates._store import MANDATE_COLUMNS, constraints_of, render
from bankrail.mandates.models import (
    MandateStatus,
    Period,
    RetryPolicy,
    balance_covers,
    remaining,
)
from bankrail.mandates.schemas import PERIODS

__all__ = [
    "COUNTED",
    "Attempt",
    "MandateCharge",
    "attempt_charge",
    "confirm_funds",
    "current_constraints",
    "decide_charge",
    "overview",
    "set_remitter_balance",
    "taken_in_periods",
]

# The payments that count against a mandate's limits: not failed, and not about to fail.
COUNTED = "status <> 'payment_failed' AND pending_failure IS NULL"


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
    """The constraints as the API reads them (`GET /v3/mandates/{id}/constraints`): each
    limit's current period with what its counted payments took (`current_amount`) and what it
    has left (`maximum_available_amount`), and its `period_alignment`."""
    constraints = constraints_of(row)
    periods = constraints.current_periods(row["authorized_at"], now)
    taken = await taken_in_periods(conn, row, periods)
    answer: dict[str, Any] = {
        "maximum_individual_amount": constraints.maximum_individual_amount,
        "periodic_limits": {
            period.value: {
                "start_date": iso_utc(start),
                "end_date": iso_utc(end),
                "current_amount": taken[period],
                "maximum_available_amount": remaining(
                    constraints.periodic_limits[period], taken[period]
                ),
                "period_alignment": constraints.periodic_limits[period].alignment.value,
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
    merchant_account_id: uuid.UUID | None  # None: the mandate pays an external account
    user_id: str
    user_details: dict[str, Any]
    provider_id: str | None
    pending_failure: str | None


def decide_charge(
    row: Any,
    amount: int,
    currency: str,
    now: datetime,
    taken: dict[Period, int],
    retry: RetryPolicy | None = None,
) -> MandateCharge:
    """Decide a payment of `amount` at `now` on the mandate `row` (the merchant's, read with
    its row locked), `taken` being what the payments that count already took in each of its
    limits' current periods (`Constraints.current_periods`). 400 (on
    `payment_method.mandate_id`) for a mandate that is not authorised, on `currency` for
    another currency; a payment outside the constraints is accepted with pending failure
    `constraint_violation`, one over the payer's balance with `insufficient_funds` unless
    it has a `retry` policy (then the balance is asked at each attempt: `attempt_charge`)."""
    if row["status"] != MandateStatus.AUTHORIZED:
        raise invalid_field(
            "payment_method.mandate_id", f"the mandate is {row['status']}, not authorized"
        )
    if currency != row["currency"]:
        raise invalid_field("currency", f"must be {row['currency']}, the mandate's currency")
    failure: str | None = None
    if not constraints_of(row).allows(amount, now, taken):
        failure = "constraint_violation"
    elif retry is None and not balance_covers(row["remitter_balance_in_minor"], amount, None):
        failure = "insufficient_funds"
    return MandateCharge(
        mandate_id=row["id"],
        merchant_account_id=row["merchant_account_id"],
        user_id=row["user_id"],
        user_details=row["user_details"],
        provider_id=row["provider_id"],
        pending_failure=failure,
    )


@dataclass(frozen=True)
class Attempt:
    """What the payer's bank did when asked to pay a payment on a mandate: paid it (both
    None), or asks to be asked again at `retry_at`, or refused it with `failure`."""

    failure: str | None = None
    retry_at: datetime | None = None


async def attempt_charge(conn: Connection, payment: Any, now: datetime) -> Attempt:
    """Ask the payer's bank (the mock provider) to pay a payment on a mandate, in the caller's
    transaction, the mandate row locked. The payer's account is simulated by the mandate's
    `remitter_balance_in_minor` (set by the bank's `Authorise`, or by the sandbox): when it
    covers the amount, keeping a smart retry's minimum, the amount is taken from it; when it
    does not, a payment with a retry policy is asked again later within its window, and any
    other fails with `insufficient_funds`, the balance untouched."""
    balance = await conn.fetchval(
        "SELECT remitter_balance_in_minor FROM mandates WHERE id = $1 FOR UPDATE",
        payment["mandate_id"],
    )
    amount = payment["amount_in_minor"]
    policy = RetryPolicy.from_stored(payment["mandate_retry"])
    if balance is not None and balance_covers(balance, amount, policy):
        await conn.execute(
            "UPDATE mandates SET remitter_balance_in_minor = $2 WHERE id = $1",
            payment["mandate_id"],
            balance - amount,
        )
        return Attempt()
    retry_at = policy.next_attempt(payment["created_at"], now) if policy else None
    if retry_at is not None:
        return Attempt(retry_at=retry_at)
    return Attempt(failure="insufficient_funds")


async def set_remitter_balance(conn: Connection, mandate_id: uuid.UUID, balance: int) -> None:
    """Set the payer's simulated balance at the mock bank (a sandbox power); 404 when there
    is no such mandate."""
    found = await conn.fetchval(
        "UPDATE mandates SET remitter_balance_in_minor = $2 WHERE id = $1 RETURNING id",
        mandate_id,
        balance,
    )
    if found is None:
        raise NotFound(f"Mandate {mandate_id} not found.")


async def overview(
    conn: Connection,
    merchant_id: uuid.UUID | None,
    now: datetime,
    *,
    limit: int = 50,
    types: frozenset[str] | None = None,
) -> list[dict[str, Any]]:
    """The newest mandates (of one merchant, or of every merchant for None; of the given
    `types`, or every type for None) for the console: each with its limits and what their
    current periods have left, and its newest payments."""
    rows = await conn.fetch(
        f"SELECT {MANDATE_COLUMNS} FROM mandates WHERE ($1::uuid IS NULL OR merchant_id = $1)"
        " AND ($3::text[] IS NULL OR type = ANY($3::text[]))"
        " ORDER BY created_at DESC, id DESC LIMIT $2",
        merchant_id,
        limit,
        sorted(types) if types is not None else None,
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
                        "remaining": current["periodic_limits"][period]["maximum_available_amount"],
                    }
                    for period in PERIODS
                    if period in limits
                ],
                "payments": [dict(payment) for payment in payments],
            }
        )
    return found
