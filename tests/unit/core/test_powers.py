"""Which sandbox powers a service has (`core.powers`, `Settings.powers`): every power in
sandbox mode; none in production unless BANKRAIL_MOCK_PROVIDERS=on turns on the mock
providers and the outcome tokens for a staging deployment, never the sandbox routes."""

from __future__ import annotations

import pytest

from bankrail.config import settings_from_env
from bankrail.core.powers import SANDBOX, SandboxPowers


def _powers(monkeypatch: pytest.MonkeyPatch, mode: str, mock: str | None) -> SandboxPowers:
    monkeypatch.setenv("BANKRAIL_MODE", mode)
    if mock is None:
        monkeypatch.delenv("BANKRAIL_MOCK_PROVIDERS", raising=False)
    else:
        monkeypatch.setenv("BANKRAIL_MOCK_PROVIDERS", mock)
    return settings_from_env().powers


@pytest.mark.parametrize("mock", [None, "off", "on"])
def test_a_sandbox_has_every_power(monkeypatch: pytest.MonkeyPatch, mock: str | None) -> None:
    assert _powers(monkeypatch, "sandbox", mock) == SANDBOX
    assert SandboxPowers(sandbox_routes=True, mock_providers=True, outcome_tokens=True) == SANDBOX


@pytest.mark.parametrize("mock", [None, "off", "OFF", ""])
def test_production_has_no_power(monkeypatch: pytest.MonkeyPatch, mock: str | None) -> None:
    assert _powers(monkeypatch, "production", mock) == SandboxPowers(
        sandbox_routes=False, mock_providers=False, outcome_tokens=False
    )


def test_staging_turns_on_the_mock_providers_and_outcome_tokens_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _powers(monkeypatch, "production", "on") == SandboxPowers(
        sandbox_routes=False, mock_providers=True, outcome_tokens=True
    )


@pytest.mark.parametrize("value", ["yes", "1", "true", "maybe"])
def test_another_value_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    with pytest.raises(ValueError, match="BANKRAIL_MOCK_PROVIDERS must be on or off"):
        _powers(monkeypatch, "production", value)
