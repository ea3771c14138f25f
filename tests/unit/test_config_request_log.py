"""BANKRAIL_REQUEST_LOG_RETENTION_SECONDS: the request log keeps 7 days in the sandbox and
nothing in production unless the operator sets a retention; 0 turns it off."""

from __future__ import annotations

import pytest

from bankrail.config import settings_from_env

WEEK = 7 * 86400


@pytest.mark.parametrize(
    ("mode", "value", "expected"),
    [
        ("sandbox", None, WEEK),
        ("sandbox", "0", 0),
        ("sandbox", "3600", 3600),
        ("production", None, 0),
        ("production", "86400", 86400),
    ],
)
def test_the_retention_of_each_mode(
    monkeypatch: pytest.MonkeyPatch, mode: str, value: str | None, expected: int
) -> None:
    monkeypatch.setenv("BANKRAIL_MODE", mode)
    if value is None:
        monkeypatch.delenv("BANKRAIL_REQUEST_LOG_RETENTION_SECONDS", raising=False)
    else:
        monkeypatch.setenv("BANKRAIL_REQUEST_LOG_RETENTION_SECONDS", value)
    assert settings_from_env().request_log_retention == expected


def test_a_negative_retention_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BANKRAIL_REQUEST_LOG_RETENTION_SECONDS", "-1")
    with pytest.raises(ValueError, match="BANKRAIL_REQUEST_LOG_RETENTION_SECONDS must be 0"):
        settings_from_env()
