"""Running a merchant account's sweep (`merchants.sweeping.SWEEP_JOB`): at the end of each
period, the available balance above the account's maximum is paid out to its sweeping IBAN.

The sweep is a payout like any other: it is accepted by `acceptance.accept_payouts`, the one
path of every payout created (funds held, ledger, events and `payout_executed` /
`payout_failed` webhooks as for any v3 payout), with `context_code` `internal` and the
reference `sweep`. Its idempotency key names the account and the period, so a period is
swept at most once.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from bankrail.core.jsonbody import dumps
from bankrail.core.problems import ProblemError
from bankrail.core.timefmt import parse_timestamp
from bankrail.db.pool import Connection
from bankrail.merchants import sweeping
from bankrail.merchants.models import MerchantAccount
from bankrail.merchants.service import get_account
from bankrail.payouts.acceptance import Keyed, accept_payouts
from bankrail.payouts.models import OPEN_LOOP_FIELD, PayoutRequest
from bankrail.payouts.service import beneficiary_identifiers

__all__ = ["SWEEP_REFERENCE", "run_sweep"]

log = logging.getLogger(__name__)

SWEEP_REFERENCE = "sweep"
_KEY_TTL = timedelta(days=30)


def sweep_request(
    account: MerchantAccount, destination: str, amount: int, now: datetime
) -> PayoutRequest:
    """The payout that sweeps `amount` from `account` to `destination`."""
    beneficiary = {
        "type": "external_account",
        "reference": SWEEP_REFERENCE,
        "account_holder_name": account.account_holder_name,
        "account_identifier": {"type": "iban", "iban": destination},
    }
    return PayoutRequest(
        api="v3",
        merchant_id=account.merchant_id,
        account_id=account.id,
        currency=account.currency,
        amount=amount,
        beneficiary=beneficiary,
        identifiers=beneficiary_identifiers(beneficiary, OPEN_LOOP_FIELD),
        field=OPEN_LOOP_FIELD,
        reference=SWEEP_REFERENCE,
        context_code="internal",
        now=now,
    )


def _keyed(request: PayoutRequest, period_end: datetime) -> Keyed:
    key = f"sweep:{request.account_id}:{period_end.isoformat()}"
    return Keyed(
        request,
        scope=f"v3:{request.merchant_id}",
        key=key,
        fingerprint=hashlib.sha256(key.encode()).digest(),
        ttl=_KEY_TTL,
        store_client_errors=False,
    )


def _unstored(problem: ProblemError) -> bytes:
    return dumps({"title": problem.problem.title})


async def run_sweep(
    conn: Connection, payload: dict[str, Any], now: datetime, *, generated: bool
) -> None:
    """Sweep the period that ends at the payload's `period_end` (a job handler, in the job's
    transaction): pay the available balance above the maximum to the destination, then
    schedule the next period's sweep. A stale job (settings changed or deleted since) does
    nothing; `generated` lets an account without an approved IBAN use its sandbox one."""
    account = await get_account(conn, uuid.UUID(payload["merchant_account_id"]))
    if account is None:
        return
    period_end = parse_timestamp(payload["period_end"])
    settings = await sweeping.due_sweep(conn, account, period_end)
    if settings is None:
        return
    approved = await sweeping.approved_destination(conn, account)
    destination = sweeping.destination_of(account, approved, generated)
    excess = account.available_balance - settings.max_amount_in_minor
    if destination is not None and excess > 0:
        keyed = _keyed(sweep_request(account, destination, excess, now), period_end)
        (outcome,) = await accept_payouts(conn, [keyed], _unstored)
        if isinstance(outcome, ProblemError):
            log.warning("sweep of %s refused: %s", account.id, outcome.problem.title)
    await sweeping.start_next_period(conn, account, settings, now)
