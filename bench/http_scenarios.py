"""The service scenarios: signed POST /v3/payouts (the headline), signed POST /v3/payments,
GET /v3/payouts/{id} and GET /v3/merchant-accounts, against `bankrail serve --workers N`."""

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bankrail.security import signing
from bench.loadgen import http_request, run_load


def _free_port() -> int:
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

    def start(self) -> None:
        """Start and wait until it answers."""
        self.port = _free_port()
        self.admin_token = "admin-" + secrets.token_urlsafe(16)
        self.data_dir = Path(tempfile.mkdtemp(prefix="bankrail-bench-serve-"))
        env = {
            **os.environ,
            "BANKRAIL_ADMIN_TOKEN": self.admin_token,
            "BANKRAIL_LOG_LEVEL": "WARNING",
        }
        self.process = subprocess.Popen(
            [
                sys.executable,
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
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.base}/openapi.json", timeout=1):  # noqa: S310
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("bankrail serve did not start")

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
        """One JSON request (used for seeding, not measured)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(f"{self.base}{path}", data=data, method=method)  # noqa: S310
        request.add_header("Content-Type", "application/json")
        request.add_header("Authorization", f"Bearer {token or self.admin_token}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            return json.loads(answer.read() or b"null")


@dataclass
class Merchant:
    """A seeded merchant able to sign."""

    token: str
    kid: str
    key: Any
    account_id: str


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
    return Merchant(token, kid, key, account["id"])


def signed_post(server: Server, merchant: Merchant, path: str, body: dict[str, Any]) -> bytes:
    """A prepared, signed POST with a fresh Idempotency-Key."""
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


async def scenarios(workers: int, requests: int, concurrency: int) -> dict[str, Any]:
    """Every HTTP scenario against one server with `workers` API processes."""
    server = Server(workers)
    server.start()
    try:
        merchant = seed(server, balance=10**12)
        host = f"127.0.0.1:{server.port}"
        results: dict[str, Any] = {"workers": workers, "concurrency": concurrency}
        warm = [
            signed_post(server, merchant, "/v3/payouts", payout_body(merchant))
            for _ in range(min(200, requests))
        ]
        await run_load("127.0.0.1", server.port, warm, concurrency=concurrency)
        payouts = [
            signed_post(server, merchant, "/v3/payouts", payout_body(merchant))
            for _ in range(requests)
        ]
        results["post_payouts"] = (
            await run_load("127.0.0.1", server.port, payouts, concurrency=concurrency)
        ).summary()
        payments = [
            signed_post(server, merchant, "/v3/payments", payment_body(merchant))
            for _ in range(requests)
        ]
        results["post_payments"] = (
            await run_load("127.0.0.1", server.port, payments, concurrency=concurrency)
        ).summary()
        ids = [
            server.call("POST", "/v3/payouts", raw=None, token=merchant.token) if False else None
        ]
        del ids
        sample = _created_payout_ids(server, merchant, 50)
        auth = {"Authorization": f"Bearer {merchant.token}"}
        gets = [
            http_request("GET", f"/v3/payouts/{sample[i % len(sample)]}", host, auth)
            for i in range(requests * 2)
        ]
        results["get_payout"] = (
            await run_load("127.0.0.1", server.port, gets, concurrency=concurrency)
        ).summary()
        lists = [
            http_request("GET", "/v3/merchant-accounts", host, auth) for _ in range(requests * 2)
        ]
        results["get_merchant_accounts"] = (
            await run_load("127.0.0.1", server.port, lists, concurrency=concurrency)
        ).summary()
        rate = results["post_payouts"]["requests_per_s"] * 0.8
        paced = [
            signed_post(server, merchant, "/v3/payouts", payout_body(merchant))
            for _ in range(requests)
        ]
        results["post_payouts_at_80pct"] = (
            await run_load("127.0.0.1", server.port, paced, concurrency=concurrency * 2, rate=rate)
        ).summary()
        results["post_payouts_at_80pct"]["target_rate"] = rate
        return results
    finally:
        server.stop()


def _created_payout_ids(server: Server, merchant: Merchant, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        raw = signed_post(server, merchant, "/v3/payouts", payout_body(merchant))
        head, _, body = raw.partition(b"\r\n\r\n")
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[2:])
        headers.pop("Content-Length", None)
        ids.append(
            server.call("POST", "/v3/payouts", raw=body, token=merchant.token, headers=headers)[
                "id"
            ]
        )
    return ids
