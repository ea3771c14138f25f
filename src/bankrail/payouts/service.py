"""Accepting payouts and moving them through the simulated rails, in PostgreSQL.

Acceptance (`accept_payouts`, the one path of every payout created) screens the beneficiary
and holds the funds in the transaction that stores the answer, so `available_balance_in_minor`
falls at once and concurrent payouts can never overdraw. Each
later step runs as a durable job in the transaction that also records its ledger postings and
its events: a crash between steps resumes after restart, and no step happens twice.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from bankrail.core.iban import normalise_iban
from bankrail.core.ids import new_id
from bankrail.core.jsonbody import dumps
from bankrail.core.problems import (
    IDEMPOTENCY_CONCURRENCY,
    IDEMPOTENCY_REUSE,
    NotFound,
    ProblemError,
    ProblemType,
)
from bankrail.core.timefmt import iso_utc, iso_utc_7
from bankrail.db.pool import Connection, Pool
from bankrail.events import notifications
from bankrail.events.outbox import NewEvent, Ordering, new_event
from bankrail.merchants.models import AccountIdentifiers
from bankrail.payouts.models import (
    REJECTIONS,
    AccountFacts,
    Advance,
    FailureReason,
    NewPayout,
    PayoutFacts,
    PayoutRequest,
    PayoutState,
    SourceFacts,
    Stage,
    advance,
    decide_payout,
    v1_reason,
)
from bankrail.rails.schemes import sandbox_outcome, scheme_for
from bankrail.rails.screening import normalise_name
from bankrail.security.idempotency import Decision, StoredAnswer, decide, lock_key

ADVANCE_JOB = "payout.advance"


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
    closed-loop one."""
    if beneficiary["type"] == "payment_source":
        return None
    try:
        return external_identifiers(beneficiary["account_identifier"], field)
    except ProblemError as problem:
        return problem


@dataclass(frozen=True)
class Keyed:
    """A payout request under its idempotency key: what identifies it, how long its answer
    stays valid, what a reuse is answered, and whether 4xx answers are stored (v1 does not
    take a transaction_id for a request it refused)."""

    request: PayoutRequest
    scope: str
    key: str
    fingerprint: bytes
    ttl: timedelta
    answer: dict[str, Any] | None = None  # the 202 body; None: {"id": <payout id>}
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE
    store_client_errors: bool = True


# An answer to send (status, body) or a problem to raise, unstored.
Outcome = tuple[int, bytes] | ProblemError
RenderProblem = Callable[[ProblemError], bytes]


def _read_item(keyed: Keyed) -> dict[str, Any]:
    request = keyed.request
    payee = request.payee_identifiers
    item: dict[str, Any] = {
        "lock_key": lock_key(keyed.scope, keyed.key),
        "scope": keyed.scope,
        "key": keyed.key,
        "merchant_id": str(request.merchant_id),
        "account_id": str(request.account_id) if request.account_id else None,
        "currency": request.currency,
    }
    if request.closed_loop:
        item["source_id"] = request.beneficiary["payment_source_id"]
        item["user_id"] = request.beneficiary["user_id"]
    elif payee is not None:
        item["iban"] = payee.iban or None
        item["sort_code"] = payee.sort_code
        item["account_number"] = payee.account_number
        item["normalised_name"] = normalise_name(request.beneficiary["account_holder_name"])
    return item


def _facts(row: Any) -> PayoutFacts:
    account = None
    if row["account_id"] is not None:
        account = AccountFacts(
            id=row["account_id"],
            merchant_id=row["account_merchant_id"],
            currency=row["account_currency"],
            available_ledger_id=row["available_ledger_id"],
            held_ledger_id=row["held_ledger_id"],
            balance_threshold=row["balance_threshold"],
            notification_state=row["notification_state"],
            available=row["available"],
            held=row["held"],
        )
    source = None
    screened = bool(row["screened"])
    if row["source_id"] is not None:
        identifiers = AccountIdentifiers(
            row["source_iban"] or "", row["source_sort_code"], row["source_account_number"]
        )
        source = SourceFacts(
            row["source_id"], row["source_user_id"], row["source_name"], identifiers
        )
        screened = normalise_name(row["source_name"]) in (row["screening_names"] or ())
    payee = (row["payee_id"], row["payee_currency"]) if row["payee_id"] is not None else None
    return PayoutFacts(account=account, source=source, payee=payee, screened=screened)


@dataclass
class _Write:
    """The rows of one batch's write (`bankrail_write_payout_acceptances`)."""

    payouts: list[dict[str, Any]] = field(default_factory=list)
    answers: list[tuple[str, str, bytes, int, bytes, datetime]] = field(default_factory=list)
    holds: list[tuple[uuid.UUID, uuid.UUID, int, int, int, datetime]] = field(default_factory=list)
    states: dict[uuid.UUID, str] = field(default_factory=dict)
    events: list[tuple[NewEvent, datetime]] = field(default_factory=list)

    def arguments(self) -> list[Any]:
        answers = list(zip(*self.answers, strict=True)) or [()] * 6
        holds = list(zip(*self.holds, strict=True)) or [()] * 6
        events = [e for e, _ in self.events]
        return [
            self.payouts,
            ADVANCE_JOB,
            *(list(column) for column in answers),
            *(list(column) for column in holds),
            list(self.states),
            list(self.states.values()),
            [e.id for e in events],
            [e.delivery_id for e in events],
            [e.merchant_id for e in events],
            [e.family for e in events],
            [e.event_type for e in events],
            [e.payload for e in events],
            [at for _, at in self.events],
        ]


_READ = "SELECT * FROM bankrail_read_payout_requests($1::jsonb)"
_WRITE = "SELECT bankrail_write_payout_acceptances({})".format(
    ", ".join(f"${i}" for i in range(1, 24))
)


async def accept_payouts(
    conn: Connection, batch: Sequence[Keyed], render_problem: RenderProblem
) -> list[Outcome]:
    """Accept payout requests, in the caller's transaction: the one path of every payout
    created, whatever its API; a batch of one is the general case.

    One statement reads what every rule needs (the keys' locks and stored answers, the paying
    accounts with their ledger rows locked and their balances, payment sources, payees at
    Bankrail, screening hits); the rules decide each request in order (`models.decide_payout`,
    each request seeing the holds of those before it); one statement writes the payouts,
    their first jobs, the answers stored under their keys, the holds, and the balance
    notifications the holds cause. Returns each request's outcome, in order: the answer
    (stored under its key: a 202, or a 4xx problem), or a problem not stored (the key in
    flight, reused with another request, or a v1 client error).
    """
    rows = await conn.fetch(_READ, [_read_item(keyed) for keyed in batch])
    write = _Write()
    outcomes: list[Outcome] = []
    left: dict[uuid.UUID, tuple[int, int, str]] = {}  # available, held, notification state
    for keyed, row in zip(batch, rows, strict=True):
        outcomes.append(_decide(keyed, row, write, left, render_problem))
    await conn.execute(_WRITE, *write.arguments())
    return outcomes


def _decide(
    keyed: Keyed,
    row: Any,
    write: _Write,
    left: dict[uuid.UUID, tuple[int, int, str]],
    render_problem: RenderProblem,
) -> Outcome:
    request = keyed.request
    now = request.now
    if not row["locked"]:
        return ProblemError(
            IDEMPOTENCY_CONCURRENCY,
            "A request with this Idempotency-Key is still in flight; retry when it completes.",
        )
    stored = None
    if row["stored_fingerprint"] is not None:
        stored = StoredAnswer(
            row["stored_fingerprint"], row["stored_status"], row["stored_body"], row["stored_at"]
        )
    decision = decide(stored, keyed.fingerprint, now, keyed.ttl)
    if decision is Decision.REPLAY:
        assert stored is not None
        return stored.status_code, stored.body
    if decision is Decision.REUSE:
        return ProblemError(
            keyed.reuse_problem,
            "This key was already used with a different request; use a new key.",
        )
    facts = _facts(row)
    account = facts.account
    if account is not None and account.id not in left:
        left[account.id] = (account.available, account.held, account.notification_state)
    available = left[account.id][0] if account is not None else 0
    try:
        payout = decide_payout(request, facts, available, new_id())
    except ProblemError as problem:
        if problem.problem.status >= 500 or not keyed.store_client_errors:
            return problem
        answer: tuple[int, bytes] = (problem.problem.status, render_problem(problem))
    else:
        answer = (202, dumps(keyed.answer or {"id": str(payout.id)}))
        _add_payout(write, keyed, payout, left)
    write.answers.append((keyed.scope, keyed.key, keyed.fingerprint, *answer, now))
    return answer


def _add_payout(
    write: _Write,
    keyed: Keyed,
    payout: NewPayout,
    left: dict[uuid.UUID, tuple[int, int, str]],
) -> None:
    request = keyed.request
    account = payout.account
    now = request.now
    scheme = scheme_for(account.currency, payout.destination_account_id is not None)
    iban = payout.identifiers.iban or None
    write.payouts.append(
        {
            "id": str(payout.id),
            "api": request.api,
            "merchant_id": str(account.merchant_id),
            "account_id": str(account.id),
            "transaction_id": str(request.transaction_id) if request.transaction_id else None,
            "amount": request.amount,
            "currency": account.currency,
            "beneficiary": payout.beneficiary,
            "name": payout.name,
            "iban": iban,
            "sort_code": payout.identifiers.sort_code,
            "account_number": payout.identifiers.account_number,
            "reference": request.reference,
            "context_code": request.context_code,
            "metadata": request.metadata,
            "scheme": scheme,
            "destination_account_id": (
                str(payout.destination_account_id) if payout.destination_account_id else None
            ),
            "pending_failure": payout.pending_failure.value if payout.pending_failure else None,
            "details": {
                "api": request.api,
                "transaction_id": str(request.transaction_id or payout.id),
                "beneficiary_name": payout.name,
                "beneficiary_iban": iban,
                "reference": request.reference,
                "context_code": request.context_code,
                "scheme_id": scheme,
            },
            "now": now,
        }
    )
    if not payout.holds_funds:
        return
    available, held, state = left[account.id]
    available, held = available - request.amount, held + request.amount
    write.holds.append(
        (
            new_id(),
            payout.id,
            account.available_ledger_id,
            account.held_ledger_id,
            request.amount,
            now,
        )
    )
    if account.balance_threshold is not None:
        step = notifications.next_state(state, account.balance_threshold, available)
        if step.state != state:
            write.states[account.id] = step.state
        state = step.state
        if step.notify is not None:
            event = new_event(
                merchant_id=account.merchant_id,
                family="payments",
                event_type="balance_notification",
                body={
                    "merchant_account_id": str(account.id),
                    "status": step.notify,
                    "threshold_in_minor": account.balance_threshold,
                    "current_balance_in_minor": available + held,
                    "available_balance_in_minor": available,
                },
            )
            write.events.append((event, now))
    left[account.id] = (available, held, state)


class PayoutAcceptance:
    """Group commit of payout requests within one process: the way `accept_payouts` is run.

    Requests that arrive while a batch is being committed wait for the next one, so under
    load each commit (one WAL flush, one lock of the merchant's ledger rows) carries many
    payouts, and with no load a request is committed at once, alone. Every answer is sent
    only after the transaction that holds it has committed. A batch that storage refuses
    (a data error, a constraint) is run again one request at a time, so that a request's
    failure is its own; any other failure (the database unreachable) is every request's.
    """

    def __init__(self, pool: Pool, render_problem: RenderProblem, max_batch: int = 64) -> None:
        self._pool = pool
        self._render_problem = render_problem
        self._max_batch = max_batch
        self._pending: list[tuple[Keyed, asyncio.Future[Outcome]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def accept(self, keyed: Keyed) -> tuple[int, bytes]:
        """The request's answer, once committed; raises the problems that are not stored."""
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._pending.append((keyed, future))
        if self._flusher is None or self._flusher.done():
            # A task of its own: a request that goes away does not cancel the others' commit.
            self._flusher = asyncio.create_task(self._flush())
        outcome = await asyncio.shield(future)
        if isinstance(outcome, ProblemError):
            raise outcome
        return outcome

    async def _flush(self) -> None:
        while self._pending:
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            try:
                await self._commit(batch)
            except (asyncpg.DataError, asyncpg.IntegrityConstraintViolationError) as exc:
                # A row of one request that storage refuses (a balance at the edge of the
                # 64-bit range): each request alone, so that the failure is its own.
                if len(batch) == 1:
                    _fail(batch, exc)
                    continue
                for one in batch:
                    try:
                        await self._commit([one])
                    except Exception as alone:
                        _fail([one], alone)
            except Exception as exc:
                _fail(batch, exc)

    async def _commit(self, batch: list[tuple[Keyed, asyncio.Future[Outcome]]]) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            outcomes = await accept_payouts(
                conn, [keyed for keyed, _ in batch], self._render_problem
            )
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if not future.done():
                future.set_result(outcome)


def _fail(batch: list[tuple[Keyed, asyncio.Future[Outcome]]], exc: Exception) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)


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


def v1_event(row: Any, state: PayoutState) -> tuple[str, dict[str, Any], Ordering]:
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
