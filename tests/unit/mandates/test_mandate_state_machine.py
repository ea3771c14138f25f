"""The mandate's state machine (bankrail.mandates.models, docs/api.md "Mandates"): the legal
path, every illegal step, failure stages, revocation and the 15-minute window."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from bankrail.mandates.models import (
    AUTHORIZATION_WINDOW,
    FailureReason,
    InvalidTransition,
    MandateState,
    MandateStatus,
    RevocationSource,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=1)
T2 = T0 + timedelta(seconds=2)
S = MandateStatus


def _created() -> MandateState:
    return MandateState(S.AUTHORIZATION_REQUIRED, T0)


def _authorizing() -> MandateState:
    return _created().start_authorization()


def _authorized() -> MandateState:
    return _authorizing().authorize(T1)


def _failed() -> MandateState:
    return _authorizing().fail(T1, FailureReason.AUTHORIZATION_FAILED)


def _revoked() -> MandateState:
    return _authorized().revoke(T2, RevocationSource.CLIENT)


STATES: dict[MandateStatus, Callable[[], MandateState]] = {
    S.AUTHORIZATION_REQUIRED: _created,
    S.AUTHORIZING: _authorizing,
    S.AUTHORIZED: _authorized,
    S.FAILED: _failed,
    S.REVOKED: _revoked,
}
STEPS: dict[str, Callable[[MandateState], MandateState]] = {
    "start_authorization": lambda s: s.start_authorization(),
    "authorize": lambda s: s.authorize(T2),
    "fail": lambda s: s.fail(T2, FailureReason.EXPIRED),
    "revoke": lambda s: s.revoke(T2, RevocationSource.USER),
}
LEGAL = {
    (S.AUTHORIZATION_REQUIRED, "start_authorization"): S.AUTHORIZING,
    (S.AUTHORIZATION_REQUIRED, "fail"): S.FAILED,
    (S.AUTHORIZING, "authorize"): S.AUTHORIZED,
    (S.AUTHORIZING, "fail"): S.FAILED,
    (S.AUTHORIZED, "revoke"): S.REVOKED,
}


def test_the_path_to_authorised_records_when() -> None:
    state = _authorized()
    assert state.status is S.AUTHORIZED
    assert state.authorized_at == T1
    assert state.failed_at is None
    assert state.revoked_at is None


@pytest.mark.parametrize("status", list(STATES))
@pytest.mark.parametrize("step", list(STEPS))
def test_every_step_from_every_status(status: MandateStatus, step: str) -> None:
    state = STATES[status]()
    expected = LEGAL.get((status, step))
    if expected is None:
        with pytest.raises(InvalidTransition):
            STEPS[step](state)
    else:
        assert STEPS[step](state).status is expected


@pytest.mark.parametrize("stage", [S.AUTHORIZATION_REQUIRED, S.AUTHORIZING])
def test_a_failure_records_its_stage_and_reason(stage: MandateStatus) -> None:
    failed = STATES[stage]().fail(T2, FailureReason.EXPIRED)
    assert failed.failure_stage is stage
    assert failed.failure_reason is FailureReason.EXPIRED
    assert failed.failed_at == T2


@pytest.mark.parametrize("source", list(RevocationSource))
def test_revocation_records_its_source(source: RevocationSource) -> None:
    revoked = _authorized().revoke(T2, source)
    assert revoked.revocation_source is source
    assert revoked.revoked_at == T2
    assert revoked.authorized_at == T1


def test_the_window_is_fifteen_minutes_from_creation() -> None:
    assert timedelta(minutes=15) == AUTHORIZATION_WINDOW
    end = T0 + AUTHORIZATION_WINDOW
    for status in (S.AUTHORIZATION_REQUIRED, S.AUTHORIZING):
        state = STATES[status]()
        assert state.expires_at() == end
        assert not state.is_expired(end - timedelta(microseconds=1))
        assert state.is_expired(end)
    for status in (S.AUTHORIZED, S.FAILED, S.REVOKED):
        assert not STATES[status]().is_expired(end + timedelta(days=1))
