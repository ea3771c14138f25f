"""`bankrail trigger <event>`: make a running Bankrail send a webhook by creating the real
objects that lead to it, over HTTP only (the operator API, the sandbox, the merchant API with
a client and signing key registered for the purpose, and the headless mock bank).

The events and their recipes are in `_trigger_events.py`, the HTTP session they run in is in
`_trigger_session.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from bankrail.sandbox._trigger_events import EVENTS, Event
from bankrail.sandbox._trigger_session import Session, Triggered, TriggerError
from bankrail.testing import ServerError, probe_server

__all__ = [
    "DEFAULT_URL",
    "EVENTS",
    "SERVER_URL_FILE",
    "TriggerError",
    "Triggered",
    "check_reachable",
    "default_merchant_id",
    "known_event",
    "record_server_url",
    "recorded_admin_token",
    "recorded_demo",
    "recorded_server_url",
    "trigger",
]

DEMO_CREDENTIALS = "demo-credentials.json"
DEFAULT_URL = "http://127.0.0.1:8080"
SERVER_URL_FILE = "server-url"
"""The file of a data directory in which `bankrail serve` records the base URL it serves."""


def record_server_url(data_dir: Path, url: str) -> None:
    """Record, when the data directory exists, the base URL that a `serve` on it answers at,
    so that the commands run beside it (`bankrail trigger`) find it without options."""
    if data_dir.is_dir():
        (data_dir / SERVER_URL_FILE).write_text(url + "\n")


def recorded_demo(data_dir: Path) -> dict[str, object]:
    """The demo merchant `bankrail init` kept in `data_dir` (its credentials file), or {}."""
    try:
        saved = json.loads((data_dir / DEMO_CREDENTIALS).read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def recorded_server_url(data_dir: Path) -> str:
    """The base URL of the last `serve` on `data_dir`, else that of its demo merchant, else
    DEFAULT_URL."""
    try:
        recorded = (data_dir / SERVER_URL_FILE).read_text().strip()
    except OSError:
        recorded = ""
    return recorded or str(recorded_demo(data_dir).get("base_url") or DEFAULT_URL)


def recorded_admin_token(data_dir: Path) -> str | None:
    """The operator token kept in `data_dir` (its admin-token file, else the demo's)."""
    try:
        token = (data_dir / "admin-token").read_text().strip()
    except OSError:
        token = ""
    return token or (str(recorded_demo(data_dir).get("admin_token") or "") or None)


def check_reachable(url: str) -> None:
    """Raise TriggerError at once, saying which, when nothing listens at `url`, what answers
    is not Bankrail, or it is not ready."""
    try:
        ready = probe_server(url)
    except ServerError as exc:
        raise TriggerError(str(exc)) from None
    if not ready:
        raise TriggerError(f"the Bankrail server at {url} is not ready (GET /readyz answers 503)")


def default_merchant_id(url: str, admin_token: str, data_dir: Path) -> str:
    """The demo merchant of `data_dir` (its demo-credentials.json, written by `bankrail init`
    or `serve --demo`), else the oldest merchant the operator API lists."""
    saved = data_dir / DEMO_CREDENTIALS
    if saved.is_file():
        try:
            return str(json.loads(saved.read_text())["merchant_id"])
        except (ValueError, KeyError, OSError):
            pass
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=30
    ) as operator:
        try:
            answer = operator.get("/admin/merchants")
        except httpx.HTTPError as exc:
            raise TriggerError(f"cannot reach {url}: {exc}") from None
        if answer.status_code != 200:
            raise TriggerError(f"GET /admin/merchants answered {answer.status_code}: {answer.text}")
        merchants = answer.json()
    if not merchants:
        raise TriggerError("the server has no merchant: run `bankrail init`, or give --merchant-id")
    return str(merchants[0]["id"])


def known_event(event: str) -> Event:
    """The event named `event`; TriggerError when there is none of that name."""
    found = EVENTS.get(event)
    if found is None:
        raise TriggerError(f"unknown event {event!r}; `bankrail trigger --list` names them")
    return found


def trigger(
    event: str, *, url: str, admin_token: str, merchant_id: str, timeout: float = 30
) -> Triggered:
    """Make `event` happen for the merchant and return what was made, once the event is
    recorded."""
    found = known_event(event)
    session = Session(url.rstrip("/"), admin_token, merchant_id)
    try:
        session.register()
        return found.run(session, event, timeout)
    except httpx.HTTPError as exc:
        raise TriggerError(f"cannot reach {url}: {exc}") from None
    finally:
        session.close()
