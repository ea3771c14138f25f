"""The pay-in state machine (bankrail.payments.models, spec 3.3 and docs/api.md "Payments API v3 —
pay-ins"): the one legal path, every illegal step, failure stages, the 15-minute window, and
retries (`attempt_failed`, fidelity P8)."""

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


def with_retry() -> PaymentState:
    return PaymentState(S.AUTHORIZATION_REQUIRED, T0, retry=True)


def attempt_failed() -> PaymentState:
    return with_retry().start_authorization().reject_authorization(T1)


STATE_OF: dict[PaymentStatus, Callable[[], PaymentState]] = {
    S.AUTHORIZATION_REQUIRED: created,
    S.AUTHORIZING: authorizing,
    S.AUTHORIZED: authorized,
    S.ATTEMPT_FAILED: attempt_failed,
    S.EXECUTED: executed,
    S.SETTLED: settled,
    S.FAILED: failed,
}

# Each step and the only statuses it may be taken from.
STEPS: dict[str, tuple[frozenset[PaymentStatus], Callable[[PaymentState], PaymentState]]] = {
    "start_authorization": (
        frozenset({S.AUTHORIZATION_REQUIRED, S.ATTEMPT_FAILED}),
        lambda s: s.start_authorization(),
    ),
    "authorize": (frozenset({S.AUTHORIZING}), lambda s: s.authorize(T4)),
    "reject_authorization": (frozenset({S.AUTHORIZING}), lambda s: s.reject_authorization(T4)),
    "execute": (frozenset({S.AUTHORIZED}), lambda s: s.execute(T4)),
    "settle": (frozenset({S.EXECUTED}), lambda s: s.settle(T4)),
    "expire": (
        frozenset({S.AUTHORIZATION_REQUIRED, S.AUTHORIZING, S.ATTEMPT_FAILED}),
        lambda s: s.expire(T4),
    ),
}

ILLEGAL = [
    pytest.param(step, status, id=f"{step}-from-{status.value}")
    for step, (allowed, _) in STEPS.items()
    for status in PaymentStatus
    if status not in allowed
]
NON_TERMINAL = [s for s in PaymentStatus if s not in TERMINAL]


def test_status_values_are_the_spec_names() -> None:
    assert [s.value for s in PaymentStatus] == [
        "authorization_required",
        "authorizing",
        "authorized",
        "attempt_failed",
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
    # Between attempts a payment stopped where its last attempt did: authorizing.
    assert state.failure_stage is (S.AUTHORIZING if status is S.ATTEMPT_FAILED else status)
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
    assert frozenset({S.AUTHORIZATION_REQUIRED, S.AUTHORIZING, S.ATTEMPT_FAILED}) == EXPIRABLE
    # attempt_failed is neither terminal nor announced (fidelity P8).
    assert S.ATTEMPT_FAILED not in TERMINAL | ANNOUNCED
    # The merchant may cancel until the bank accepted the payment.
    assert S.EXECUTED not in CANCELLABLE
    assert not (CANCELLABLE & TERMINAL)
    assert {S.AUTHORIZATION_REQUIRED, S.AUTHORIZING} <= CANCELLABLE


def test_a_rejected_authorisation_without_retry_fails_the_payment() -> None:
    state = authorizing().reject_authorization(T2)
    assert state.status is S.FAILED
    assert (state.failure_stage, state.failure_reason) == (
        S.AUTHORIZING,
        FailureReason.AUTHORIZATION_FAILED,
    )
    assert state.failed_at == T2


def test_a_rejected_authorisation_with_retry_is_a_failed_attempt() -> None:
    state = with_retry().start_authorization().reject_authorization(T2)
    assert state.status is S.ATTEMPT_FAILED
    assert state.failed_at == T2
    assert (state.failure_stage, state.failure_reason) == (
        S.AUTHORIZING,
        FailureReason.AUTHORIZATION_FAILED,
    )
    assert state.retry


def test_a_new_attempt_clears_the_failure_and_may_succeed() -> None:
    state = attempt_failed().start_authorization()
    assert state.status is S.AUTHORIZING
    assert (state.failed_at, state.failure_stage, state.failure_reason) == (None, None, None)
    assert state.retry
    # It may fail again, as often as the window allows, then succeed.
    state = state.reject_authorization(T2).start_authorization().authorize(T3)
    assert state.status is S.AUTHORIZED
    assert state.authorized_at == T3
    assert state.failed_at is None


def test_the_end_of_the_retry_window_fails_with_the_last_attempts_failure() -> None:
    state = attempt_failed()
    assert state.expires_at() == T0 + AUTHORIZATION_WINDOW
    end = state.expires_at()
    final = state.expire(end)
    assert final.status is S.FAILED
    assert final.failed_at == end
    assert (final.failure_stage, final.failure_reason) == (
        S.AUTHORIZING,
        FailureReason.AUTHORIZATION_FAILED,
    )


@pytest.mark.parametrize("status", [S.AUTHORIZATION_REQUIRED, S.AUTHORIZING], ids=str)
def test_an_unauthorised_payment_expires(status: PaymentStatus) -> None:
    final = STATE_OF[status]().expire(T5)
    assert final.status is S.FAILED
    assert (final.failure_stage, final.failure_reason) == (status, FailureReason.EXPIRED)
