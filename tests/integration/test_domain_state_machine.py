"""Model-based test of the money domain on real PostgreSQL (issue 8, point 3).

A Hypothesis `RuleBasedStateMachine` drives the service layer the routes and workers use (top-ups
through `rails.incoming`, v3 payouts through `payouts.service`, pay-ins through
`payments.service` and the mock bank's decisions, thresholds through `merchants.service` and
`merchants.balances`, durable jobs through `jobs.queue.JobQueue`, time through
`core.clock.ServiceClock`) and keeps its own plain-Python model of what must be true.

The promise: whatever the sequence of top-ups, payouts (sandbox failures, delays, insufficient
funds, screened beneficiaries, internal transfers, refunds), pay-ins (executed, settled,
rejected, cancelled, expired), threshold changes and clock advances, after EVERY step

- the ledger is clean (`check_ledger`: each transaction sums to zero, balances equal their
  postings, nothing that may not go negative is negative);
- each account's current and available balances equal the model's, are never negative, and
  available <= current;
- every payout and payment has the status the model expects, and its ledger effects happened
  exactly as often as the model says (a hold at most once, a release only on failure, an
  execution at most once and only for executed payouts, a credit only for settled pay-ins);
- the events written are exactly those the model expects, and the balance notifications
  (`approaching_threshold`, `below_threshold`, `recovered`) were emitted exactly when the
  available balance history crosses the bounds of docs/api.md, with the balances of that moment;
- the durable job queue holds exactly the jobs the model expects, none failing, and every job
  the model says is due runs when the queue is drained.

Bounded by default (`BANKRAIL_MODEL_EXAMPLES` examples of `BANKRAIL_MODEL_STEPS` steps, 25 and
30); raise both for a longer run, e.g. `BANKRAIL_MODEL_EXAMPLES=500 BANKRAIL_MODEL_STEPS=60`.

The async service runs on an event loop in a thread this test owns, with its own pool on a fresh
database, so the synchronous state machine never touches pytest's event loop.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

import asyncpg
import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from bankrail.core.clock import ServiceClock
from bankrail.core.powers import SANDBOX
from bankrail.core.problems import Conflict, InvalidParameters, ProblemError
from bankrail.db.pool import create_pool
from bankrail.jobs.queue import JobQueue
from bankrail.ledger.service import check_ledger
from bankrail.merchants.balances import reevaluate_notifications
from bankrail.merchants.models import MerchantAccount
from bankrail.merchants.service import (
    create_merchant,
    create_merchant_account,
    get_account,
    set_balance_threshold,
)
from bankrail.payments import service as payments
from bankrail.payments.models import AUTHORIZATION_WINDOW
from bankrail.payments.schemas import PaymentRequest
from bankrail.payouts import service as payouts
from bankrail.payouts.jobs import advance_payout
from bankrail.rails.incoming import IncomingTransfer, receive_transfer
from bankrail.rails.screening import replace_screening_list
from support.accounts import EXTERNAL_SORT_CODE, sort_code_beneficiary
from support.databases import drop_database, fresh_database
from support.payouts import payout_request, render_problem

pytestmark = pytest.mark.slow  # Hypothesis runs many step sequences

T = TypeVar("T")

EXAMPLES = int(os.environ.get("BANKRAIL_MODEL_EXAMPLES", "25"))
STEPS = int(os.environ.get("BANKRAIL_MODEL_STEPS", "30"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    database=None,  # no example files in the work tree; failures print their own sequence
    report_multiple_bugs=False,  # shrink one failure to its minimal sequence, not several
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# Service time moves in units of 15 minutes: the payment authorisation window is one unit and
# every sandbox delay is a whole number of units. A unit is far longer than an example runs, so
# the wall time that passes between steps can never decide whether something is due: a step is
# due once the clock has been advanced by its units, and not a moment before.
UNIT = 900
DELAY_UNITS = 4  # `delay:3600` and the mock bank's 3 600 s delays
SCREENED_NAME = "Model Sanctioned Person"
PROVIDER = "mock-payments-gb-redirect"
RETURN_URI = "https://merchant.example/return"

NORMAL, APPROACHING, BELOW, RECOVERED = (
    "normal",
    "approaching_threshold",
    "below_threshold",
    "recovered",
)
CANCELLABLE = {"authorization_required", "authorizing", "authorized"}
EXPIRABLE = {"authorization_required", "authorizing"}

ACCOUNTS = st.sampled_from([0, 1])
AMOUNTS = st.integers(min_value=1, max_value=4_000)
OPENING_BALANCES = st.sampled_from([0, 3_000, 10_000])
THRESHOLDS = st.sampled_from([None, 500, 1_000, 2_500])
# Success is listed twice (sampled_from draws uniformly): most payouts and pay-ins go through.
OUTCOMES = st.sampled_from(
    ["", "", "fail:scheme_error", "fail:server_error", "fail:invalid_iban", "delay:3600"]
)
DESTINATIONS = st.sampled_from(["external", "external", "internal", "screened"])
BANK_ACTIONS = st.sampled_from(
    ["Execute", "Execute", "RejectAuthorisation", "RejectExecution", "Cancel"]
)
BANK_DELAYS = st.sampled_from([0, DELAY_UNITS])


# --- the event loop the service runs on ------------------------------------------------------


class LoopThread:
    """An event loop in a thread of its own; `run` waits for one coroutine, with a deadline."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="model-loop", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the model's event loop did not stop"


@dataclass
class Env:
    """What every example shares: the loop, the pool on the test's database, clock, queue."""

    loop: LoopThread
    pool: asyncpg.Pool
    clock: ServiceClock
    queue: JobQueue

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run(coro)


# --- the model ---------------------------------------------------------------------------------


@dataclass
class AccountModel:
    account: MerchantAccount
    available: int = 0
    held: int = 0
    threshold: int | None = None
    state: str = NORMAL
    # (status, threshold, current, available) of each balance notification, in order.
    notifications: list[tuple[str, int, int, int]] = field(default_factory=list)

    @property
    def current(self) -> int:
        return self.available + self.held


@dataclass
class PayoutModel:
    account: int
    amount: int
    payee: int | None  # the other Bankrail account, for an internal transfer
    failure: str | None  # the sandbox failure chosen by the reference
    delay_units: int
    pending_failure: str | None
    due: int | None  # service time (units) of the next step, None once finished
    stage: str = "pending"
    failure_reason: str | None = None


@dataclass
class PaymentModel:
    account: int
    amount: int
    user_id: str
    due: int | None  # service time (units) of the next step the queue takes (expiry first)
    status: str = "authorization_required"
    failure_stage: str | None = None
    failure_reason: str | None = None
    action: str | None = None
    settle_units: int = 0


def notification_step(state: str, threshold: int | None, available: int) -> tuple[str, str | None]:
    """docs/api.md, written out again: normal -> approaching at <= 1.5 T, -> below at <= T (one
    notification for the state reached); below -> normal with `recovered` at >= 2 T; from
    approaching, >= 2 T returns quietly to normal."""
    if threshold is None:
        return NORMAL, None
    if state == BELOW:
        return (NORMAL, RECOVERED) if available >= 2 * threshold else (BELOW, None)
    if available <= threshold:
        return BELOW, BELOW
    if state == NORMAL and 2 * available <= 3 * threshold:
        return APPROACHING, APPROACHING
    if state == APPROACHING and available >= 2 * threshold:
        return NORMAL, None
    return state, None


class DomainMachine(RuleBasedStateMachine):
    """Two GBP accounts of two merchants, and everything that moves their money."""

    payments_made = Bundle("payments")

    def __init__(self, env: Env) -> None:
        super().__init__()
        self.env = env
        self.accounts: list[AccountModel] = []
        self.payouts: dict[uuid.UUID, PayoutModel] = {}
        self.payments: dict[uuid.UUID, PaymentModel] = {}
        self.units = 0
        self.events: Counter[tuple[uuid.UUID, str]] = Counter()
        self.ledger: Counter[tuple[uuid.UUID, str]] = Counter()
        self.payers = 0

    # --- model helpers ---------------------------------------------------------------------

    def _evaluate(self, index: int) -> None:
        model = self.accounts[index]
        model.state, notify = notification_step(model.state, model.threshold, model.available)
        if notify is not None:
            assert model.threshold is not None
            model.notifications.append((notify, model.threshold, model.current, model.available))
            self._event(index, "balance_notification")

    def _move(self, index: int, available: int, held: int) -> None:
        model = self.accounts[index]
        model.available += available
        model.held += held
        assert model.available >= 0
        assert model.held >= 0
        if available:
            self._evaluate(index)

    def _event(self, index: int, event_type: str) -> None:
        self.events[(self.accounts[index].account.merchant_id, event_type)] += 1

    def _due(self) -> list[str]:
        """What the model says the queue must already have done."""
        items: list[PayoutModel | PaymentModel] = [*self.payouts.values(), *self.payments.values()]
        return [repr(i) for i in items if i.due is not None and i.due <= self.units]

    # --- set-up ------------------------------------------------------------------------------

    @initialize(
        thresholds=st.tuples(THRESHOLDS, THRESHOLDS),
        opening=st.tuples(OPENING_BALANCES, OPENING_BALANCES),
    )
    def open_accounts(
        self, thresholds: tuple[int | None, int | None], opening: tuple[int, int]
    ) -> None:
        async def open_two() -> list[MerchantAccount]:
            now = self.env.clock.now()
            made = []
            async with self.env.pool.acquire() as conn, conn.transaction():
                for name in ("Model Payer Ltd", "Model Payee Ltd"):
                    merchant = await create_merchant(conn, name, now)
                    made.append(await create_merchant_account(conn, merchant, "GBP", None, now))
            return made

        self.accounts = [AccountModel(a) for a in self.env.run(open_two())]
        for index, threshold in enumerate(thresholds):
            if threshold is not None:
                self.set_threshold(index, threshold)
        for index, amount in enumerate(opening):
            if amount:
                self.top_up(index, amount)

    def teardown(self) -> None:
        # The next example starts with an empty queue (its accounts are new anyway).
        self.env.run(self.env.pool.execute("DELETE FROM jobs"))

    # --- money in ----------------------------------------------------------------------------

    @rule(index=ACCOUNTS, amount=AMOUNTS)
    def top_up(self, index: int, amount: int) -> None:
        account = self.accounts[index].account

        async def receive() -> uuid.UUID:
            async with self.env.pool.acquire() as conn, conn.transaction():
                transfer_id, account_id = await receive_transfer(
                    conn,
                    IncomingTransfer(
                        amount_in_minor=amount,
                        currency="GBP",
                        remitter_name="Model Remitter",
                        reference="top-up",
                        sort_code=account.identifiers.sort_code,
                        account_number=account.identifiers.account_number,
                    ),
                    self.env.clock.now(),
                )
            assert account_id == account.id
            return transfer_id

        transfer_id = self.env.run(receive())
        self.ledger[(transfer_id, "topup")] += 1
        self._move(index, amount, 0)
        self._event(index, "topup_received")

    @rule(
        index=ACCOUNTS,
        amount=AMOUNTS,
        mistake=st.sampled_from(["top_up_in_euros", "top_up_to_nobody", "payout_on_no_scheme"]),
    )
    def refused_request(self, index: int, amount: int, mistake: str) -> None:
        """A request the service must refuse (400), changing nothing."""
        account = self.accounts[index].account
        assert account.identifiers.sort_code is not None
        assert account.identifiers.account_number is not None

        async def attempt() -> None:
            async with self.env.pool.acquire() as conn, conn.transaction():
                if mistake == "payout_on_no_scheme":
                    # A preselected scheme the currency does not have. (A payout to the
                    # account's own identifier is accepted: an internal transfer to itself.)
                    keyed = payout_request(account, self.env.clock.now())
                    unknown = {"type": "preselected", "scheme_id": "no_such_scheme"}
                    request = replace(
                        keyed,
                        request=replace(keyed.request, scheme_selection=unknown),
                        store_client_errors=False,
                    )
                    (refused,) = await payouts.accept_payouts(conn, [request], render_problem)
                    assert isinstance(refused, ProblemError)
                    raise refused
                euros = mistake == "top_up_in_euros"
                transfer = IncomingTransfer(
                    amount_in_minor=amount,
                    currency="EUR" if euros else "GBP",
                    remitter_name="Model Remitter",
                    reference="misdirected",
                    iban=account.identifiers.iban if euros else None,
                    sort_code=None if euros else EXTERNAL_SORT_CODE,
                    account_number=None if euros else "99999999",
                )
                await receive_transfer(conn, transfer, self.env.clock.now())

        with pytest.raises(InvalidParameters):
            self.env.run(attempt())

    # --- payouts -----------------------------------------------------------------------------

    def _accept(
        self,
        index: int,
        amount: int,
        outcome: str,
        destination: str,
        refund_of: tuple[str, uuid.UUID] | None = None,
    ) -> None:
        account = self.accounts[index].account
        other = self.accounts[1 - index].account
        reference = f"model payout {outcome}".strip()

        async def accept() -> uuid.UUID:
            async with self.env.pool.acquire() as conn, conn.transaction():
                fresh = await get_account(conn, account.id)
                assert fresh is not None
                if refund_of is not None:
                    user_id, source_id = refund_of
                    beneficiary = {
                        "type": "payment_source",
                        "user_id": user_id,
                        "payment_source_id": str(source_id),
                        "reference": reference,
                    }
                elif destination == "internal":
                    assert other.identifiers.sort_code is not None
                    assert other.identifiers.account_number is not None
                    beneficiary = sort_code_beneficiary(
                        reference,
                        "Model Payee Ltd",
                        sort_code=other.identifiers.sort_code,
                        account_number=other.identifiers.account_number,
                    )
                else:
                    name = SCREENED_NAME if destination == "screened" else "Jane Doe"
                    beneficiary = sort_code_beneficiary(reference, name)
                request = payout_request(
                    fresh, self.env.clock.now(), amount=amount, beneficiary=beneficiary
                )
                (outcome,) = await payouts.accept_payouts(conn, [request], render_problem)
                assert not isinstance(outcome, ProblemError)
                assert outcome[0] == 202, outcome
                return uuid.UUID(orjson.loads(outcome[1])["id"])

        payout_id = self.env.run(accept())
        model = self.accounts[index]
        pending_failure = None
        if destination == "screened":
            pending_failure = "blocked"
        elif amount > model.available:
            pending_failure = "insufficient_funds"
        else:
            self._move(index, -amount, amount)
            self.ledger[(payout_id, "payout_hold")] += 1
        self.payouts[payout_id] = PayoutModel(
            account=index,
            amount=amount,
            payee=1 - index if destination == "internal" else None,
            failure=outcome.removeprefix("fail:") if outcome.startswith("fail:") else None,
            delay_units=DELAY_UNITS if outcome.startswith("delay:") else 0,
            pending_failure=pending_failure,
            due=self.units,
        )

    @rule(index=ACCOUNTS, amount=AMOUNTS, outcome=OUTCOMES, destination=DESTINATIONS)
    def payout(self, index: int, amount: int, outcome: str, destination: str) -> None:
        self._accept(index, amount, outcome, destination)

    def _settled_payer(self) -> PaymentModel | None:
        return next((p for p in self.payments.values() if p.status == "payment_settled"), None)

    @precondition(lambda self: self._settled_payer() is not None)
    @rule(amount=AMOUNTS, outcome=OUTCOMES)
    def refund_payout(self, amount: int, outcome: str) -> None:
        """A closed-loop payout back to the source of a settled pay-in."""
        paid = self._settled_payer()
        assert paid is not None
        payment_id = next(k for k, v in self.payments.items() if v is paid)
        source_id = self.env.run(
            self.env.pool.fetchval(
                "SELECT payment_source_id FROM payments WHERE id = $1", payment_id
            )
        )
        assert isinstance(source_id, uuid.UUID)
        self._accept(paid.account, amount, outcome, "refund", (paid.user_id, source_id))

    def _payout_step(self, payout_id: uuid.UUID) -> None:
        """The payout's next step, which must be due."""
        p = self.payouts[payout_id]
        assert p.due is not None, f"payout {payout_id} moved after it finished: {p}"
        assert p.due <= self.units, f"payout {payout_id} moved before it was due: {p}"
        if p.stage == "pending":
            if p.pending_failure is not None:
                p.stage, p.failure_reason, p.due = "failed", p.pending_failure, None
                self._event(p.account, "payout_failed")
            else:
                p.stage = "authorized"
        elif p.stage == "authorized":
            p.stage, p.due = "submitted", self.units + p.delay_units
        elif p.failure is not None:  # submitted, and the scheme refuses it
            self._move(p.account, p.amount, -p.amount)
            self.ledger[(payout_id, "payout_release")] += 1
            p.stage, p.failure_reason, p.due = "failed", p.failure, None
            self._event(p.account, "payout_failed")
        else:  # submitted, and the scheme pays
            self._move(p.account, 0, -p.amount)
            if p.payee is None:
                self.ledger[(payout_id, "payout_execution")] += 1
            else:
                self.ledger[(payout_id, "internal_transfer")] += 1
                self._move(p.payee, p.amount, 0)
                self._event(p.payee, "topup_received")
            p.stage, p.due = "executed", None
            self._event(p.account, "payout_executed")

    # --- pay-ins -----------------------------------------------------------------------------

    def _create_payment(self, index: int, amount: int) -> uuid.UUID:
        account = self.accounts[index].account
        self.payers += 1
        user_id = f"model-payer-{index}-{self.payers % 2}"
        request = PaymentRequest.model_validate(
            {
                "amount_in_minor": amount,
                "currency": "GBP",
                "payment_method": {
                    "type": "bank_transfer",
                    "provider_selection": {"type": "preselected", "provider_id": PROVIDER},
                    "beneficiary": {
                        "type": "merchant_account",
                        "merchant_account_id": str(account.id),
                    },
                },
                "user": {"id": user_id, "name": "Model Payer"},
            }
        )

        async def create() -> uuid.UUID:
            async with self.env.pool.acquire() as conn, conn.transaction():
                made = await payments.create_payment(
                    conn, account.merchant_id, request, self.env.clock.now()
                )
            assert made["user_id"] == user_id
            payment_id = made["id"]
            assert isinstance(payment_id, uuid.UUID)
            return payment_id

        payment_id = self.env.run(create())
        # Its first due step is expiry, at the end of the 15-minute window (one unit).
        self.payments[payment_id] = PaymentModel(index, amount, user_id, due=self.units + 1)
        return payment_id

    def _authorise(
        self, payment_id: uuid.UUID, action: str, execution_units: int, settlement_units: int
    ) -> None:
        """The payer starts the journey, then decides at the mock bank (two requests)."""
        p = self.payments[payment_id]

        async def start() -> None:
            async with self.env.pool.acquire() as conn, conn.transaction():
                row = await payments.lock_payment(conn, payment_id)
                await payments.start_authorization(
                    conn,
                    row,
                    return_uri=RETURN_URI,
                    now=self.env.clock.now(),
                    allow_listed_only=False,  # sandbox mode
                    powers=SANDBOX,
                )

        async def decide() -> None:
            async with self.env.pool.acquire() as conn, conn.transaction():
                row = await payments.lock_payment(conn, payment_id)
                await payments.bank_action(
                    conn,
                    row,
                    action,
                    self.env.clock.now(),
                    powers=SANDBOX,
                    execution_delay=execution_units * UNIT,
                    settlement_delay=settlement_units * UNIT,
                )

        if p.status != "authorization_required":
            with pytest.raises(Conflict):
                self.env.run(start())
            return
        self.env.run(start())
        p.status = "authorizing"
        self.env.run(decide())
        if p.due is not None and p.due <= self.units:  # the window had closed
            self._fail_payment(payment_id, "expired")
        elif action == "Cancel":
            self._fail_payment(payment_id, "not_authorized")
        elif action == "RejectAuthorisation":
            self._fail_payment(payment_id, "authorization_failed")
        else:
            p.status, p.action, p.settle_units = "authorized", action, settlement_units
            p.due = self.units + execution_units

    def _fail_payment(self, payment_id: uuid.UUID, reason: str) -> None:
        p = self.payments[payment_id]
        p.failure_stage, p.status, p.failure_reason = p.status, "payment_failed", reason
        p.due = None
        self._event(p.account, "payment_failed")

    @rule(
        index=ACCOUNTS,
        amount=AMOUNTS,
        action=BANK_ACTIONS,
        execution=BANK_DELAYS,
        settlement=BANK_DELAYS,
    )
    def pay_in(self, index: int, amount: int, action: str, execution: int, settlement: int) -> None:
        """A payer pays at once: created, authorised at the mock bank, decided."""
        self._authorise(self._create_payment(index, amount), action, execution, settlement)

    @rule(target=payments_made, index=ACCOUNTS, amount=AMOUNTS)
    def create_payment(self, index: int, amount: int) -> uuid.UUID:
        """A payment the payer has not authorised yet (it expires after 15 minutes)."""
        return self._create_payment(index, amount)

    @rule(
        payment_id=payments_made,
        action=BANK_ACTIONS,
        execution=BANK_DELAYS,
        settlement=BANK_DELAYS,
    )
    def authorise_payment(
        self, payment_id: uuid.UUID, action: str, execution: int, settlement: int
    ) -> None:
        self._authorise(payment_id, action, execution, settlement)

    @rule(payment_id=payments_made)
    def cancel_payment(self, payment_id: uuid.UUID) -> None:
        p = self.payments[payment_id]
        merchant_id = self.accounts[p.account].account.merchant_id

        async def cancel() -> None:
            async with self.env.pool.acquire() as conn, conn.transaction():
                row = await payments.lock_payment(conn, payment_id, merchant_id)
                await payments.cancel_payment(conn, row, self.env.clock.now())

        if p.status in CANCELLABLE:
            self.env.run(cancel())
            self._fail_payment(payment_id, "canceled")
        else:
            with pytest.raises(Conflict):
                self.env.run(cancel())

    def _payment_step(self, payment_id: uuid.UUID) -> None:
        """The bank's next step for the payment (or its expiry), which must be due."""
        p = self.payments[payment_id]
        assert p.due is not None, f"payment {payment_id} moved after it finished: {p}"
        assert p.due <= self.units, f"payment {payment_id} moved before it was due: {p}"
        if p.status in EXPIRABLE:
            self._fail_payment(payment_id, "expired")
        elif p.status == "authorized" and p.action == "RejectExecution":
            self._fail_payment(payment_id, "provider_rejected")
        elif p.status == "authorized":
            p.status, p.due = "payment_executed", self.units + p.settle_units
            self._event(p.account, "payment_executed")
        else:
            assert p.status == "payment_executed", p
            self._move(p.account, p.amount, 0)
            self.ledger[(payment_id, "payment")] += 1
            p.status, p.due = "payment_settled", None
            self._event(p.account, "payment_settled")

    # --- operator, clock and workers ---------------------------------------------------------

    @rule(index=ACCOUNTS, threshold=THRESHOLDS)
    def set_threshold(self, index: int, threshold: int | None) -> None:
        """As the admin route does: set (or clear), then evaluate at once."""
        account_id = self.accounts[index].account.id

        async def set_it() -> None:
            async with self.env.pool.acquire() as conn, conn.transaction():
                await set_balance_threshold(conn, account_id, threshold)
                await reevaluate_notifications(conn, account_id, self.env.clock.now())

        self.env.run(set_it())
        model = self.accounts[index]
        model.threshold, model.state = threshold, NORMAL
        self._evaluate(index)

    @rule(units=st.sampled_from([1, DELAY_UNITS]))
    def advance_clock(self, units: int) -> None:
        async def advance() -> None:
            async with self.env.pool.acquire() as conn:
                await self.env.clock.advance(conn, units * UNIT)

        self.env.run(advance())
        self.units += units

    async def _run_one_job(self) -> tuple[bool, dict[uuid.UUID, str]]:
        """Let the queue run one due job of its choice; returns whether it ran one, and the
        status of every payout and payment afterwards."""
        ran = await self.env.queue.run_one()
        failing = await self.env.pool.fetch(
            "SELECT kind, payload, last_error FROM jobs WHERE attempts > 0"
        )
        assert not failing, f"jobs failed: {[dict(j) for j in failing]}"
        rows = await self.env.pool.fetch(
            "SELECT id, stage FROM payouts WHERE id = ANY($1::uuid[])"
            " UNION ALL SELECT id, status FROM payments WHERE id = ANY($2::uuid[])",
            list(self.payouts),
            list(self.payments),
        )
        return ran, {r[0]: r[1] for r in rows}

    def _step_one(self) -> bool:
        """Run one job, and take in the model the steps the service took.

        How many steps one job takes (one each, or all that are due at once) is the service's
        choice; the model requires that each step it took was due, in the model's order, with
        the model's effects on balances, ledger and events.
        """
        ran, seen = self.env.run(self._run_one_job())
        if not ran:
            assert not self._due(), f"the queue ran dry, but these are due: {self._due()}"
            return False
        for payout_id, payout in self.payouts.items():
            for _ in range(3):
                if payout.stage == seen[payout_id] or payout.due is None:
                    break
                self._payout_step(payout_id)
            assert payout.stage == seen[payout_id], (
                f"payout {payout_id} is {seen[payout_id]}, the model says {payout}"
            )
        for payment_id, payment in self.payments.items():
            for _ in range(3):
                if payment.status == seen[payment_id] or payment.due is None:
                    break
                self._payment_step(payment_id)
            assert payment.status == seen[payment_id], (
                f"payment {payment_id} is {seen[payment_id]}, the model says {payment}"
            )
        return True

    @rule()
    def run_one_job(self) -> None:
        self._step_one()

    @rule()
    def drain_jobs(self) -> None:
        for _ in range(1_000):
            if not self._step_one():
                return
        raise AssertionError("the queue never ran dry")

    # --- invariants --------------------------------------------------------------------------

    async def _snapshot(self) -> dict[str, Any]:
        account_ids = [a.account.id for a in self.accounts]
        merchant_ids = [a.account.merchant_id for a in self.accounts]
        references = [ref for ref, _ in self.ledger] + list(self.payouts) + list(self.payments)
        async with self.env.pool.acquire() as conn:
            fresh = [await get_account(conn, account_id) for account_id in account_ids]
            return {
                "violations": await check_ledger(conn),
                "accounts": fresh,
                "payouts": await conn.fetch(
                    "SELECT id, stage, failure_reason FROM payouts"
                    " WHERE merchant_account_id = ANY($1::uuid[])",
                    account_ids,
                ),
                "payments": await conn.fetch(
                    "SELECT id, status, failure_stage, failure_reason FROM payments"
                    " WHERE merchant_account_id = ANY($1::uuid[])",
                    account_ids,
                ),
                "ledger": await conn.fetch(
                    "SELECT reference_id, kind, count(*) AS n FROM ledger_transactions"
                    " WHERE reference_id = ANY($1::uuid[]) GROUP BY reference_id, kind",
                    references,
                ),
                "events": await conn.fetch(
                    "SELECT merchant_id, event_type, payload FROM events"
                    " WHERE merchant_id = ANY($1::uuid[]) ORDER BY created_at, id",
                    merchant_ids,
                ),
                "jobs": await conn.fetch("SELECT payload, attempts, last_error FROM jobs"),
            }

    @invariant()
    def books_agree_with_the_model(self) -> None:
        if not self.accounts:
            return
        seen = self.env.run(self._snapshot())
        assert seen["violations"] == [], seen["violations"]

        for index, (model, account) in enumerate(zip(self.accounts, seen["accounts"], strict=True)):
            assert account is not None
            balances = (account.current_balance, account.available_balance)
            assert account.available_balance >= 0, (index, balances)
            assert account.held_balance >= 0, (index, account.held_balance)
            assert account.available_balance <= account.current_balance, (index, balances)
            assert balances == (model.current, model.available), (
                f"account {index}: (current, available) is {balances},"
                f" the model says {(model.current, model.available)}"
            )
            assert account.balance_threshold == model.threshold, index
            assert account.notification_state == model.state, (
                f"account {index}: notification state {account.notification_state!r},"
                f" the model says {model.state!r}"
            )

        stages = {r["id"]: (r["stage"], r["failure_reason"]) for r in seen["payouts"]}
        assert stages == {k: (v.stage, v.failure_reason) for k, v in self.payouts.items()}
        statuses = {
            r["id"]: (r["status"], r["failure_stage"], r["failure_reason"])
            for r in seen["payments"]
        }
        assert statuses == {
            k: (v.status, v.failure_stage, v.failure_reason) for k, v in self.payments.items()
        }

        ledger = Counter({(r["reference_id"], r["kind"]): r["n"] for r in seen["ledger"]})
        for payout_id in self.payouts:
            executions = ledger[(payout_id, "payout_execution")]
            executions += ledger[(payout_id, "internal_transfer")]
            assert executions <= 1, f"payout {payout_id} executed {executions} times"
        assert ledger == self.ledger, (
            f"ledger transactions differ from the model: extra {ledger - self.ledger},"
            f" missing {self.ledger - ledger}"
        )

        events = Counter((r["merchant_id"], r["event_type"]) for r in seen["events"])
        assert events == self.events, (
            f"events differ from the model: extra {events - self.events},"
            f" missing {self.events - events}"
        )
        for index, model in enumerate(self.accounts):
            notifications = []
            for r in seen["events"]:
                body = orjson.loads(r["payload"])
                if r["event_type"] == "balance_notification" and body["merchant_account_id"] == str(
                    model.account.id
                ):
                    notifications.append(
                        (
                            body["status"],
                            body["threshold_in_minor"],
                            body["current_balance_in_minor"],
                            body["available_balance_in_minor"],
                        )
                    )
            assert notifications == model.notifications, (
                f"account {index}: balance notifications {notifications},"
                f" the model says {model.notifications}"
            )

        failing = [dict(j) for j in seen["jobs"] if j["attempts"] > 0]
        assert failing == [], failing
        # Everything still waiting for the queue has a job: nothing is stranded.
        queued = {
            j["payload"].get("payout_id") or j["payload"].get("payment_id") for j in seen["jobs"]
        }
        waiting = [
            k for k, v in [*self.payouts.items(), *self.payments.items()] if v.due is not None
        ]
        stranded = [k for k in waiting if str(k) not in queued]
        assert stranded == [], f"no job will ever move {stranded}"


# --- the test ----------------------------------------------------------------------------------


def _open_env(loop: LoopThread, dsn: str) -> Env:
    async def connect() -> Env:
        pool = await create_pool(dsn, min_size=1, max_size=4)
        clock = ServiceClock()
        async with pool.acquire() as conn:
            await clock.refresh(conn)
            await replace_screening_list(conn, [SCREENED_NAME])
        queue = JobQueue(pool, clock)
        queue.register(payouts.ADVANCE_JOB, partial(advance_payout, powers=SANDBOX))
        queue.register(payments.ADVANCE_JOB, payments.advance_payment)
        queue.register(payments.EXPIRE_JOB, payments.expire_payment)
        return Env(loop, pool, clock, queue)

    return loop.run(connect())


# A passing run takes well under a minute; a failing one also shrinks the failure to a minimal
# sequence of steps (Hypothesis gives shrinking up to five minutes), which the report shows.
@pytest.mark.timeout(900)
def test_the_domain_keeps_its_books_whatever_happens(pg_server: str) -> None:
    # The model's notion of "due" counts whole units: the authorisation window is one.
    assert timedelta(seconds=UNIT) == AUTHORIZATION_WINDOW
    loop = LoopThread()
    try:
        dsn = loop.run(fresh_database(pg_server))
        try:
            env = _open_env(loop, dsn)
            try:
                run_state_machine_as_test(lambda: DomainMachine(env), settings=SETTINGS)
            finally:
                loop.run(env.pool.close())
        finally:
            loop.run(drop_database(pg_server, dsn))
    finally:
        loop.close()
