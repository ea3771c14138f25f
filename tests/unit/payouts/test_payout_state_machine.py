"""The rails' lifecycle that payouts follow (bankrail.rails.lifecycle): legal steps, illegal
steps, and how each stage and failure reason is shown by API v3 and API v1 (docs/api.md)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from bankrail.payouts.models import v1_reason, v1_status
from bankrail.rails.lifecycle import (
    REJECTIONS,
    TERMINAL,
    FailureReason,
    InvalidTransition,
    RailState,
    Stage,
    advance,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=1)
T2 = T0 + timedelta(seconds=2)
T3 = T0 + timedelta(seconds=3)
T4 = T0 + timedelta(seconds=4)
US = timedelta(microseconds=1)

ALL_REASONS = list(FailureReason)
NON_REJECTIONS = [r for r in FailureReason if r not in REJECTIONS]


def pending() -> RailState:
    return RailState(stage=Stage.PENDING, created_at=T0)


def authorized() -> RailState:
    return pending().authorize(T1)


def submitted() -> RailState:
    return authorized().submit(T2)


def executed() -> RailState:
    return submitted().execute(T3)


def failed(reason: FailureReason = FailureReason.SCHEME_ERROR) -> RailState:
    return submitted().fail(T3, reason) if reason not in REJECTIONS else pending().fail(T1, reason)


STATES: dict[Stage, Callable[[], RailState]] = {
    Stage.PENDING: pending,
    Stage.AUTHORIZED: authorized,
    Stage.SUBMITTED: submitted,
    Stage.EXECUTED: executed,
    Stage.FAILED: failed,
}

# (step name, the only stage it may start from)
FORWARD_STEPS = [
    ("authorize", Stage.PENDING),
    ("submit", Stage.AUTHORIZED),
    ("execute", Stage.SUBMITTED),
]


# --- the happy path ---------------------------------------------------------------------------


def test_happy_path_records_every_timestamp() -> None:
    state = pending()
    assert state.stage is Stage.PENDING
    assert (state.authorized_at, state.submitted_at, state.executed_at, state.failed_at) == (
        None,
        None,
        None,
        None,
    )
    state = state.authorize(T1)
    assert state.stage is Stage.AUTHORIZED
    assert state.authorized_at == T1
    state = state.submit(T2)
    assert state.stage is Stage.SUBMITTED
    assert state.submitted_at == T2
    state = state.execute(T3)
    assert state.stage is Stage.EXECUTED
    assert (state.created_at, state.authorized_at, state.submitted_at, state.executed_at) == (
        T0,
        T1,
        T2,
        T3,
    )
    assert state.failed_at is None
    assert state.failure_reason is None


def test_steps_return_new_states_and_leave_the_old_one_alone() -> None:
    before = pending()
    after = before.authorize(T1)
    assert before.stage is Stage.PENDING
    assert before.authorized_at is None
    assert after is not before
    with pytest.raises(AttributeError):
        before.stage = Stage.EXECUTED  # type: ignore[misc]


@pytest.mark.parametrize(("step", "origin"), FORWARD_STEPS)
def test_each_forward_step_is_legal_from_its_own_stage(step: str, origin: Stage) -> None:
    state = STATES[origin]()
    moved = getattr(state, step)(T4)
    assert (
        moved.stage
        is {
            "authorize": Stage.AUTHORIZED,
            "submit": Stage.SUBMITTED,
            "execute": Stage.EXECUTED,
        }[step]
    )


# --- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ALL_REASONS)
def test_every_reason_can_fail_a_pending_payout(reason: FailureReason) -> None:
    state = pending().fail(T1, reason)
    assert state.stage is Stage.FAILED
    assert state.failed_at == T1
    assert state.failure_reason is reason
    assert state.authorized_at is None


@pytest.mark.parametrize("origin", [Stage.AUTHORIZED, Stage.SUBMITTED])
@pytest.mark.parametrize("reason", NON_REJECTIONS)
def test_non_rejection_failures_after_authorisation(origin: Stage, reason: FailureReason) -> None:
    before = STATES[origin]()
    state = before.fail(T4, reason)
    assert state.stage is Stage.FAILED
    assert state.failed_at == T4
    assert state.failure_reason is reason
    assert state.authorized_at == T1  # history is kept
    assert state.submitted_at == before.submitted_at


@pytest.mark.parametrize("origin", [Stage.AUTHORIZED, Stage.SUBMITTED])
@pytest.mark.parametrize("reason", sorted(REJECTIONS))
def test_rejections_happen_only_from_pending(origin: Stage, reason: FailureReason) -> None:
    with pytest.raises(InvalidTransition):
        STATES[origin]().fail(T4, reason)


def test_rejections_are_insufficient_funds_and_aml() -> None:
    assert frozenset({FailureReason.INSUFFICIENT_FUNDS, FailureReason.BLOCKED}) == REJECTIONS
    assert frozenset({Stage.EXECUTED, Stage.FAILED}) == TERMINAL


# --- every illegal step -----------------------------------------------------------------------


ILLEGAL_FORWARD = [
    (step, stage) for step, origin in FORWARD_STEPS for stage in Stage if stage is not origin
]


@pytest.mark.parametrize(("step", "stage"), ILLEGAL_FORWARD)
def test_forward_step_from_any_other_stage_is_invalid(step: str, stage: Stage) -> None:
    state = STATES[stage]()
    with pytest.raises(InvalidTransition):
        getattr(state, step)(T4)
    assert state.stage is stage  # unchanged


@pytest.mark.parametrize("stage", sorted(TERMINAL))
@pytest.mark.parametrize("reason", ALL_REASONS)
def test_a_finished_payout_cannot_fail(stage: Stage, reason: FailureReason) -> None:
    with pytest.raises(InvalidTransition):
        STATES[stage]().fail(T4, reason)


def test_failed_payout_cannot_fail_again_even_for_the_same_reason() -> None:
    state = pending().fail(T1, FailureReason.INSUFFICIENT_FUNDS)
    with pytest.raises(InvalidTransition):
        state.fail(T2, FailureReason.INSUFFICIENT_FUNDS)


def test_transition_matrix_is_exactly_the_documented_one() -> None:
    """Every (stage, step) pair: the legal ones are exactly those in the module docstring."""
    legal = {
        (Stage.PENDING, "authorize"),
        (Stage.AUTHORIZED, "submit"),
        (Stage.SUBMITTED, "execute"),
        (Stage.PENDING, "fail"),
        (Stage.AUTHORIZED, "fail"),
        (Stage.SUBMITTED, "fail"),
    }
    for stage, make in STATES.items():
        for step in ("authorize", "submit", "execute", "fail"):
            method = getattr(make(), step)
            args = (T4, FailureReason.SERVER_ERROR) if step == "fail" else (T4,)
            if (stage, step) in legal:
                method(*args)
            else:
                with pytest.raises(InvalidTransition):
                    method(*args)


# --- holds ------------------------------------------------------------------------------------


def test_funds_are_held_only_while_authorized_or_submitted() -> None:
    assert not pending().holds_funds
    assert authorized().holds_funds
    assert submitted().holds_funds
    assert not executed().holds_funds
    assert not failed().holds_funds


# --- v3 status --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "expected"),
    [
        (Stage.PENDING, "pending"),
        (Stage.AUTHORIZED, "authorized"),
        (Stage.SUBMITTED, "authorized"),
        (Stage.EXECUTED, "executed"),
        (Stage.FAILED, "failed"),
    ],
)
def test_v3_status(stage: Stage, expected: str) -> None:
    assert STATES[stage]().v3_status == expected


def test_v3_never_shows_submitted() -> None:
    assert {STATES[s]().v3_status for s in Stage} == {"pending", "authorized", "executed", "failed"}


# --- v1 status and reasons --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "expected"),
    [
        (Stage.PENDING, "pending"),
        (Stage.AUTHORIZED, "authorised"),
        (Stage.SUBMITTED, "submitted"),
        (Stage.EXECUTED, "settled"),
    ],
)
def test_v1_status_of_live_and_settled_payouts(stage: Stage, expected: str) -> None:
    assert v1_status(STATES[stage]()) == expected


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (FailureReason.INSUFFICIENT_FUNDS, "rejected"),
        (FailureReason.BLOCKED, "rejected"),
        (FailureReason.INVALID_IBAN, "failed"),
        (FailureReason.SCHEME_ERROR, "failed"),
        (FailureReason.SERVER_ERROR, "failed"),
    ],
)
def test_v1_status_tells_rejected_from_failed(reason: FailureReason, expected: str) -> None:
    assert v1_status(failed(reason)) == expected


def test_v1_status_of_a_server_error_while_pending_is_failed() -> None:
    assert v1_status(pending().fail(T1, FailureReason.SERVER_ERROR)) == "failed"


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (FailureReason.INSUFFICIENT_FUNDS, "insufficient_funds"),
        (FailureReason.BLOCKED, "aml_check_failed"),
        (FailureReason.INVALID_IBAN, "scheme_error"),
        (FailureReason.SCHEME_ERROR, "scheme_error"),
        (FailureReason.SERVER_ERROR, "server_error"),
    ],
)
def test_v1_reason(reason: FailureReason, expected: str) -> None:
    assert v1_reason(reason) == expected


def test_v1_reasons_are_the_documented_set() -> None:
    """docs/api.md: rejected -> insufficient_funds | aml_check_failed; failed -> scheme_error |
    server_error."""
    for reason in FailureReason:
        name = v1_reason(reason)
        if reason in REJECTIONS:
            assert name in {"insufficient_funds", "aml_check_failed"}
        else:
            assert name in {"scheme_error", "server_error"}


# --- advance: the steps one run of a payout's job takes ---------------------------------------

NO_DELAY = timedelta(0)


def test_advance_takes_every_step_due_at_once_and_moves_the_money() -> None:
    plan = advance(
        pending(), T1, pending_failure=None, scheme_failure=None, execution_delay=NO_DELAY
    )
    assert [s.stage for s in plan.steps] == [Stage.AUTHORIZED, Stage.SUBMITTED, Stage.EXECUTED]
    assert plan.state == plan.steps[-1]
    assert (plan.state.authorized_at, plan.state.executed_at) == (T1, T1 + 2 * US)
    assert plan.moves_money
    assert plan.next_step_at is None


# --- the times of steps: strictly increasing within one payout --------------------------------


def stamps(state: RailState) -> list[datetime]:
    """The payout's times, in lifecycle order, of the steps it took."""
    moments = [
        state.created_at,
        state.authorized_at,
        state.submitted_at,
        state.executed_at,
        state.failed_at,
    ]
    return [m for m in moments if m is not None]


def test_steps_taken_at_one_instant_are_a_microsecond_apart() -> None:
    """One job run takes authorisation, submission and execution at the same `now`: each is
    dated a microsecond after the one before, so their v1 events have distinct, ordered
    times, and each event knows its place."""
    plan = advance(
        pending(), T1, pending_failure=None, scheme_failure=None, execution_delay=NO_DELAY
    )
    assert [s.step_at for s in plan.steps] == [T1, T1 + US, T1 + 2 * US]
    assert (plan.state.authorized_at, plan.state.submitted_at, plan.state.executed_at) == (
        T1,
        T1 + US,
        T1 + 2 * US,
    )
    assert [s.event_sequence for s in plan.steps] == [1, 2, 3]
    assert plan.state.last_step_at == T1 + 2 * US


def test_a_scheme_failure_at_the_same_instant_is_dated_after_the_submission() -> None:
    plan = advance(
        pending(),
        T1,
        pending_failure=None,
        scheme_failure=FailureReason.SCHEME_ERROR,
        execution_delay=NO_DELAY,
    )
    assert [s.step_at for s in plan.steps] == [T1, T1 + US, T1 + 2 * US]
    assert plan.state.failed_at == T1 + 2 * US
    assert [s.event_sequence for s in plan.steps] == [1, 2, 3]


def test_a_step_at_the_instant_of_creation_is_dated_after_it() -> None:
    plan = advance(
        pending(), T0, pending_failure=None, scheme_failure=None, execution_delay=NO_DELAY
    )
    assert stamps(plan.state) == [T0, T0 + US, T0 + 2 * US, T0 + 3 * US]
    rejected = advance(
        pending(),
        T0,
        pending_failure=FailureReason.BLOCKED,
        scheme_failure=None,
        execution_delay=NO_DELAY,
    )
    assert stamps(rejected.state) == [T0, T0 + US]
    assert rejected.state.event_sequence == 1  # a rejection is the payout's only event


def test_steps_at_later_instants_keep_their_own_time() -> None:
    delay = timedelta(seconds=60)
    first = advance(pending(), T1, pending_failure=None, scheme_failure=None, execution_delay=delay)
    assert stamps(first.state) == [T0, T1, T1 + US]
    later = advance(
        first.state, T1 + delay, pending_failure=None, scheme_failure=None, execution_delay=delay
    )
    assert later.state.executed_at == T1 + delay
    assert later.state.event_sequence == 3


@pytest.mark.parametrize("step", ["authorize", "submit", "execute", "fail"])
def test_a_step_is_never_dated_at_or_before_the_previous_one(step: str) -> None:
    """Whatever `now` a step is given, even one not later than the payout's last step."""
    origin = {
        "authorize": pending,
        "submit": authorized,
        "execute": submitted,
        "fail": submitted,
    }[step]()
    for now in (origin.last_step_at - timedelta(seconds=5), origin.last_step_at):
        args = (now, FailureReason.SERVER_ERROR) if step == "fail" else (now,)
        moved = getattr(origin, step)(*args)
        assert moved.step_at == origin.last_step_at + US
        moments = stamps(moved)
        assert moments == sorted(moments)
        assert len(set(moments)) == len(moments)


@pytest.mark.parametrize("stage", list(Stage))
def test_every_state_built_from_one_instant_has_strictly_increasing_times(stage: Stage) -> None:
    state = RailState(stage=Stage.PENDING, created_at=T0)
    path = {
        Stage.PENDING: [],
        Stage.AUTHORIZED: ["authorize"],
        Stage.SUBMITTED: ["authorize", "submit"],
        Stage.EXECUTED: ["authorize", "submit", "execute"],
        Stage.FAILED: ["authorize", "submit", "fail"],
    }[stage]
    for step in path:
        state = (
            state.fail(T0, FailureReason.SCHEME_ERROR)
            if step == "fail"
            else getattr(state, step)(T0)
        )
    moments = stamps(state)
    assert all(a < b for a, b in itertools.pairwise(moments)), moments
    assert state.event_sequence == len(path)


def test_advance_stops_at_submission_until_the_scheme_answers() -> None:
    delay = timedelta(seconds=60)
    plan = advance(pending(), T1, pending_failure=None, scheme_failure=None, execution_delay=delay)
    assert [s.stage for s in plan.steps] == [Stage.AUTHORIZED, Stage.SUBMITTED]
    assert not plan.moves_money
    assert plan.next_step_at == T1 + delay
    later = advance(
        plan.state, T1 + delay, pending_failure=None, scheme_failure=None, execution_delay=delay
    )
    assert [s.stage for s in later.steps] == [Stage.EXECUTED]
    assert later.moves_money


def test_advance_rejects_at_once_what_acceptance_found_wrong_without_moving_money() -> None:
    plan = advance(
        pending(),
        T1,
        pending_failure=FailureReason.INSUFFICIENT_FUNDS,
        scheme_failure=None,
        execution_delay=NO_DELAY,
    )
    assert [s.stage for s in plan.steps] == [Stage.FAILED]
    assert plan.state.failure_reason is FailureReason.INSUFFICIENT_FUNDS
    assert not plan.moves_money  # nothing was held


def test_advance_fails_after_submission_when_the_scheme_refuses_and_releases_the_hold() -> None:
    plan = advance(
        pending(),
        T1,
        pending_failure=None,
        scheme_failure=FailureReason.SCHEME_ERROR,
        execution_delay=NO_DELAY,
    )
    assert [s.stage for s in plan.steps] == [Stage.AUTHORIZED, Stage.SUBMITTED, Stage.FAILED]
    assert plan.state.failure_reason is FailureReason.SCHEME_ERROR
    assert plan.moves_money


@pytest.mark.parametrize("final", [Stage.EXECUTED, Stage.FAILED])
def test_advance_does_nothing_for_a_finished_payout(final: Stage) -> None:
    if final is Stage.EXECUTED:
        done = submitted().execute(T3)
    else:
        done = pending().fail(T1, FailureReason.BLOCKED)
    plan = advance(done, T4, pending_failure=None, scheme_failure=None, execution_delay=NO_DELAY)
    assert (plan.steps, plan.state, plan.moves_money, plan.next_step_at) == ((), done, False, None)
