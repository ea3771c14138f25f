"""`bankrail listen`: the merchant's webhooks, received from a Bankrail running elsewhere
through a stream this process opens to it (no inbound port, no tunnel), forwarded to a local
URL with their original headers and body, one line printed per delivery.

The listener's identity is a UUID kept in the data directory (`listener-id`) or given with
`--listener-id`: the server keeps the listener's deliveries under it, so a reconnect, a
restart of this command or of the server loses no event (docs/webhooks.md, "Listeners").
Each forwarded delivery's local answer is reported to the server with a signed POST; only a
2xx counts as answered, anything else is sent again on the webhook retry schedule.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from bankrail._shell import Credentials, ShellError
from bankrail.testing import BankrailAuth

__all__ = ["Forwarder", "ServerEvent", "listener_id", "parse_event_types", "parse_events"]

LISTENER_ID_FILE = "listener-id"
# The waits between attempts to reach the server again, after the first (then the last).
BACKOFF_SECONDS = (0.5, 1.0, 2.0, 5.0, 10.0)
# The server sends something at least every 10 s and ends each stream within its deadline.
READ_TIMEOUT_SECONDS = 60.0
FORWARD_TIMEOUT_SECONDS = 10.0


def listener_id(given: str | None, data_dir: Path) -> uuid.UUID:
    """The listener id: the one given, else the one kept in `data_dir/listener-id` (made and
    kept there on first use). Raises ShellError for an id that is not a UUID."""
    if given is not None:
        try:
            return uuid.UUID(given)
        except ValueError:
            raise ShellError(f"--listener-id must be a UUID, not {given!r}") from None
    kept = data_dir / LISTENER_ID_FILE
    try:
        return uuid.UUID(kept.read_text().strip())
    except (OSError, ValueError):
        made = uuid.uuid4()
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            kept.write_text(f"{made}\n")
        except OSError as exc:
            raise ShellError(f"cannot keep the listener id in {kept}: {exc.strerror}") from None
        return made


def parse_event_types(events: str | None) -> list[str] | None:
    """The event types of `--events a,b` (None: every event)."""
    if events is None:
        return None
    types = [t.strip() for t in events.split(",") if t.strip()]
    return types or None


@dataclass(frozen=True)
class ServerEvent:
    """One server-sent event: its type (`message` when unnamed), id and data."""

    event: str
    id: str | None
    data: str


def parse_events(lines: Iterator[str]) -> Iterator[ServerEvent]:
    """The server-sent events of a text/event-stream, line by line (comments and `retry`
    skipped; an event ends at a blank line)."""
    event: str = "message"
    event_id: str | None = None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield ServerEvent(event, event_id, "\n".join(data))
            event, event_id, data = "message", None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            event_id = value


class Forwarder:
    """Reads the listener's stream and forwards each delivery to `forward_to`, until
    interrupted; reconnects with backoff when the server goes away."""

    def __init__(
        self,
        who: Credentials,
        forward_to: str,
        event_types: list[str] | None,
        listener: uuid.UUID,
        out: Callable[[str], None],
        err: Callable[[str], None],
    ) -> None:
        self._who = who
        self._forward_to = forward_to
        self._types = event_types
        self._listener = listener
        self._out = out
        self._err = err
        self._auth = BankrailAuth(who.client_id, who.client_secret, who.kid, who.private_key_pem)
        self._token: str | None = None
        self._last_event_id: str | None = None
        self._attached = False  # a stream is open (said once per (re)connection)

    def run(self) -> None:
        """Forward until interrupted (KeyboardInterrupt propagates to the caller)."""
        failures = 0
        with (
            httpx.Client(base_url=self._who.url, timeout=READ_TIMEOUT_SECONDS) as server,
            httpx.Client(timeout=FORWARD_TIMEOUT_SECONDS) as local,
        ):
            while True:
                try:
                    if self._attach(server, local):
                        failures = 0
                        continue
                except httpx.HTTPError as exc:
                    self._err(f"lost the server ({type(exc).__name__}); reconnecting")
                self._attached = False
                wait = BACKOFF_SECONDS[min(failures, len(BACKOFF_SECONDS) - 1)]
                failures += 1
                time.sleep(wait)

    def _fetch_token(self, server: httpx.Client) -> str:
        answer = server.post(
            "/connect/token",
            data={
                "grant_type": "client_credentials",
                "client_id": self._who.client_id,
                "client_secret": self._who.client_secret,
            },
        )
        if answer.status_code != 200:
            raise ShellError(f"POST /connect/token answered {answer.status_code}: {answer.text}")
        return str(answer.json()["access_token"])

    def _attach(self, server: httpx.Client, local: httpx.Client) -> bool:
        """One stream, read to its end; True when it was read (reconnect at once), False
        when the server could not serve it (reconnect after a wait)."""
        if self._token is None:
            self._token = self._fetch_token(server)
        params = {"forward_path": urlsplit(self._forward_to).path or "/"}
        if self._types:
            params["events"] = ",".join(self._types)
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "text/event-stream"}
        if self._last_event_id:
            headers["Last-Event-ID"] = self._last_event_id
        path = f"/v3/webhook-listeners/{self._listener}/events"
        with server.stream("GET", path, params=params, headers=headers) as stream:
            if stream.status_code == 401:
                self._token = None
                return False
            if stream.status_code != 200:
                stream.read()
                if 400 <= stream.status_code < 500 and stream.status_code != 429:
                    raise ShellError(f"GET {path} answered {stream.status_code}: {stream.text}")
                self._err(f"the server answered {stream.status_code}; reconnecting")
                return False
            if not self._attached:
                self._attached = True
                self._err(f"attached as listener {self._listener}")
            for event in parse_events(stream.iter_lines()):
                if event.event == "webhook":
                    self._last_event_id = event.id
                    self._forward(server, local, json.loads(event.data))
        return True

    def _forward(self, server: httpx.Client, local: httpx.Client, delivery: dict[str, Any]) -> None:
        """Send one delivery to the local URL as the registered URI would get it, print its
        line, and report the answer."""
        started = time.perf_counter()
        status: int | None = None
        error: str | None = None
        try:
            answer = local.post(
                self._forward_to,
                content=delivery["body"].encode(),
                headers=delivery["headers"],
            )
            status = answer.status_code
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:500] or type(exc).__name__
        latency = (time.perf_counter() - started) * 1000
        at = datetime.now(UTC).strftime("%H:%M:%S")
        shown = str(status) if status is not None else f"error ({error})"
        retry = f" (attempt {delivery['attempt']})" if delivery.get("attempt", 1) > 1 else ""
        self._out(f"{at}  {delivery['event_type']}  {delivery['event_id']}  -> {shown}{retry}")
        report = {"status_code": status, "error": error, "latency_ms": round(latency, 3)}
        path = (
            f"/v3/webhook-listeners/{self._listener}/deliveries/{delivery['delivery_id']}/answers"
        )
        # 409: the server no longer awaits this answer (a reconnect took the delivery back);
        # it sends the delivery again.
        server.post(
            path,
            content=json.dumps(report).encode(),
            headers={"Content-Type": "application/json"},
            auth=self._auth,
        )
