"""Accepting payouts and moving them through the simulated rails, in PostgreSQL.

Acceptance (in the request's transaction) screens the beneficiary and holds the funds, so
`available_balance_in_minor` falls at once and concurrent payouts can never overdraw. Each
later step runs as a durable job in the transaction that also records its ledger postings and
its events: a crash between steps resumes after restart, and no step happens twice.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from bankrail.core.ids import new_id
from bankrail.core.jsonbody import dumps
from bankrail.core.problems import InvalidParameters, NotFound, ProblemError, invalid_field
from bankrail.core.timefmt import iso_utc, iso_utc_7
from bankrail.db.pool import Connection, Pool
from bankrail.events.outbox import record_event
from bankrail.jobs.queue import enqueue
from bankrail.ledger.holds import consume_hold
from bankrail.ledger.models import InsufficientFunds
from bankrail.merchants.activity import record_activity
from bankrail.merchants.balances import hold_funds, release_hold, transfer_between_accounts
from bankrail.merchants.models import AccountIdentifiers, MerchantAccount
from bankrail.merchants.service import find_account_by_identifier, get_account
from bankrail.payments.sources import payable_source
from bankrail.payouts.models import (
    REJECTIONS,
    Advance,
    FailureReason,
    PayoutState,
    Stage,
    advance,
    v1_reason,
)
from bankrail.rails.incoming import record_internal_credit
from bankrail.rails.schemes import sandbox_outcome, scheme_for
from bankrail.rails.screening import is_screened_out, normalise_name
from bankrail.security.idempotency import lock_key
from bankrail.web.validation import normalise_iban

ADVANCE_JOB = "payout.advance"


@dataclass(frozen=True)
class Destination:
    """Where a payout goes, resolved and validated."""

    name: str
    identifiers: AccountIdentifiers
    beneficiary: dict[str, Any]
    internal_account: MerchantAccount | None


def _check_route(currency: str, identifiers: AccountIdentifiers, field: str) -> None:
    """GBP pays a UK account (sort code or GB IBAN); EUR pays a non-GB IBAN (spec 2.4.1)."""
    if identifiers.sort_code is not None:
        if currency != "GBP":
            raise invalid_field(field, "sort code and account number accounts are paid in GBP")
        return
    country = identifiers.iban[:2]
    if currency == "GBP" and country != "GB":
        raise invalid_field(field, "GBP payouts go to a UK account (sort code or GB IBAN)")
    if currency == "EUR" and country == "GB":
        raise invalid_field(field, "EUR payouts go to a non-GB IBAN")
    if currency not in ("GBP", "EUR"):
        raise invalid_field("currency", "payouts are made in GBP or EUR")


async def resolve_account(
    conn: Connection,
    source: MerchantAccount,
    currency: str,
    identifiers: AccountIdentifiers,
    field: str,
) -> MerchantAccount | None:
    """Validate the route and find the payee's Bankrail account, if it holds one."""
    _check_route(currency, identifiers, field)
    payee = await find_account_by_identifier(
        conn,
        iban=identifiers.iban or None,
        sort_code=identifiers.sort_code,
        account_number=identifiers.account_number,
    )
    if payee is None or payee.currency != currency:
        return None
    if payee.id == source.id:
        raise invalid_field(field, "a merchant account cannot pay itself")
    return payee


def external_identifiers(raw: dict[str, Any], field: str) -> AccountIdentifiers:
    """Identifiers from a validated `account_identifier` object."""
    if raw["type"] == "iban":
        return AccountIdentifiers(normalise_iban(raw["iban"], f"{field}.iban"), None, None)
    return AccountIdentifiers("", raw["sort_code"], raw["account_number"])


def iban_identifiers(raw_iban: str, field: str) -> AccountIdentifiers:
    """Identifiers for a bare IBAN (v1)."""
    return AccountIdentifiers(normalise_iban(raw_iban, field), None, None)


async def closed_loop_destination(
    conn: Connection, account: MerchantAccount, beneficiary: dict[str, Any]
) -> Destination:
    """A payment source the user paid into this account from; otherwise 400."""
    source = await payable_source(
        conn,
        merchant_account_id=account.id,
        user_id=beneficiary["user_id"],
        payment_source_id=uuid.UUID(beneficiary["payment_source_id"]),
    )
    if source is None:
        raise InvalidParameters(
            "The payment source did not pay into this merchant account for this user.",
            {
                "beneficiary.payment_source_id": [
                    "no settled payment from this user and source into this merchant account"
                ]
            },
        )
    identifiers = source.identifiers
    internal = await resolve_account(
        conn, account, account.currency, identifiers, "beneficiary.payment_source_id"
    )
    return Destination(
        name=source.account_holder_name,
        identifiers=identifiers,
        beneficiary={
            "type": "payment_source",
            "user_id": source.user_id,
            "payment_source_id": str(source.id),
            "reference": beneficiary["reference"],
            "account_holder_name": source.account_holder_name,
            "account_identifiers": identifiers.as_list(),
        },
        internal_account=internal,
    )


async def open_loop_destination(
    conn: Connection, account: MerchantAccount, currency: str, beneficiary: dict[str, Any]
) -> Destination:
    """Any external account in the payout's currency and country rules."""
    field = "beneficiary.account_identifier"
    identifiers = external_identifiers(beneficiary["account_identifier"], field)
    internal = await resolve_account(conn, account, currency, identifiers, field)
    stored = _stored_open_loop(beneficiary, identifiers)
    return Destination(beneficiary["account_holder_name"], identifiers, stored, internal)


def _stored_open_loop(
    beneficiary: dict[str, Any], identifiers: AccountIdentifiers
) -> dict[str, Any]:
    """The beneficiary as kept on an open-loop payout."""
    stored = {k: v for k, v in beneficiary.items() if v is not None}
    if stored["account_identifier"]["type"] == "iban":
        stored["account_identifier"] = {"type": "iban", "iban": identifiers.iban}
    stored["account_identifiers"] = identifiers.as_list()
    return stored


@dataclass(frozen=True)
class IdempotentRequest:
    """What identifies a keyed request for `accept_v3_payout_at_once`."""

    scope: str
    key: str
    fingerprint: bytes


class PayoutBatcher:
    """Group commit of common-case v3 payouts within one process.

    Requests that arrive while a batch is being committed wait for the next one, so under
    load each commit (one WAL flush, one lock of the merchant's ledger rows) carries many
    payouts, and with no load a payout is committed at once, alone. Every request still gets
    its 202 only after the transaction that holds its payout has committed.
    """

    def __init__(self, pool: Pool, max_batch: int = 64) -> None:
        self._pool = pool
        self._max_batch = max_batch
        self._pending: list[tuple[dict[str, Any], asyncio.Future[bool]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, item: dict[str, Any]) -> bool:
        """Commit `item` with the next batch; True when it was taken
        (`bankrail_accept_v3_payouts`, db/functions/payout_acceptance.sql)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._flusher is None or self._flusher.done():
            # A task of its own: a request that goes away does not cancel the others' commit.
            self._flusher = asyncio.create_task(self._flush())
        return await asyncio.shield(future)

    async def _flush(self) -> None:
        while self._pending:
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            try:
                taken = await self._pool.fetchval(
                    "SELECT bankrail_accept_v3_payouts($1::jsonb, $2)",
                    [item for item, _ in batch],
                    ADVANCE_JOB,
                )
            except asyncpg.PostgresError:
                # Rolled back whole (a balance at the edge of the 64-bit range, or an
                # available balance that fell below the batch's holds meanwhile): the general
                # path decides each answer.
                taken = [False] * len(batch)
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), done in zip(batch, taken, strict=True):
                if not future.done():
                    future.set_result(bool(done))


async def accept_v3_payout_at_once(
    batcher: PayoutBatcher,
    request: IdempotentRequest,
    *,
    merchant_id: uuid.UUID,
    account_id: uuid.UUID,
    currency: str,
    amount: int,
    beneficiary: dict[str, Any],
    metadata: dict[str, str] | None,
    now: datetime,
) -> bytes | None:
    """The common open-loop `POST /v3/payouts`, committed with the other requests of the
    moment in one statement (`bankrail_accept_v3_payouts`); returns the
    202 body once committed.

    None means "not the common case" and that nothing was written: the caller then takes the
    general path (`accept_payout` under `respond_once`), which applies every rule, stores
    client errors under the key, and replays or refuses a key already used.
    """
    if beneficiary["type"] != "external_account":
        return None
    field = "beneficiary.account_identifier"
    try:
        identifiers = external_identifiers(beneficiary["account_identifier"], field)
        _check_route(currency, identifiers, field)
    except ProblemError:
        return None
    payout_id = new_id()
    answer = dumps({"id": str(payout_id)})
    name: str = beneficiary["account_holder_name"]
    reference: str = beneficiary["reference"]
    scheme = scheme_for(currency, False)
    iban = identifiers.iban or None
    item = {
        "lock_key": lock_key(request.scope, request.key),
        "scope": request.scope,
        "key": request.key,
        "fingerprint": request.fingerprint.hex(),
        "answer": answer.decode(),
        "merchant_id": str(merchant_id),
        "account_id": str(account_id),
        "currency": currency,
        "amount": amount,
        "payout_id": str(payout_id),
        "ledger_transaction_id": str(new_id()),
        "beneficiary": _stored_open_loop(beneficiary, identifiers),
        "name": name,
        "normalised_name": normalise_name(name),
        "iban": iban,
        "sort_code": identifiers.sort_code,
        "account_number": identifiers.account_number,
        "reference": reference,
        "metadata": metadata,
        "scheme": scheme,
        "details": {
            "api": "v3",
            "transaction_id": str(payout_id),
            "beneficiary_name": name,
            "beneficiary_iban": iban,
            "reference": reference,
            "context_code": None,
            "scheme_id": scheme,
        },
        "now": now,
    }
    return answer if await batcher.submit(item) else None


async def accept_payout(
    conn: Connection,
    *,
    api: str,
    account: MerchantAccount,
    amount: int,
    destination: Destination,
    reference: str,
    now: datetime,
    transaction_id: uuid.UUID | None = None,
    context_code: str | None = None,
    metadata: dict[str, str] | None = None,
) -> uuid.UUID:
    """Record an accepted payout: screen the beneficiary and hold the funds now, and schedule
    its first step. Insufficient funds and AML hits are not errors here: the payout fails
    asynchronously, as the spec requires."""
    payout_id = new_id()
    pending_failure: FailureReason | None = None
    if await is_screened_out(conn, destination.name):
        pending_failure = FailureReason.BLOCKED
    else:
        try:
            async with conn.transaction():
                await hold_funds(conn, account, amount=amount, reference_id=payout_id, now=now)
        except InsufficientFunds:
            pending_failure = FailureReason.INSUFFICIENT_FUNDS
    scheme = scheme_for(account.currency, destination.internal_account is not None)
    await conn.execute(
        "INSERT INTO payouts (id, api, merchant_id, merchant_account_id, transaction_id,"
        " amount_in_minor, currency, beneficiary, beneficiary_name, beneficiary_iban,"
        " beneficiary_sort_code, beneficiary_account_number, reference, context_code, metadata,"
        " scheme_id, destination_account_id, stage, pending_failure, created_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,"
        " 'pending', $18, $19)",
        payout_id,
        api,
        account.merchant_id,
        account.id,
        transaction_id,
        amount,
        account.currency,
        destination.beneficiary,
        destination.name,
        destination.identifiers.iban or None,
        destination.identifiers.sort_code,
        destination.identifiers.account_number,
        reference,
        context_code,
        metadata,
        scheme,
        destination.internal_account.id if destination.internal_account else None,
        pending_failure.value if pending_failure else None,
        now,
    )
    await record_activity(
        conn,
        item_id=payout_id,
        merchant_account_id=account.id,
        type_="payout",
        amount=amount,
        currency=account.currency,
        status=Stage.PENDING.value,
        now=now,
        details={
            "api": api,
            "transaction_id": str(transaction_id or payout_id),
            "beneficiary_name": destination.name,
            "beneficiary_iban": destination.identifiers.iban or None,
            "reference": reference,
            "context_code": context_code,
            "scheme_id": scheme,
        },
    )
    await enqueue(conn, ADVANCE_JOB, {"payout_id": str(payout_id)}, now)
    return payout_id


# The payouts columns that `state_of`, `render_v3` and the job need.
STATE_COLUMNS = (
    "id, api, merchant_id, merchant_account_id, transaction_id, amount_in_minor, currency,"
    " beneficiary, reference, metadata, scheme_id, destination_account_id, stage,"
    " pending_failure, failure_reason, created_at, authorized_at, submitted_at, executed_at,"
    " failed_at, beneficiary_name, beneficiary_iban, context_code"
)


def state_of(row: Any) -> PayoutState:
    """The lifecycle state of a payouts row."""
    return PayoutState(
        stage=Stage(row["stage"]),
        created_at=row["created_at"],
        authorized_at=row["authorized_at"],
        submitted_at=row["submitted_at"],
        executed_at=row["executed_at"],
        failed_at=row["failed_at"],
        failure_reason=FailureReason(row["failure_reason"]) if row["failure_reason"] else None,
    )


def planned_advance(row: Any, now: datetime) -> Advance:
    """The steps a payouts row takes when its job runs at `now` (its sandbox tokens decide
    the scheme's delay and outcome)."""
    outcome = sandbox_outcome(row["reference"])
    pending_failure = row["pending_failure"]
    return advance(
        state_of(row),
        now,
        pending_failure=FailureReason(pending_failure) if pending_failure else None,
        scheme_failure=outcome.failure,
        execution_delay=timedelta(seconds=outcome.execution_delay_seconds),
    )


async def advance_payout(conn: Connection, payload: dict[str, Any], now: datetime) -> None:
    """Take the payout's next steps (a job handler; runs in the job's transaction).

    Steps that are due at once (authorisation, then submission, then execution when the
    scheme answers without delay) are taken one after the other in this one transaction,
    each with its own events, rather than as one job each: the payout goes through the same
    states and emits the same events, with one commit instead of three. `payouts.jobs` does
    the same for many payouts at a time.
    """
    row = await conn.fetchrow(
        f"SELECT {STATE_COLUMNS} FROM payouts WHERE id = $1 FOR UPDATE",
        uuid.UUID(payload["payout_id"]),
    )
    if row is None:
        return
    plan = planned_advance(row, now)
    if not plan.steps:
        return  # terminal: a duplicate job finds nothing to do
    account = await get_account(conn, row["merchant_account_id"])
    assert account is not None
    payout_id: uuid.UUID = row["id"]
    state = plan.state
    if row["api"] == "v1":
        for step in plan.steps:
            event_type, body = v1_event(row, step, now)
            await record_event(
                conn,
                merchant_id=row["merchant_id"],
                family="payouts",
                event_type=event_type,
                body=body,
                now=now,
            )
    await conn.execute(
        "UPDATE payouts SET stage = $2, authorized_at = $3, submitted_at = $4,"
        " executed_at = $5, failed_at = $6, failure_reason = $7 WHERE id = $1",
        payout_id,
        *lifecycle_columns(state),
    )
    await record_activity(
        conn,
        item_id=payout_id,
        merchant_account_id=account.id,
        type_="payout",
        amount=row["amount_in_minor"],
        currency=row["currency"],
        status=state.v3_status,
        now=now,
        details=activity_details(state),
    )
    terminal = v3_terminal_event(row, state)
    if terminal is not None:
        await record_event(
            conn,
            merchant_id=row["merchant_id"],
            family="payments",
            event_type=terminal[0],
            body=terminal[1],
            now=now,
        )
    if plan.next_step_at is not None:
        await enqueue(conn, ADVANCE_JOB, {"payout_id": str(payout_id)}, plan.next_step_at)
    # The money moves last in the transaction: the merchant's ledger rows, which every new
    # payout of the account also locks, are then held only until the commit.
    if plan.moves_money and state.stage is Stage.FAILED:
        await release_hold(
            conn, account, amount=row["amount_in_minor"], reference_id=payout_id, now=now
        )
    elif plan.moves_money:
        await _pay(conn, row, account, now)


async def _pay(conn: Connection, row: Any, account: MerchantAccount, now: datetime) -> None:
    if row["destination_account_id"] is None:
        await consume_hold(
            conn,
            account,
            amount=row["amount_in_minor"],
            rail=row["scheme_id"],
            reference_id=row["id"],
            now=now,
        )
        return
    payee = await get_account(conn, row["destination_account_id"])
    assert payee is not None
    await transfer_between_accounts(
        conn, account, payee, amount=row["amount_in_minor"], reference_id=row["id"], now=now
    )
    await record_internal_credit(
        conn,
        payee,
        transfer_id=row["id"],
        amount=row["amount_in_minor"],
        remitter_name=account.account_holder_name,
        remitter_iban=account.identifiers.iban,
        reference=row["reference"],
        now=now,
    )


def _iso(moment: datetime | None) -> str | None:
    return iso_utc(moment) if moment else None


def lifecycle_columns(state: PayoutState) -> tuple[Any, ...]:
    """The payouts columns stage, authorized_at, submitted_at, executed_at, failed_at and
    failure_reason, in that order, for `state`."""
    return (
        state.stage.value,
        state.authorized_at,
        state.submitted_at,
        state.executed_at,
        state.failed_at,
        state.failure_reason.value if state.failure_reason else None,
    )


def activity_details(state: PayoutState) -> dict[str, Any]:
    """What a payout's row in the account's activity list records of its lifecycle."""
    return {
        "authorized_at": _iso(state.authorized_at),
        "submitted_at": _iso(state.submitted_at),
        "executed_at": _iso(state.executed_at),
        "failed_at": _iso(state.failed_at),
        "failure_reason": state.failure_reason.value if state.failure_reason else None,
        "v1_status": state.v1_status,
    }


def v3_terminal_event(row: Any, state: PayoutState) -> tuple[str, dict[str, Any]] | None:
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


def v1_event(row: Any, state: PayoutState, now: datetime) -> tuple[str, dict[str, Any]]:
    """The payouts API v1 event (type and body) for a payout reaching `state` at `now`."""
    transaction_id = str(row["transaction_id"])
    stamp = iso_utc_7(now)
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
    return event_type, {"transaction_id": transaction_id, **body}


def render_v3(row: Any, state: PayoutState | None = None) -> dict[str, Any]:
    """The v3 payout record (spec 2.4)."""
    state = state or state_of(row)
    record: dict[str, Any] = {
        "id": str(row["id"]),
        "merchant_account_id": str(row["merchant_account_id"]),
        "amount_in_minor": row["amount_in_minor"],
        "currency": row["currency"],
        "beneficiary": row["beneficiary"],
        "scheme_id": row["scheme_id"],
        "status": state.v3_status,
        "created_at": iso_utc(state.created_at),
    }
    if state.authorized_at:
        record["authorized_at"] = iso_utc(state.authorized_at)
    if state.executed_at:
        record["executed_at"] = iso_utc(state.executed_at)
    if state.failed_at:
        record["failed_at"] = iso_utc(state.failed_at)
        record["failure_reason"] = state.failure_reason.value if state.failure_reason else None
    if row["metadata"] is not None:
        record["metadata"] = row["metadata"]
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
