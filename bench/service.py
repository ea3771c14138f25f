"""The service under measurement: a `bankrail serve` subprocess on a fresh embedded
database, a seeded merchant able to sign, and the signed requests and bodies the scenarios
send (prepared as bytes before any clock starts)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bankrail.security import signing
from bench.loadgen import http_request
from bench.processes import server_processes


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A `bankrail serve` subprocess on a fresh embedded database."""

    workers: int
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    admin_token: str = ""
    data_dir: Path | None = None
    # Environment of the server besides the bench's own; and where its output goes (by
    # default nowhere).
    env: dict[str, str] = field(default_factory=dict)
    output: Path | None = None
    # The interpreter that runs it: another tree's, to measure two side by side.
    python: str = sys.executable

    ready_seconds: float = 0.0

    def start(self) -> None:
        """Start on a fresh data directory and wait until it answers."""
        self.port = free_port()
        self.admin_token = "admin-" + secrets.token_urlsafe(16)
        self.data_dir = Path(tempfile.mkdtemp(prefix="bankrail-bench-serve-"))
        self._launch()

    def restart(self) -> float:
        """Stop, start again on the same (existing) data directory, and return the seconds
        until it answered `/readyz` (the "ready within 3 s" figure)."""
        self.stop()
        self._launch()
        return self.ready_seconds

    def _launch(self) -> None:
        assert self.data_dir is not None
        env = {
            **os.environ,
            "BANKRAIL_ADMIN_TOKEN": self.admin_token,
            "BANKRAIL_LOG_LEVEL": "WARNING",
            # The per-client rate limit (1,000/s by default) would answer 429 to the
            # benchmark's single client: it measures the server, so the limit is lifted.
            "BANKRAIL_RATE_LIMIT_PER_SECOND": "1000000",
            "BANKRAIL_RATE_LIMIT_BURST": "1000000",
            **self.env,
        }
        output = self.output.open("ab") if self.output else subprocess.DEVNULL
        started = time.monotonic()
        self.process = subprocess.Popen(
            [
                self.python,
                "-m",
                "bankrail",
                "serve",
                "--data-dir",
                str(self.data_dir / "d"),
                "--port",
                str(self.port),
                "--workers",
                str(self.workers),
            ],
            env=env,
            stdout=output,
            stderr=output,
            start_new_session=True,
        )
        if not isinstance(output, int):
            output.close()
        deadline = started + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.base}/readyz", timeout=1):  # noqa: S310
                    self.ready_seconds = time.monotonic() - started
                    return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("bankrail serve did not start")

    def dsn(self) -> str:
        """The connection URL of the server's embedded PostgreSQL (joined as a guest)."""
        from bankrail.db.embedded import EmbeddedPostgres

        assert self.data_dir is not None
        return EmbeddedPostgres(self.data_dir / "d").start(join_running=True)

    def processes(self) -> dict[int, str]:
        """The server's processes by group (API, worker, PostgreSQL)."""
        assert self.process is not None
        assert self.data_dir is not None
        return server_processes(self.process.pid, self.data_dir)

    @property
    def base(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """SIGTERM and wait."""
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> Any:
        """One request (used for seeding, not measured): its JSON answer, or its text when the
        answer is not JSON."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(f"{self.base}{path}", data=data, method=method)  # noqa: S310
        request.add_header("Content-Type", "application/json")
        request.add_header("Authorization", f"Bearer {token or self.admin_token}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            content = answer.read()
            if "json" not in answer.headers.get("content-type", "json"):
                return content.decode()  # the mock bank's headless action: a plain-text URL
            return json.loads(content or b"null")


@dataclass
class Merchant:
    """A seeded merchant able to sign."""

    token: str
    kid: str
    key: Any
    account_id: str
    merchant_id: str


def seed(server: Server, balance: int) -> Merchant:
    """A merchant with a funded GBP account, a signing key and a token."""
    merchant = server.call("POST", "/admin/merchants", {"name": "Bench"})
    client = server.call("POST", f"/admin/merchants/{merchant['id']}/clients", {})
    key = signing.generate_private_key()
    kid = server.call(
        "POST",
        f"/admin/merchants/{merchant['id']}/signing-keys",
        {"public_key_pem": signing.public_key_pem(key.public_key())},
    )["kid"]
    account = server.call(
        "POST", f"/admin/merchants/{merchant['id']}/merchant-accounts", {"currency": "GBP"}
    )
    iban = next(i["iban"] for i in account["account_identifiers"] if i["type"] == "iban")
    server.call(
        "POST",
        "/sandbox/bank-transfers",
        {
            "iban": iban,
            "amount_in_minor": balance,
            "currency": "GBP",
            "remitter_name": "Bench",
            "reference": "seed",
        },
    )
    form = (
        f"grant_type=client_credentials&client_id={client['client_id']}"
        f"&client_secret={client['client_secret']}"
    ).encode()
    request = urllib.request.Request(f"{server.base}/connect/token", data=form)  # noqa: S310
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
        token = json.loads(answer.read())["access_token"]
    return Merchant(token, kid, key, account["id"], merchant["id"])


def _signed(merchant: Merchant, path: str, body: dict[str, Any]) -> tuple[bytes, str, str]:
    """A POST's body, a fresh Idempotency-Key, and the signature over both."""
    raw = json.dumps(body).encode()
    key = str(uuid.uuid4())
    signature = signing.sign_request(
        merchant.key,
        merchant.kid,
        method="POST",
        path=path,
        headers=[("Idempotency-Key", key)],
        body=raw,
    )
    return raw, key, signature


def signed_post(server: Server, merchant: Merchant, path: str, body: dict[str, Any]) -> bytes:
    """A prepared, signed POST with a fresh Idempotency-Key."""
    raw, key, signature = _signed(merchant, path, body)
    return http_request(
        "POST",
        path,
        f"127.0.0.1:{server.port}",
        {
            "Authorization": f"Bearer {merchant.token}",
            "Content-Type": "application/json",
            "Idempotency-Key": key,
            "Svc-Signature": signature,
        },
        raw,
    )


def payout_body(merchant: Merchant) -> dict[str, Any]:
    """An open-loop GBP payout of 1 penny."""
    return {
        "merchant_account_id": merchant.account_id,
        "amount_in_minor": 1,
        "currency": "GBP",
        "beneficiary": {
            "type": "external_account",
            "reference": "bench",
            "account_holder_name": "Bench Payee",
            "account_identifier": {
                "type": "sort_code_account_number",
                "sort_code": "040004",
                "account_number": "12345678",
            },
        },
    }


def payment_body(merchant: Merchant) -> dict[str, Any]:
    """A GBP payment awaiting authorisation."""
    return {
        "amount_in_minor": 100,
        "currency": "GBP",
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": {"type": "user_selected"},
            "beneficiary": {"type": "merchant_account", "merchant_account_id": merchant.account_id},
        },
    }


def signed_call(server: Server, merchant: Merchant, path: str, body: dict[str, Any]) -> Any:
    """One signed JSON POST with a fresh Idempotency-Key (used for seeding, not measured)."""
    raw, key, signature = _signed(merchant, path, body)
    headers = {"Idempotency-Key": key, "Svc-Signature": signature}
    return server.call("POST", path, token=merchant.token, headers=headers, raw=raw)


def authorised_mandate(server: Server, merchant: Merchant) -> str:
    """A commercial mandate into the merchant's account, authorised at the mock bank, whose
    limits no scenario reaches."""
    body = {
        "mandate": {
            "type": "commercial",
            "provider_selection": {
                "type": "preselected",
                "provider_id": "mock-payments-gb-redirect",
            },
            "beneficiary": {"type": "merchant_account", "merchant_account_id": merchant.account_id},
        },
        "currency": "GBP",
        "user": {"id": "bench-payer"},
        "constraints": {
            "maximum_individual_amount": 10**9,
            "periodic_limits": {"year": {"maximum_amount": 10**15, "period_alignment": "consent"}},
        },
    }
    mandate_id = str(signed_call(server, merchant, "/v3/mandates", body)["id"])
    flow = signed_call(
        server,
        merchant,
        f"/v3/mandates/{mandate_id}/authorization-flow",
        {"redirect": {"return_uri": "https://bench.example/back"}},
    )
    uri = flow["authorization_flow"]["actions"]["next"]["uri"]
    token = parse_qs(urlsplit(uri).fragment)["token"][0]
    server.call(
        "POST",
        f"/mock-bank/api/vrp-consents/{mandate_id}/action",
        {"action": "Authorise", "remitter_balance_in_minor": 10**15},
        token=token,
    )
    return mandate_id


def mandate_payment_body(mandate_id: str) -> dict[str, Any]:
    """A GBP payment of 1 penny taken on an authorised mandate (no payer journey)."""
    return {
        "amount_in_minor": 1,
        "currency": "GBP",
        "payment_method": {"type": "mandate", "mandate_id": mandate_id},
    }
