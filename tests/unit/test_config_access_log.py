"""BANKRAIL_ACCESS_LOG: the sandbox's line per request, on unless turned off; and what each
mode writes per request (app.access_log_of)."""

from __future__ import annotations

import pytest

from bankrail.app import access_log_of
from bankrail.config import settings_from_env
from bankrail.http.middleware import log_access


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, True), ("", True), ("on", True), ("ON", True), ("off", False), ("0", False)],
)
def test_the_access_line_is_on_unless_turned_off(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: bool
) -> None:
    if value is None:
        monkeypatch.delenv("BANKRAIL_ACCESS_LOG", raising=False)
    else:
        monkeypatch.setenv("BANKRAIL_ACCESS_LOG", value)
    assert settings_from_env().access_log is expected


def test_another_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BANKRAIL_ACCESS_LOG", "sometimes")
    with pytest.raises(ValueError, match="BANKRAIL_ACCESS_LOG must be on or off"):
        settings_from_env()


def test_production_keeps_its_json_record_whatever_the_setting() -> None:
    settings = settings_from_env().with_overrides(mode="production", access_log=False)
    assert access_log_of(settings) is log_access
    sandbox = settings.with_overrides(mode="sandbox")
    assert access_log_of(sandbox) is None
    assert access_log_of(sandbox.with_overrides(access_log=True)) is not None
