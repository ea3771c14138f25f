"""BANKRAIL_WEBHOOK_DESTINATION_CONCURRENCY: webhook attempts in flight to one destination."""

from __future__ import annotations

import pytest

from bankrail.config import settings_from_env


def test_eight_per_destination_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BANKRAIL_WEBHOOK_DESTINATION_CONCURRENCY", raising=False)
    assert settings_from_env().webhook_destination_concurrency == 8
    monkeypatch.setenv("BANKRAIL_WEBHOOK_DESTINATION_CONCURRENCY", "32")
    assert settings_from_env().webhook_destination_concurrency == 32


@pytest.mark.parametrize("value", ["0", "-1"])
def test_no_share_at_all_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    # A share of 0 would never deliver anything.
    monkeypatch.setenv("BANKRAIL_WEBHOOK_DESTINATION_CONCURRENCY", value)
    with pytest.raises(ValueError, match="BANKRAIL_WEBHOOK_DESTINATION_CONCURRENCY"):
        settings_from_env()
