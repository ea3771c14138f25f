"""BANKRAIL_SIGNATURE_REPLAY_WINDOW_SECONDS: how long an accepted signature is remembered."""

from __future__ import annotations

import pytest

from bankrail.config import settings_from_env


def test_thirty_days_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BANKRAIL_SIGNATURE_REPLAY_WINDOW_SECONDS", raising=False)
    assert settings_from_env().signature_replay_window_seconds == 30 * 86400
    monkeypatch.setenv("BANKRAIL_SIGNATURE_REPLAY_WINDOW_SECONDS", "604800")
    assert settings_from_env().signature_replay_window_seconds == 7 * 86400


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_window_that_is_not_positive_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("BANKRAIL_SIGNATURE_REPLAY_WINDOW_SECONDS", value)
    with pytest.raises(ValueError, match="BANKRAIL_SIGNATURE_REPLAY_WINDOW_SECONDS"):
        settings_from_env()
