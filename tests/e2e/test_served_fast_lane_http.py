"""The fast lane as `bankrail serve` runs it: answered from the HTTP protocol, ahead of the
application (web/http_protocol.py). On one kept-alive connection, requests sent together are
answered in order, each whole, whether the lane or the application answers it; the
connection stays open until a request says `Connection: close`; and the bodies the lane
leaves to the application (`Expect: 100-continue`, chunked) are answered there as before.

Raw sockets, so that what is on the wire is what is checked. (That the lane's answers equal
the router's is tests/e2e/test_fast_lane_http.py.)
"""

from __future__ import annotations

import json
import socket
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from payout_helpers import (
    PATH,
    SORT_CODE,
    create_payout,
    external_beneficiary,
    funded_merchant,
    payout_body,
)

from support.api import MerchantClient, Operator
from support.server import RunningServer


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Wire:
    """One TCP connection to the server, read answer by answer."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host = f"{parts.hostname}:{parts.port}"
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, *requests: bytes) -> None:
        self.sock.sendall(b"".join(requests))

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def answer(self) -> Answer:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), f"connection closed mid-answer: {self.buffer!r}"
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            assert name.lower() not in headers, f"header {name} twice"
            headers[name.lower()] = value.strip()
        length = int(headers["content-length"])
        while len(self.buffer) < length:
            assert self._fill(), "connection closed mid-body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return Answer(int(status_line.split(" ")[1]), headers, body)

    def closed_by_server(self) -> bool:
        return self.buffer == b"" and not self._fill()

    def request(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _signed_payout(
    merchant: MerchantClient, *, chunked: bool = False
) -> tuple[dict[str, str], bytes]:
    body = json.dumps(payout_body(merchant, "GBP", 10, external_beneficiary(SORT_CODE))).encode()
    key = str(uuid.uuid4())
    headers = {
        "Authorization": f"Bearer {merchant.token()}",
        "Content-Type": "application/json",
        "Idempotency-Key": key,
        "Svc-Signature": merchant.sign("POST", PATH, body, {"Idempotency-Key": key}),
    }
    if chunked:
        headers["Transfer-Encoding"] = "chunked"
    else:
        headers["Content-Length"] = str(len(body))
    return headers, body


def test_requests_sent_together_are_answered_in_order_on_one_connection(
    server: RunningServer, operator: Operator
) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    payout_id = create_payout(
        merchant, payout_body(merchant, "GBP", 10, external_beneficiary(SORT_CODE))
    )
    auth = {"Authorization": f"Bearer {merchant.token()}"}
    wire = Wire(server.base_url)
    try:
        post_headers, post_body = _signed_payout(merchant)
        wire.send(
            wire.request("GET", f"/v3/payouts/{payout_id}", auth),  # the lane
            wire.request("POST", PATH, post_headers, post_body),  # the lane
            wire.request("GET", f"/v3/payouts/{uuid.uuid4()}", auth),  # handed on: 404
            wire.request("GET", "/v3/merchant-accounts", auth),  # the application's
            wire.request("GET", f"/v3/payouts/{payout_id}", auth),  # the lane again
        )
        answers = [wire.answer() for _ in range(5)]
        assert [a.status for a in answers] == [200, 202, 404, 200, 200]
        first, accepted, missing, accounts, again = answers
        assert first.json()["id"] == again.json()["id"] == payout_id  # it may execute between
        assert set(accepted.json()) == {"id"}
        assert missing.headers["content-type"] == "application/problem+json"
        assert accounts.json()["items"]
        for answer in answers:
            assert "connection" not in answer.headers
            assert answer.headers["date"]
        assert len({a.headers["svc-trace-id"] for a in answers}) == 5

        # The payout the lane accepted is the merchant's.
        new_id = accepted.json()["id"]
        assert merchant.get(f"/v3/payouts/{new_id}").status_code == 200

        wire.send(wire.request("GET", f"/v3/payouts/{payout_id}", {**auth, "Connection": "close"}))
        last = wire.answer()
        assert last.status == 200
        assert last.headers["connection"] == "close"
        assert wire.closed_by_server()
    finally:
        wire.close()


def test_a_body_behind_expect_continue_or_chunked_is_answered_by_the_application(
    server: RunningServer, operator: Operator
) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    wire = Wire(server.base_url)
    try:
        headers, body = _signed_payout(merchant)
        wire.send(wire.request("POST", PATH, {**headers, "Expect": "100-continue"}))
        interim = wire.sock.recv(64)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim
        wire.buffer = interim[len(b"HTTP/1.1 100 Continue\r\n\r\n") :]
        wire.send(body)
        continued = wire.answer()
        assert continued.status == 202, continued.body

        headers, body = _signed_payout(merchant, chunked=True)
        chunks = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        wire.send(wire.request("POST", PATH, headers, chunks))
        chunked = wire.answer()
        assert chunked.status == 202, chunked.body
        for answer in (continued, chunked):
            payout_id = answer.json()["id"]
            assert merchant.get(f"/v3/payouts/{payout_id}").status_code == 200
    finally:
        wire.close()
