"""`bankrail api METHOD PATH` against a running server: one signed call from the shell, with
credentials from flags, the environment, or the demo merchant of a data directory."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import bankrail_cli
from pay_in_helpers import payment_body

from support.api import MerchantClient, Operator
from support.server import RunningServer


def _answer(done: subprocess.CompletedProcess[str]) -> tuple[int, Any]:
    """The status and JSON body `bankrail api` printed (`HTTP <status>`, then the body)."""
    status_line, _, body = done.stdout.partition("\n")
    assert status_line.startswith("HTTP "), done.stdout + done.stderr
    return int(status_line.removeprefix("HTTP ")), json.loads(body) if body.strip() else None


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory for the key file and the request bodies."""
    with tempfile.TemporaryDirectory(prefix="bankrail-api-cli-") as tmp:
        yield Path(tmp)


@pytest.fixture
def merchant(operator: Operator) -> MerchantClient:
    """A merchant of the session's server."""
    return operator.new_merchant()


def _flags(server: RunningServer, merchant: MerchantClient, workdir: Path) -> list[str]:
    key = workdir / "key.pem"
    key.write_text(merchant.private_key_pem)
    return [
        "--url",
        server.base_url,
        "--client-id",
        merchant.client_id,
        "--client-secret",
        merchant.client_secret,
        "--key",
        str(key),
        "--kid",
        merchant.kid,
    ]


def test_a_signed_post_from_a_file_then_a_get_of_what_it_made(
    server: RunningServer, merchant: MerchantClient, workdir: Path
) -> None:
    body = workdir / "payment.json"
    body.write_text(json.dumps(payment_body(merchant)))
    flags = _flags(server, merchant, workdir)

    created = bankrail_cli("api", "POST", "/v3/payments", "--data", f"@{body}", *flags)
    assert created.returncode == 0, created.stdout + created.stderr
    status, payment = _answer(created)
    assert status == 201
    assert payment["status"] == "authorization_required"

    read = bankrail_cli("api", "GET", f"/v3/payments/{payment['id']}", *flags)
    assert read.returncode == 0, read.stdout + read.stderr
    status, record = _answer(read)
    assert (status, record["id"], record["amount_in_minor"]) == (200, payment["id"], 1_000)


def test_the_same_idempotency_key_replays_the_first_answer(
    server: RunningServer, merchant: MerchantClient, workdir: Path
) -> None:
    data = json.dumps(payment_body(merchant))
    flags = [*_flags(server, merchant, workdir), "--idempotency-key", "cli-key-1"]

    first = _answer(bankrail_cli("api", "POST", "/v3/payments", "--data", data, *flags))
    again = _answer(bankrail_cli("api", "POST", "/v3/payments", "--data", data, *flags))

    assert first[0] == again[0] == 201
    assert first[1]["id"] == again[1]["id"]


def test_an_error_answer_is_printed_and_exits_1(
    server: RunningServer, merchant: MerchantClient, workdir: Path
) -> None:
    done = bankrail_cli(
        "api", "POST", "/v3/payments", "--data", '{"currency": "GBP"}',
        *_flags(server, merchant, workdir),
    )  # fmt: skip

    assert done.returncode == 1
    status, problem = _answer(done)
    assert status == 400
    assert "amount_in_minor" in json.dumps(problem)  # the problem names the missing field


def test_credentials_from_the_environment(
    server: RunningServer, merchant: MerchantClient, workdir: Path
) -> None:
    key = workdir / "key.pem"
    key.write_text(merchant.private_key_pem)
    env = {
        "BANKRAIL_URL": server.base_url,
        "BANKRAIL_CLIENT_ID": merchant.client_id,
        "BANKRAIL_CLIENT_SECRET": merchant.client_secret,
        "BANKRAIL_SIGNING_KEY": str(key),
        "BANKRAIL_KID": merchant.kid,
    }
    done = bankrail_cli("api", "GET", "/v3/merchant-accounts", "--data-dir", str(workdir), env=env)

    assert done.returncode == 0, done.stdout + done.stderr
    status, listed = _answer(done)
    assert status == 200
    assert {item["id"] for item in listed["items"]} == {
        account["id"] for account in merchant.accounts.values()
    }


def test_credentials_from_the_demo_of_the_data_directory(
    server: RunningServer, merchant: MerchantClient, workdir: Path
) -> None:
    """The file `bankrail init` writes names the server, the client and the key."""
    key = workdir / "demo-signing-key.pem"
    key.write_text(merchant.private_key_pem)
    demo = {
        "base_url": server.base_url,
        "client_id": merchant.client_id,
        "client_secret": merchant.client_secret,
        "signing_key_id": merchant.kid,
        "private_key_path": str(key),
    }
    (workdir / "demo-credentials.json").write_text(json.dumps(demo))

    done = bankrail_cli(
        "api", "POST", "/v3/payments", "--data", json.dumps(payment_body(merchant)),
        "--data-dir", str(workdir),
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    assert _answer(done)[0] == 201


def test_wrong_credentials_and_missing_ones_say_so(
    server: RunningServer, merchant: MerchantClient, workdir: Path
) -> None:
    flags = _flags(server, merchant, workdir)
    wrong = [*flags[:5], "not-the-secret", *flags[6:]]
    refused = bankrail_cli("api", "GET", "/v3/merchant-accounts", *wrong)
    assert refused.returncode == 1
    assert "invalid_client" in refused.stderr

    missing = bankrail_cli("api", "GET", "/v3/merchant-accounts", "--data-dir", str(workdir))
    assert missing.returncode == 1
    assert "no --client-id, --client-secret, --kid, --key" in missing.stderr
