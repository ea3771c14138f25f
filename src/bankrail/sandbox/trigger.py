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

from bankrail.sandbox._trigger_events import EVENTS
from bankrail.sandbox._trigger_session import Session, Triggered, TriggerError

__all__ = ["EVENTS", "TriggerError", "Triggered", "default_merchant_id", "trigger"]

DEMO_CREDENTIALS = "demo-credentials.json"


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


def trigger(
    event: str, *, url: str, admin_token: str, merchant_id: str, timeout: float = 30
) -> Triggered:
    """Make `event` happen for the merchant and return what was made, once the event is
    recorded."""
    found = EVENTS.get(event)
    if found is None:
        raise TriggerError(f"unknown event {event!r}; `bankrail trigger --list` names them")
    session = Session(url.rstrip("/"), admin_token, merchant_id)
    try:
        session.register()
        return found.run(session, event, timeout)
    except httpx.HTTPError as exc:
        raise TriggerError(f"cannot reach {url}: {exc}") from None
    finally:
        session.close()
