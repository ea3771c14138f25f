"""Unit tests for the balance-notification state machine (docs/api.md, spec 3.4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bankrail.events.notifications import (
    APPROACHING,
    BELOW,
    NORMAL,
    RECOVERED,
    Transition,
    next_state,
)

T = 1000


# --- from normal -----------------------------------------------------------------------------


def test_normal_stays_normal_above_one_and_a_half_threshold() -> None:
    assert next_state(NORMAL, T, 1501) == Transition(NORMAL, None)
    assert next_state(NORMAL, T, 10**9) == Transition(NORMAL, None)


def test_normal_to_approaching_at_one_and_a_half_threshold() -> None:
    assert next_state(NORMAL, T, 1500) == Transition(APPROACHING, APPROACHING)
    assert next_state(NORMAL, T, 1001) == Transition(APPROACHING, APPROACHING)


def test_normal_to_below_at_threshold() -> None:
    assert next_state(NORMAL, T, 1000) == Transition(BELOW, BELOW)


def test_crossing_both_bounds_at_once_sends_one_below_notification() -> None:
    step = next_state(NORMAL, T, 10)
    assert step == Transition(BELOW, BELOW)
    assert next_state(NORMAL, T, 0) == Transition(BELOW, BELOW)
    assert next_state(NORMAL, T, -5) == Transition(BELOW, BELOW)


# --- from approaching ------------------------------------------------------------------------


def test_approaching_stays_approaching_quietly() -> None:
    for balance in (1001, 1500, 1501, 1999):
        assert next_state(APPROACHING, T, balance) == Transition(APPROACHING, None), balance


def test_approaching_to_below_at_threshold() -> None:
    assert next_state(APPROACHING, T, 1000) == Transition(BELOW, BELOW)
    assert next_state(APPROACHING, T, 1) == Transition(BELOW, BELOW)


def test_approaching_returns_quietly_to_normal_at_twice_threshold() -> None:
    assert next_state(APPROACHING, T, 2000) == Transition(NORMAL, None)
    assert next_state(APPROACHING, T, 50_000) == Transition(NORMAL, None)


def test_after_quiet_return_a_new_fall_is_announced_again() -> None:
    state = next_state(APPROACHING, T, 2000).state
    assert next_state(state, T, 1400) == Transition(APPROACHING, APPROACHING)


# --- from below (hysteresis) -----------------------------------------------------------------


@pytest.mark.parametrize("balance", [-100, 0, 1000, 1001, 1500, 1501, 1999])
def test_below_stays_below_until_twice_threshold(balance: int) -> None:
    assert next_state(BELOW, T, balance) == Transition(BELOW, None)


def test_below_recovers_at_twice_threshold() -> None:
    assert next_state(BELOW, T, 2000) == Transition(NORMAL, RECOVERED)
    assert next_state(BELOW, T, 2001) == Transition(NORMAL, RECOVERED)


def test_recovered_then_normal_is_quiet() -> None:
    state = next_state(BELOW, T, 2500).state
    assert next_state(state, T, 2400) == Transition(NORMAL, None)


# --- no threshold -----------------------------------------------------------------------------


@pytest.mark.parametrize("state", [NORMAL, APPROACHING, BELOW])
@pytest.mark.parametrize("balance", [-1, 0, 1, 10**12])
def test_no_threshold_means_normal_and_silent(state: str, balance: int) -> None:
    assert next_state(state, None, balance) == Transition(NORMAL, None)


# --- exact boundaries with an odd threshold ---------------------------------------------------


def test_exact_boundaries_with_odd_threshold() -> None:
    t = 7  # 1.5 T = 10.5, 2 T = 14
    assert next_state(NORMAL, t, 11) == Transition(NORMAL, None)
    assert next_state(NORMAL, t, 10) == Transition(APPROACHING, APPROACHING)
    assert next_state(NORMAL, t, 8) == Transition(APPROACHING, APPROACHING)
    assert next_state(NORMAL, t, 7) == Transition(BELOW, BELOW)
    assert next_state(APPROACHING, t, 13) == Transition(APPROACHING, None)
    assert next_state(APPROACHING, t, 14) == Transition(NORMAL, None)
    assert next_state(BELOW, t, 13) == Transition(BELOW, None)
    assert next_state(BELOW, t, 14) == Transition(NORMAL, RECOVERED)


def test_exact_one_and_a_half_boundary_with_even_threshold() -> None:
    t = 1001  # 1.5 T = 1501.5
    assert next_state(NORMAL, t, 1502) == Transition(NORMAL, None)
    assert next_state(NORMAL, t, 1501) == Transition(APPROACHING, APPROACHING)


def test_zero_threshold() -> None:
    assert next_state(NORMAL, 0, 1) == Transition(NORMAL, None)
    assert next_state(NORMAL, 0, 0) == Transition(BELOW, BELOW)


# --- properties -------------------------------------------------------------------------------

STATE_ANNOUNCED = {APPROACHING: APPROACHING, BELOW: BELOW, RECOVERED: NORMAL}


@given(
    threshold=st.integers(min_value=0, max_value=10_000),
    balances=st.lists(st.integers(min_value=-1_000, max_value=30_000), max_size=60),
)
def test_notifications_follow_the_state_machine(threshold: int, balances: list[int]) -> None:
    state = NORMAL
    last_notification: str | None = None
    states_since_last: list[str] = []  # states held since the last notification was sent
    for balance in balances:
        step = next_state(state, threshold, balance)
        assert step.state in (NORMAL, APPROACHING, BELOW)
        if step.notify is not None:
            # Every notification reports a change of state, to the state it names.
            assert step.state != state
            assert STATE_ANNOUNCED[step.notify] == step.state
            if step.notify == RECOVERED:
                assert state == BELOW  # only right after being below the threshold
            if step.notify == last_notification:
                # The same notification twice only after the state left the announced one.
                assert any(s != step.state for s in states_since_last)
            last_notification = step.notify
            states_since_last = []
        # Hysteresis: below_threshold is left only at >= 2 T, and only with `recovered`.
        if state == BELOW and step.state != BELOW:
            assert balance >= 2 * threshold
            assert step.notify == RECOVERED
        state = step.state
        states_since_last.append(state)


@given(
    balances=st.lists(st.integers(min_value=-(10**9), max_value=10**9), max_size=30),
    start=st.sampled_from([NORMAL, APPROACHING, BELOW]),
)
def test_without_threshold_nothing_is_ever_sent(balances: list[int], start: str) -> None:
    state = start
    for balance in balances:
        step = next_state(state, None, balance)
        assert step == Transition(NORMAL, None)
        state = step.state
