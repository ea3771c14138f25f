"""A local webhook receiver that verifies every delivery's signature against the server's
JWKS."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from bankrail.testing._jws import SignatureInvalid, verify_with_jwks

__all__ = ["BankrailWebhooks", "WebhookDelivery", "WebhookTimeout"]

PAYMENTS_PATH = "/bankrail/payments"
PAYOUTS_PATH = "/bankrail/payouts"


class WebhookTimeout(AssertionError):
    """The awaited webhook did not arrive in time; the message lists what did."""


@dataclass(frozen=True)
class WebhookDelivery:
    """One request the receiver got: `event` is the parsed body, `verified` whether its
    signature checked out (else `error` says why; it was answered 401)."""

    path: str
    headers: dict[str, str]
    body: bytes
    event: dict[str, Any] | None
    verified: bool
    error: str | None

    @property
    def type(self) -> str | None:
        """The event type: `type` (payments API v3) or `event_type` (payouts API v1)."""
        if self.event is None:
            return None
        found = self.event.get("type", self.event.get("event_type"))
        return str(found) if found is not None else None

    def describe(self) -> str:
        """One line: type, event_id, path and whether it verified."""
        event_id = (self.event or {}).get("event_id")
        state = "verified" if self.verified else f"REJECTED ({self.error})"
        return f"{self.type} event_id={event_id} at {self.path} {state}"


def _matches(event: dict[str, Any], fields: dict[str, Any]) -> bool:
    body = event.get("event_body")
    for name, value in fields.items():
        if event.get(name) != value and not (isinstance(body, dict) and body.get(name) == value):
            return False
    return True


class BankrailWebhooks:
    """A threaded HTTP server on `host` (default 127.0.0.1) receiving a merchant's webhooks:
    v3 events at `payments_uri`, v1 events at `payouts_uri`.

    Every delivery is verified (ES512, `tl_headers` as sent, keys from
    `{server}/.well-known/jwks`, fetched again when an unknown `kid` appears) and answered
    200, or 401 when it does not verify.
    """

    def __init__(self, server_url: str, host: str = "127.0.0.1") -> None:
        self._server_url = server_url.rstrip("/")
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._deliveries: list[WebhookDelivery] = []
        self._jwks: dict[str, Any] = {"keys": []}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                delivery = receiver._receive(self.path, headers, body)
                self.send_response(200 if delivery.verified else 401)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="bankrail-webhooks", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """The receiver's base URL."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def payments_uri(self) -> str:
        """Where the payments API v3 events are to be sent."""
        return self.url + PAYMENTS_PATH

    @property
    def payouts_uri(self) -> str:
        """Where the payouts API v1 events are to be sent."""
        return self.url + PAYOUTS_PATH

    def _verify(self, path: str, headers: dict[str, str], body: bytes) -> str | None:
        signature = headers.get("svc-signature")
        if signature is None:
            return "no Svc-Signature header"
        for attempt in range(2):
            if attempt or not self._jwks["keys"]:
                try:
                    self._jwks = httpx.get(
                        f"{self._server_url}/.well-known/jwks", timeout=10
                    ).json()
                except (httpx.HTTPError, ValueError) as exc:
                    return f"cannot fetch the JWKS: {exc}"
            try:
                verify_with_jwks(
                    self._jwks, signature, method="POST", path=path, headers=headers, body=body
                )
            except SignatureInvalid as exc:
                error = str(exc)
                if "no key with kid" in error and attempt == 0:
                    continue
                return error
            return None
        return "no key with that kid in the JWKS"

    def _receive(self, path: str, headers: dict[str, str], body: bytes) -> WebhookDelivery:
        error = self._verify(path, headers, body)
        try:
            parsed = json.loads(body)
            event = parsed if isinstance(parsed, dict) else None
        except ValueError:
            event = None
        if event is None and error is None:
            error = "the body is not a JSON object"
        delivery = WebhookDelivery(path, headers, body, event, error is None, error)
        with self._arrived:
            self._deliveries.append(delivery)
            self._arrived.notify_all()
        return delivery

    @property
    def deliveries(self) -> list[WebhookDelivery]:
        """Every request received so far, verified or not, in arrival order."""
        with self._lock:
            return list(self._deliveries)

    @property
    def events(self) -> list[dict[str, Any]]:
        """The verified events received so far, in arrival order (a retried event appears
        once per delivery: de-duplicate on `event_id`)."""
        return [d.event for d in self.deliveries if d.verified and d.event is not None]

    def wait_for(self, type: str, timeout: float = 10.0, **fields: Any) -> dict[str, Any]:
        """The first verified event of this type (whose top-level or v1 `event_body` fields
        equal `fields`, e.g. `payment_id=...`), received already or within `timeout`
        seconds; raises WebhookTimeout listing every delivery received otherwise."""
        return self.wait_for_all(type, 1, timeout, **fields)[0]

    def wait_for_all(
        self, type: str, count: int, timeout: float = 10.0, **fields: Any
    ) -> list[dict[str, Any]]:
        """The first `count` verified deliveries of such events (a retried or replayed event
        arrives again with the same `event_id`), as `wait_for`."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while True:
                found = [
                    d.event
                    for d in self._deliveries
                    if d.verified
                    and d.event is not None
                    and d.type == type
                    and _matches(d.event, fields)
                ]
                if len(found) >= count:
                    return found[:count]
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._arrived.wait(left)
            received = [d.describe() for d in self._deliveries]
        wanted = type + "".join(f" {k}={v}" for k, v in fields.items())
        if count > 1:
            wanted = f"{count} x {wanted}"
        listing = "\n".join(f"  - {line}" for line in received) or "  (none)"
        raise WebhookTimeout(
            f"no verified {wanted} webhook within {timeout}s; "
            f"{len(received)} deliveries received:\n{listing}"
        )

    def close(self) -> None:
        """Stop receiving."""
        self._server.shutdown()
        self._server.server_close()
