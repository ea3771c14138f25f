"""The pay-in state machine (bankrail.payments.models, spec 3.3 and docs/api.md "Payments API v3 —
pay-ins"): the one legal path, every illegal step, failure stages and the 15-minute window."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from bankrail.payments.models import (
    ANNOUNCED,
    AUTHORIZATION_WINDOW,
    CANCELLABLE,
    EXPIRABLE,
    TERMINAL,
    FailureReason,
    InvalidTransition,
    PaymentState,
    PaymentStatus,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=1)
T2 = T0 + timedelta(seconds=2)
T3 = T0 + timedelta(seconds=3)
T4 = T0 + timedelta(seconds=4)
T5 = T0 + timedelta(seconds=5)

S = PaymentStatus


def created() -> PaymentState:
    return PaymentState(S.AUTHORIZATION_REQUIRED, T0)


def authorizing() -> PaymentState:
    return created().start_authorization()


def authorized() -> PaymentState:
    return authorizing().authorize(T1)


def executed() -> PaymentState:
    return authorized().execute(T2)


def settled() -> PaymentState:
    return executed().settle(T3)


def failed() -> PaymentState:
    return authorizing().fail(T2, FailureReason.AUTHORIZATION_FAILED)


STATE_OF: dict[PaymentStatus, Callable[[], PaymentState]] = {
    S.AUTHORIZATION_REQUIRED: created,
    S.AUTHORIZING: authorizing,
    S.AUTHORIZED: authorized,
    S.EXECUTED: executed,
    S.SETTLED: settled,
    S.FAILED: failed,
}

# Each step and the only status it may be taken from.
STEPS: dict[str, tuple[PaymentStatus, Callable[[PaymentState], PaymentState]]] = {
    "start_authorization": (S.AUTHORIZATION_REQUIRED, lambda s: s.start_authorization()),
    "authorize": (S.AUTHORIZING, lambda s: s.authorize(T4)),
    "execute": (S.AUTHORIZED, lambda s: s.execute(T4)),
    "settle": (S.EXECUTED, lambda s: s.settle(T4)),
}

ILLEGAL = [
    pytest.param(step, status, id=f"{step}-from-{status.value}")
    for step, (allowed, _) in STEPS.items()
    for status in PaymentStatus
    if status is not allowed
]
NON_TERMINAL = [s for s in PaymentStatus if s not in TERMINAL]


def test_status_values_are_the_spec_names() -> None:
    assert [s.value for s in PaymentStatus] == [
        "authorization_required",
        "authorizing",
        "authorized",
        "payment_executed",
        "payment_settled",
        "payment_failed",
    ]


def test_the_legal_path_sets_each_timestamp_once() -> None:
    state = created()
    assert state.status is S.AUTHORIZATION_REQUIRED
    assert (state.authorized_at, state.executed_at, state.settled_at, state.failed_at) == (
        None,
        None,
        None,
        None,
    )

    state = state.start_authorization()
    assert state.status is S.AUTHORIZING
    assert state.authorized_at is None

    state = state.authorize(T1)
    assert state.status is S.AUTHORIZED
    assert state.authorized_at == T1
    assert state.executed_at is None

    state = state.execute(T2)
    assert state.status is S.EXECUTED
    assert (state.authorized_at, state.executed_at) == (T1, T2)
    assert state.settled_at is None

    state = state.settle(T3)
    assert state.status is S.SETTLED
    assert (state.created_at, state.authorized_at, state.executed_at, state.settled_at) == (
        T0,
        T1,
        T2,
        T3,
    )
    assert state.failed_at is None
    assert state.failure_stage is None
    assert state.failure_reason is None


def test_steps_return_new_states_and_leave_the_old_one_alone() -> None:
    before = authorizing()
    after = before.authorize(T1)
    assert before.status is S.AUTHORIZING
    assert before.authorized_at is None
    assert after is not before


@pytest.mark.parametrize(("step", "status"), ILLEGAL)
def test_every_illegal_step_raises_invalid_transition(step: str, status: PaymentStatus) -> None:
    state = STATE_OF[status]()
    assert state.status is status
    _, take = STEPS[step]
    with pytest.raises(InvalidTransition, match=status.value):
        take(state)


@pytest.mark.parametrize("status", NON_TERMINAL, ids=lambda s: s.value)
@pytest.mark.parametrize("reason", list(FailureReason), ids=lambda r: r.value)
def test_fail_records_the_status_it_failed_at(status: PaymentStatus, reason: FailureReason) -> None:
    before = STATE_OF[status]()
    state = before.fail(T5, reason)
    assert state.status is S.FAILED
    assert state.failure_stage is status
    assert state.failure_reason is reason
    assert state.failed_at == T5
    # What happened before the failure is kept.
    assert state.created_at == T0
    assert state.authorized_at == before.authorized_at
    assert state.executed_at == before.executed_at
    assert state.settled_at is None


@pytest.mark.parametrize("status", sorted(TERMINAL), ids=lambda s: s.value)
@pytest.mark.parametrize("reason", list(FailureReason), ids=lambda r: r.value)
def test_a_terminal_payment_cannot_fail_again(status: PaymentStatus, reason: FailureReason) -> None:
    state = STATE_OF[status]()
    with pytest.raises(InvalidTransition):
        state.fail(T5, reason)


def test_a_failed_payment_keeps_its_first_failure() -> None:
    state = failed()
    with pytest.raises(InvalidTransition):
        state.fail(T5, FailureReason.EXPIRED)
    assert state.failure_stage is S.AUTHORIZING
    assert state.failure_reason is FailureReason.AUTHORIZATION_FAILED
    assert state.failed_at == T2


def test_a_failed_payment_takes_no_further_step() -> None:
    state = failed()
    for _, take in STEPS.values():
        with pytest.raises(InvalidTransition):
            take(state)


def test_expires_fifteen_minutes_after_creation() -> None:
    assert timedelta(minutes=15) == AUTHORIZATION_WINDOW
    assert created().expires_at() == T0 + timedelta(minutes=15)
    # Later steps do not move the deadline.
    assert authorizing().expires_at() == T0 + timedelta(minutes=15)
    other = PaymentState(S.AUTHORIZATION_REQUIRED, T0 + timedelta(hours=3, microseconds=7))
    assert other.expires_at() == T0 + timedelta(hours=3, minutes=15, microseconds=7)


def test_failure_reasons_are_the_documented_values() -> None:
    assert {r.value for r in FailureReason} >= {
        "authorization_failed",
        "provider_rejected",
        "canceled",
        "not_authorized",
        "expired",
    }


def test_status_sets_match_the_spec() -> None:
    # Spec 6.2: authorization_required, authorizing and authorized emit no webhook.
    assert frozenset({S.EXECUTED, S.SETTLED, S.FAILED}) == ANNOUNCED
    assert frozenset({S.SETTLED, S.FAILED}) == TERMINAL
    # Only an unauthorised payment can expire; the bank's later steps are not timed out.
    assert frozenset({S.AUTHORIZATION_REQUIRED, S.AUTHORIZING}) == EXPIRABLE
    # The merchant may cancel until the bank accepted the payment.
    assert S.EXECUTED not in CANCELLABLE
    assert not (CANCELLABLE & TERMINAL)
    assert {S.AUTHORIZATION_REQUIRED, S.AUTHORIZING} <= CANCELLABLE
