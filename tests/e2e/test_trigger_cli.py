"""`bankrail trigger <event>` against a running `bankrail serve`: every event it names reaches
the merchant's webhook URI, made by real objects over HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import bankrail_cli, get_record
from pydantic import BaseModel

from bankrail.events.schemas import WEBHOOKS
from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver
from support.server import RunningServer, free_port

EVENTS = {
    # the name `bankrail trigger` takes: the API whose webhook URI the event goes to
    "payment_executed": "v3",
    "payment_settled": "v3",
    "payment_failed": "v3",
    "payout_executed": "v3",
    "payout_failed": "v3",
    "balance_notification": "v3",
    "refund_executed": "v3",
    "refund_failed": "v3",
    "mandate_authorized": "v3",
    "mandate_failed": "v3",
    "mandate_revoked": "v3",
    "topup_received": "v1",
    "payout_authorised": "v1",
    "payout_submitted": "v1",
    "payout_settled": "v1",
    "payout_rejected": "v1",
    "v1.payout_failed": "v1",
}


def _trigger_with_a_made_up_token(
    url: str, data_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`bankrail trigger payment_settled` sent to `url` with the operator token "t"."""
    return bankrail_cli(
        "trigger",
        "payment_settled",
        "--url",
        url,
        "--admin-token",
        "t",
        *args,
        "--data-dir",
        str(data_dir),
    )


@pytest.fixture
def hooked(operator: Operator, receiver: WebhookReceiver) -> MerchantClient:
    """A merchant with GBP and EUR accounts whose webhooks go to the receiver."""
    merchant = operator.new_merchant()
    answer = operator.put(
        f"/admin/merchants/{merchant.merchant_id}/webhooks",
        {"payments_uri": f"{receiver.url}/payments", "payouts_uri": f"{receiver.url}/payouts"},
    )
    assert answer.status_code == 200, answer.text
    return merchant


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """An empty data directory for the command to read."""
    with tempfile.TemporaryDirectory(prefix="bankrail-trigger-") as tmp:
        yield Path(tmp)


def _trigger(server: RunningServer, event: str, merchant_id: str, data_dir: Path) -> dict[str, Any]:
    done = bankrail_cli(
        "trigger",
        event,
        "--url",
        server.base_url,
        "--admin-token",
        server.admin_token,
        "--merchant-id",
        merchant_id,
        "--data-dir",
        str(data_dir),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    made: dict[str, Any] = json.loads(done.stdout)
    return made


@pytest.mark.parametrize("event", sorted(EVENTS))
def test_trigger_makes_the_event_reach_the_webhook_uri(
    event: str,
    server: RunningServer,
    hooked: MerchantClient,
    receiver: WebhookReceiver,
    operator: Operator,
    data_dir: Path,
) -> None:
    made = _trigger(server, event, hooked.merchant_id, data_dir)
    event_type = event.removeprefix("v1.")
    assert made["event"] == event
    assert made["merchant_id"] == hooked.merchant_id
    assert made["delivery"]["event_type"] == event_type
    assert made["delivery"]["merchant_id"] == hooked.merchant_id
    path = "/payments" if EVENTS[event] == "v3" else "/payouts"
    assert made["delivery"]["uri"] == receiver.url + path

    def arrived(seen: list[Any]) -> bool:
        return any(r.path == path and r.json()["event_id"] == made["event_id"] for r in seen)

    receiver.wait_for(arrived)
    body = next(r.json() for r in receiver.snapshot() if r.json()["event_id"] == made["event_id"])
    if EVENTS[event] == "v3":
        assert body["type"] == event_type
    else:
        assert body["event_type"] == event_type
    # The payload is the one /openapi.json documents under `webhooks`.
    model = WEBHOOKS[event][1]
    model.model_validate(body)
    assert set(body) == set(model.model_fields)
    if "event_body" in body:
        inner = model.model_fields["event_body"].annotation
        assert isinstance(inner, type)
        assert issubclass(inner, BaseModel)
        assert set(body["event_body"]) == set(inner.model_fields)
    # What it says it made exists, and is the object the event is about.
    created = made["created"]
    if "payment_id" in created:
        assert body["payment_id"] == created["payment_id"]
        assert get_record(hooked, f"/v3/payments/{created['payment_id']}")["status"]
    if "payout_id" in created:
        assert body["payout_id"] == created["payout_id"]
    if "transaction_id" in created:
        assert body["event_body"]["transaction_id"] == created["transaction_id"]
    if event == "balance_notification":
        assert body["merchant_account_id"] == created["merchant_account_id"]
        assert body["status"] == "below_threshold"
        account = get_record(hooked, f"/v3/merchant-accounts/{created['merchant_account_id']}")
        assert account["balance_threshold_in_minor"] is None  # set back as it was


def test_list_names_every_event() -> None:
    done = bankrail_cli("trigger", "--list", "--json")
    assert done.returncode == 0, done.stderr
    assert sorted(e["event"] for e in json.loads(done.stdout)) == sorted(EVENTS)
    text = bankrail_cli("trigger", "--list")
    assert text.returncode == 0, text.stderr
    assert [line.split()[0] for line in text.stdout.splitlines()] == [
        e["event"] for e in json.loads(done.stdout)
    ]


def test_defaults_read_the_token_and_the_demo_merchant_from_the_data_directory(
    server: RunningServer, hooked: MerchantClient, receiver: WebhookReceiver, data_dir: Path
) -> None:
    (data_dir / "admin-token").write_text(server.admin_token + "\n")
    (data_dir / "demo-credentials.json").write_text(json.dumps({"merchant_id": hooked.merchant_id}))
    done = bankrail_cli(
        "trigger",
        "payment_settled",
        "--data-dir",
        str(data_dir),
        env={"BANKRAIL_URL": server.base_url},
    )
    assert done.returncode == 0, done.stderr
    assert f"Triggered payment_settled for merchant {hooked.merchant_id}" in done.stdout
    receiver.wait_for(lambda seen: any(r.json().get("type") == "payment_settled" for r in seen))


def test_an_unknown_event_or_a_missing_token_is_an_error(
    server: RunningServer, data_dir: Path
) -> None:
    unknown = bankrail_cli(
        "trigger",
        "payment_teleported",
        "--url",
        server.base_url,
        "--admin-token",
        server.admin_token,
        "--data-dir",
        str(data_dir),
    )
    assert unknown.returncode == 2
    assert "unknown event 'payment_teleported'" in unknown.stderr
    no_token = bankrail_cli("trigger", "payment_settled", "--data-dir", str(data_dir))
    assert no_token.returncode == 2
    assert "no operator token" in no_token.stderr


def test_an_unknown_event_without_a_token_is_reported_as_unknown(data_dir: Path) -> None:
    done = bankrail_cli("trigger", "payment_teleported", "--data-dir", str(data_dir))
    assert done.returncode == 2
    assert done.stderr == (
        "error: unknown event 'payment_teleported'; `bankrail trigger --list` names them\n"
    )


def test_a_server_that_does_not_answer_is_one_line(data_dir: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    for merchant in ((), ("--merchant-id", str(uuid.uuid4()))):
        done = _trigger_with_a_made_up_token(url, data_dir, *merchant)
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith(f"error: nothing answers at {url} ("), done.stderr
        assert "is `bankrail serve` running there" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_url_that_is_not_bankrails_api_says_what_answered(
    server: RunningServer, data_dir: Path
) -> None:
    url = f"{server.base_url}/api"
    done = _trigger_with_a_made_up_token(url, data_dir)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"error: {url} is not a Bankrail API: GET {url}/readyz answered 404 (give the "
        "server's base URL, such as http://127.0.0.1:8080)\n"
    )


@pytest.mark.slow
def test_with_no_options_it_finds_the_server_that_serve_started_beside_it() -> None:
    # As after `./dev serve --port P`: the data directory ./.bankrail of the working
    # directory records the URL, the operator token and the demo merchant.
    with tempfile.TemporaryDirectory(prefix="bankrail-trigger-") as tmp:
        workdir = Path(tmp)
        # No operator token given: serve generates one and keeps it in the data directory.
        serving = RunningServer(
            data_dir=workdir / ".bankrail", port=free_port(), admin_token="", env={}
        )
        serving.start("--demo")
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith("BANKRAIL_")}
            done = subprocess.run(
                [sys.executable, "-m", "bankrail", "trigger", "payment_settled"],
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
                cwd=workdir,
                check=False,
            )
        finally:
            serving.stop()
    assert done.returncode == 0, done.stderr
    assert "Triggered payment_settled for merchant" in done.stdout
