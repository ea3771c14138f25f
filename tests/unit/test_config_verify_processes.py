"""BANKRAIL_VERIFY_PROCESSES: how many worker processes verify request signatures."""

from __future__ import annotations

import pytest

from bankrail.config import settings_from_env


def test_two_verifier_processes_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BANKRAIL_VERIFY_PROCESSES", raising=False)
    assert settings_from_env().verify_processes == 2
    monkeypatch.setenv("BANKRAIL_VERIFY_PROCESSES", "0")
    assert settings_from_env().verify_processes == 0  # verify on threads


def test_a_negative_count_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BANKRAIL_VERIFY_PROCESSES", "-1")
    with pytest.raises(ValueError, match="BANKRAIL_VERIFY_PROCESSES"):
        settings_from_env()
