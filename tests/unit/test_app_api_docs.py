"""The front door, the favicon and the API reference at /docs: served in both modes, /docs
unless BANKRAIL_API_DOCS turns it off (docs/operations.md, "The API reference"). The
application is called in-process without its lifespan: these pages need no database."""

from __future__ import annotations

import asyncio
import secrets

import httpx
import pytest

from bankrail.app import create_app
from bankrail.config import Settings, settings_from_env


def _statuses(settings: Settings, *paths: str) -> dict[str, int]:
    app = create_app(settings, "postgresql://unused")

    async def get_all() -> dict[str, int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return {path: (await client.get(path)).status_code for path in paths}

    return asyncio.run(get_all())


@pytest.mark.parametrize("mode", ["sandbox", "production"])
def test_docs_are_served_in_either_mode_by_default(mode: str) -> None:
    settings = Settings(mode=mode, admin_token=secrets.token_urlsafe(32))  # type: ignore[arg-type]
    assert settings.api_docs is True
    statuses = _statuses(
        settings, "/docs", "/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"
    )
    assert statuses == dict.fromkeys(statuses, 200)


def test_the_operator_turns_the_docs_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BANKRAIL_API_DOCS", "off")
    settings = settings_from_env()
    assert settings.api_docs is False
    statuses = _statuses(settings, "/docs", "/docs/assets/swagger-ui.css", "/favicon.ico")
    assert statuses == {"/docs": 404, "/docs/assets/swagger-ui.css": 404, "/favicon.ico": 200}


def test_a_bad_value_of_the_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BANKRAIL_API_DOCS", "maybe")
    with pytest.raises(ValueError, match="BANKRAIL_API_DOCS must be on or off"):
        settings_from_env()
