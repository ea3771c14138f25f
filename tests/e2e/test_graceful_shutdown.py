"""Graceful shutdown (issue 8, point 8): SIGTERM to `bankrail serve` stops it taking new
connections, answers in full every request it had already accepted, lets the webhook
deliveries in flight finish, and exits 0. Restarted on the same data directory, nothing is
partial: every payout answered 202 exists exactly once with its hold, a repeat of its request
replays the same answer, the ledger check is clean, and every event reaches the receiver.

The requests in flight are signed POST /v3/payouts whose bodies the client sends in two parts:
the server has read the headers and the first part (checked in /proc/net/tcp) when SIGTERM is
sent, and gets the rest only after it has stopped listening. The receiver holds its answers
until then, so the deliveries are in flight too.
"""

from __future__ import annotations

import json
import secrets
import signal
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_helpers import (
    is_uuid,
    merchant_sending_webhooks,
    private_data_dir,
    processes_mentioning,
    wait_for,
)
from payout_helpers import SORT_CODE, external_beneficiary, payout_body

from support.api import MerchantClient, Operator
from support.receiver import Answer, Received, WebhookReceiver
from support.server import RunningServer, free_port

pytestmark = pytest.mark.slow  # a server of its own, stopped with SIGTERM

TOP_UP = 1_000_000
# Payouts whose webhooks are in flight at SIGTERM: each delivery is attempted on its own, and
# two are within one destination's share, so both held deliveries are being sent at once.
DELIVERED_BEFORE = 2
IN_FLIGHT = 5  # requests the server is reading when SIGTERM comes
EXIT_BOUND = 45.0  # seconds from SIGTERM to exit
_LISTEN = "0A"


def _payout(merchant: MerchantClient, amount: int, reference: str) -> dict[str, Any]:
    beneficiary = external_beneficiary(SORT_CODE, reference=reference)
    return payout_body(merchant, "GBP", amount, beneficiary)


@dataclass
class SlowPost:
    """A signed POST /v3/payouts over its own connection, its body sent in two parts."""

    key: str
    body: dict[str, Any]
    sock: socket.socket
    rest: bytes

    @classmethod
    def begin(cls, merchant: MerchantClient, port: int, body: dict[str, Any]) -> SlowPost:
        """Connect and send the headers and all of the body but its last bytes."""
        key = str(uuid.uuid4())
        content = json.dumps(body).encode()
        signature = merchant.sign("POST", "/v3/payouts", content, {"Idempotency-Key": key})
        head = (
            "POST /v3/payouts HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {merchant.token()}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(content)}\r\n"
            f"Idempotency-Key: {key}\r\n"
            f"Svc-Signature: {signature}\r\n"
            "\r\n"
        ).encode()
        sock = socket.create_connection(("127.0.0.1", port), timeout=EXIT_BOUND)
        sock.sendall(head + content[:-8])
        return cls(key, body, sock, content[-8:])

    @property
    def client_port(self) -> int:
        """The local port of the connection."""
        return int(self.sock.getsockname()[1])

    def finish(self) -> tuple[int, dict[str, str], bytes]:
        """Send the rest of the body and read the whole answer (the server closes after it)."""
        self.sock.sendall(self.rest)
        received = b""
        while chunk := self.sock.recv(65536):
            received += chunk
        self.sock.close()
        head, _, payload = received.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        assert lines[0].startswith("HTTP/1.1 "), received[:200]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(lines[0].split()[1]), headers, payload


def _tcp_sockets() -> list[tuple[int, int, str, int]]:
    """IPv4 TCP sockets: (local port, remote port, state, bytes received but not yet read)."""
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        remote_port = int(fields[2].split(":")[1], 16)
        unread = int(fields[4].split(":")[1], 16)
        found.append((local_port, remote_port, fields[3], unread))
    return found


def _server_has_read(port: int, client_ports: set[int]) -> bool:
    """The server accepted every one of these connections and read all they sent so far."""
    read = {
        remote
        for local, remote, state, unread in _tcp_sockets()
        if local == port and state != _LISTEN and remote in client_ports and unread == 0
    }
    return read == client_ports


def _listening(port: int) -> bool:
    return any(local == port and state == _LISTEN for local, _, state, _ in _tcp_sockets())


class Gate:
    """Receiver behaviour: hold every answer until opened (at most 30 s), then answer 200."""

    def __init__(self) -> None:
        self.opened = threading.Event()

    def __call__(self, _request: Received, _index: int) -> Answer:
        self.opened.wait(timeout=30)
        return Answer(200)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory of the test's own (the server owns its embedded PostgreSQL there)."""
    with private_data_dir("bankrail-e2e-sigterm-") as path:
        yield path


def _payout_deliveries(operator: Operator, merchant: MerchantClient) -> list[Any]:
    answer = operator.get(
        "/admin/webhook-deliveries",
        merchant_id=merchant.merchant_id,
        event_type="payout_executed",
    )
    assert answer.status_code == 200, answer.text
    items: list[Any] = answer.json()["items"]
    return items


def _executed_ids(receiver: WebhookReceiver) -> set[str]:
    return {
        event["payout_id"]
        for r in receiver.snapshot()
        if r.path == "/payments" and (event := r.json())["type"] == "payout_executed"
    }


def test_sigterm_answers_in_flight_requests_finishes_deliveries_and_exits_zero(
    data_dir: Path,
) -> None:
    gate = Gate()
    receiver = WebhookReceiver(behaviour=gate)
    server = RunningServer(
        data_dir=data_dir,
        port=free_port(),
        admin_token="admin-" + secrets.token_urlsafe(24),
        env={"DATABASE_URL": "", "BANKRAIL_PUBLIC_URL": "", "BANKRAIL_MODE": "sandbox"},
    )
    slow: list[SlowPost] = []
    operator: Operator | None = None
    merchant: MerchantClient | None = None
    try:
        server.start()
        operator = Operator(server.base_url, server.admin_token)
        merchant = merchant_sending_webhooks(operator, f"{receiver.url}/payments", TOP_UP)

        # Payouts that execute at once: their webhooks reach the receiver, which holds them.
        quick: dict[str, int] = {}
        for n in range(DELIVERED_BEFORE):
            answer = merchant.signed_post("/v3/payouts", _payout(merchant, 1_000 + n, f"q{n}"))
            assert answer.status_code == 202, answer.text
            quick[answer.json()["id"]] = 1_000 + n
        receiver.wait_for(lambda seen: len(seen) >= DELIVERED_BEFORE, timeout=30)

        # Requests the server has accepted and is reading: payouts that wait for the clock.
        for n in range(IN_FLIGHT):
            body = _payout(merchant, 2_000 + n, f"slow {n} delay:600")
            slow.append(SlowPost.begin(merchant, server.port, body))
        ports = {post.client_port for post in slow}
        wait_for(
            lambda: _server_has_read(server.port, ports),
            timeout=20,
            what="the server to accept and read the in-flight requests",
        )

        assert server.process is not None
        process = server.process
        process.send_signal(signal.SIGTERM)
        wait_for(lambda: not _listening(server.port), timeout=20, what="the port to close")
        assert process.poll() is None, "serve exited with requests in flight"

        answers = [post.finish() for post in slow]
        for status, headers, payload in answers:
            assert status == 202, payload
            assert int(headers["content-length"]) == len(payload), (headers, payload)
            assert headers["svc-trace-id"]
            assert set(json.loads(payload)) == {"id"}
        accepted = {
            post.key: str(json.loads(payload)["id"])
            for post, (_, _, payload) in zip(slow, answers, strict=True)
        }
        assert all(is_uuid(i) for i in accepted.values())

        gate.opened.set()  # the deliveries in flight at SIGTERM are answered now
        code = process.wait(timeout=EXIT_BOUND)
        server.process = None
        assert code == 0, server.log_path.read_text(errors="replace")[-3000:]
        assert not processes_mentioning(data_dir), "serve left processes behind"

        # --- restarted on the same data directory: nothing partial ---------------------------
        server.start()
        operator.close()  # and the merchant's client: their connections were to the old process
        operator = Operator(server.base_url, server.admin_token)
        merchant.http = httpx.Client(base_url=server.base_url, timeout=30)
        # The deliveries in flight at SIGTERM were finished and recorded by the old process; one
        # it abandoned would still carry its 60 s lease and no attempt.
        in_flight = _payout_deliveries(operator, merchant)
        assert len(in_flight) == DELIVERED_BEFORE, in_flight
        for delivery in in_flight:
            assert delivery["attempt_count"] >= 1, delivery
        for post in slow:  # a client that lost its answer sends the same request again
            again = merchant.signed_post("/v3/payouts", post.body, idempotency_key=post.key)
            assert again.status_code == 202, again.text
            assert again.json()["id"] == accepted[post.key]
        for payout_id in accepted.values():
            record = merchant.get(f"/v3/payouts/{payout_id}")
            assert record.status_code == 200, record.text
            assert record.json()["status"] in {"pending", "authorized"}, record.text

        account_id = merchant.accounts["GBP"]["id"]
        listed = merchant.get(
            f"/v3/merchant-accounts/{account_id}/transactions", type="payout", limit=1000
        )
        assert listed.status_code == 200, listed.text
        on_books = sorted(item["id"] for item in listed.json()["items"])
        assert on_books == sorted([*quick, *accepted.values()]), "payouts not exactly once"
        held = sum(post.body["amount_in_minor"] for post in slow)
        account = merchant.get(f"/v3/merchant-accounts/{account_id}").json()
        assert account["current_balance_in_minor"] == TOP_UP - sum(quick.values())
        assert account["available_balance_in_minor"] == TOP_UP - sum(quick.values()) - held
        check = operator.get("/admin/ledger/check")
        assert check.status_code == 200, check.text
        assert check.json() == {"ok": True, "violations": []}

        # The held payouts execute when the clock moves, and every event reaches the receiver.
        advanced = operator.post("/sandbox/clock/advance", {"seconds": 600})
        assert advanced.status_code == 200, advanced.text
        everything = set(quick) | set(accepted.values())
        receiver.wait_for(lambda _seen: everything <= _executed_ids(receiver), timeout=30)

        def all_delivered() -> list[Any] | None:
            items = _payout_deliveries(operator, merchant)
            assert len(items) == len(everything), items
            return items if all(i["status"] == "delivered" for i in items) else None

        wait_for(all_delivered, timeout=30, what="every delivery to be recorded delivered")
        account = merchant.get(f"/v3/merchant-accounts/{account_id}").json()
        total = sum(quick.values()) + held
        assert account["current_balance_in_minor"] == TOP_UP - total
        assert account["available_balance_in_minor"] == TOP_UP - total
    finally:
        gate.opened.set()
        for post in slow:
            post.sock.close()
        if operator is not None:
            operator.close()
        if merchant is not None:
            merchant.http.close()
        if server.process is not None:
            server.stop()
        receiver.close()
