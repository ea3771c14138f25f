"""The `bankrail.testing` pytest plugin, as a merchant's own test suite uses it: a test file
run by pytest in a subprocess (pytester), with the plugin loaded from the installed package's
`pytest11` entry point."""

from __future__ import annotations

import os
import re
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2e_helpers import processes_mentioning

from bankrail.testing import BankrailWebhooks, WebhookTimeout
from support.api import Operator
from support.server import RunningServer

pytest_plugins = ["pytester"]

# A merchant's test file: every fixture of the plugin, and nothing of Bankrail's internals.
MERCHANT_TESTS = """
import uuid
from datetime import timedelta

from bankrail.testing import mock_bank_pay_in

DE_IBAN = "DE89370400440532013000"


def test_pay_in_settles_then_pays_the_payer_back(
    bankrail_client, bankrail_merchant, bankrail_webhooks
):
    user_id = str(uuid.uuid4())
    payment_id = mock_bank_pay_in(
        bankrail_client,
        bankrail_merchant.account_id("GBP"),
        2_500,
        "GBP",
        user={"id": user_id, "name": "Ada Payer"},
    )
    settled = bankrail_webhooks.wait_for("payment_settled", timeout=30, payment_id=payment_id)
    assert settled["user_id"] == user_id
    answer = bankrail_client.post(
        "/v3/payouts",
        json={
            "merchant_account_id": bankrail_merchant.account_id("GBP"),
            "amount_in_minor": 1_000,
            "currency": "GBP",
            "beneficiary": {
                "type": "payment_source",
                "user_id": user_id,
                "payment_source_id": settled["payment_source"]["id"],
                "reference": "refund",
            },
        },
    )
    assert answer.status_code == 202, answer.text
    payout_id = answer.json()["id"]
    executed = bankrail_webhooks.wait_for("payout_executed", timeout=30, payout_id=payout_id)
    assert executed["payout_id"] == payout_id
    assert bankrail_client.get(f"/v3/payouts/{payout_id}").json()["status"] == "executed"


def test_v1_payout_is_signed_and_settles(bankrail_client, bankrail_webhooks):
    transaction_id = str(uuid.uuid4())
    answer = bankrail_client.post(
        "/v1/payouts",
        json={
            "transaction_id": transaction_id,
            "beneficiary_name": "Jane Doe",
            "beneficiary_iban": DE_IBAN,
            "beneficiary_reference": "payout 1",
            "currency": "EUR",
            "amount_in_minor": 1_000,
        },
    )
    assert answer.status_code == 202, answer.text
    event = bankrail_webhooks.wait_for(
        "payout_settled", timeout=30, transaction_id=transaction_id
    )
    assert event["event_body"]["transaction_id"] == transaction_id


def test_the_clock_moves_and_tokens_are_renewed(bankrail_clock, bankrail_client):
    assert bankrail_client.get("/v3/merchant-accounts").status_code == 200
    before = bankrail_clock.now()
    after = bankrail_clock.advance(2 * 3600)
    assert after - before >= timedelta(hours=2)
    # The token the client holds expired in service time; it gets a new one.
    assert bankrail_client.get("/v3/merchant-accounts").status_code == 200


def test_each_test_has_its_own_merchant(bankrail_client, bankrail_merchant):
    accounts = bankrail_client.get("/v3/merchant-accounts").json()["items"]
    assert sorted(a["id"] for a in accounts) == sorted(
        bankrail_merchant.account_id(c) for c in ("GBP", "EUR")
    )
    assert all(a["available_balance_in_minor"] == 1_000_000 for a in accounts)
"""

WAIT_FOR_FAILS = """
from bankrail.testing import mock_bank_pay_in


def test_waits_for_a_settlement_that_never_comes(
    bankrail_client, bankrail_merchant, bankrail_webhooks
):
    payment_id = mock_bank_pay_in(
        bankrail_client, bankrail_merchant.account_id("GBP"), 700, action="RejectAuthorisation"
    )
    bankrail_webhooks.wait_for("payment_failed", timeout=30, payment_id=payment_id)
    bankrail_webhooks.wait_for("payment_settled", timeout=1)
"""

PARALLEL = """
import os


def test_one(bankrail_server, bankrail_client):
    assert bankrail_client.get("/v3/merchant-accounts").status_code == 200
    print("worker", os.environ["PYTEST_XDIST_WORKER"], "server", bankrail_server.url)


def test_two(bankrail_server, bankrail_client):
    assert bankrail_client.get("/v3/merchant-accounts").status_code == 200
    print("worker", os.environ["PYTEST_XDIST_WORKER"], "server", bankrail_server.url)
"""

UNUSED = """
def test_without_the_fixtures():
    assert True
"""


@pytest.fixture
def server_parent() -> Iterator[Path]:
    """A directory for the plugin's temporary server directories, outside pytest's own (see
    e2e_helpers.private_data_dir)."""
    with tempfile.TemporaryDirectory(prefix="bankrail-plugin-") as tmp:
        yield Path(tmp)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # Warnings are errors in the merchant's run too: the plugin leaks nothing. (The option
    # set here only keeps pytest-asyncio, installed alongside, from warning about itself.)
    pytester.makeini(
        "[pytest]\nfilterwarnings = error\nasyncio_default_fixture_loop_scope = function\n"
    )
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_a_merchant_suite_uses_every_fixture_and_leaves_nothing_behind(
    pytester: pytest.Pytester, server_parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BANKRAIL_URL", raising=False)
    pytester.makepyfile(test_shop=MERCHANT_TESTS)
    result = _run(pytester, f"--bankrail-tmpdir={server_parent}", "-s")
    result.assert_outcomes(passed=4)
    assert list(server_parent.iterdir()) == []
    assert processes_mentioning(server_parent) == []


def test_with_xdist_each_worker_has_its_own_server(
    pytester: pytest.Pytester, server_parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BANKRAIL_URL", raising=False)
    pytester.makepyfile(test_parallel=PARALLEL)
    result = _run(pytester, "-n", "2", "-rA", f"--bankrail-tmpdir={server_parent}")
    result.assert_outcomes(passed=2)
    servers = {
        line.split(" server ")[1]
        for line in result.stdout.lines
        if line.startswith("worker gw") and " server " in line
    }
    assert len(servers) == 2, result.stdout.str()
    assert list(server_parent.iterdir()) == []
    assert processes_mentioning(server_parent) == []


def test_wait_for_fails_listing_the_deliveries_it_received(
    pytester: pytest.Pytester, server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BANKRAIL_URL", server.base_url)
    monkeypatch.setenv("BANKRAIL_ADMIN_TOKEN", server.admin_token)
    pytester.makepyfile(test_shop=WAIT_FOR_FAILS)
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*WebhookTimeout: no verified payment_settled webhook within 1s; "
            "1 deliveries received:",
            "*- payment_failed event_id=* at /bankrail/payments verified",
        ]
    )


def test_unused_the_plugin_starts_nothing(
    pytester: pytest.Pytester, server_parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BANKRAIL_URL", raising=False)
    pytester.makepyfile(test_other=UNUSED)
    result = _run(pytester, f"--bankrail-tmpdir={server_parent}")
    result.assert_outcomes(passed=1)
    assert list(server_parent.iterdir()) == []


def test_a_port_in_use_is_one_clear_line(
    pytester: pytest.Pytester, server_parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BANKRAIL_URL", raising=False)
    pytester.makepyfile(test_shop=MERCHANT_TESTS)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run(pytester, f"--bankrail-port={port}", f"--bankrail-tmpdir={server_parent}")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines([f"*bankrail_server: port {port} on 127.0.0.1 is already in use"])
    assert "Traceback" not in result.stdout.str()
    assert list(server_parent.iterdir()) == []


def test_an_unwritable_data_directory_is_one_clear_line(
    pytester: pytest.Pytester, server_parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BANKRAIL_URL", raising=False)
    not_a_directory = server_parent / "a-file"
    not_a_directory.write_text("")
    pytester.makepyfile(test_shop=MERCHANT_TESTS)
    result = _run(pytester, f"--bankrail-tmpdir={not_a_directory}")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(
        [f"*bankrail_server: cannot create the server's data directory in {not_a_directory}: *"]
    )
    assert "Traceback" not in result.stdout.str()


def test_a_server_that_fails_to_start_shows_its_log(
    pytester: pytest.Pytester, server_parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BANKRAIL_URL", raising=False)
    # An operator token that serve refuses makes it exit at once, with a message.
    monkeypatch.setenv("BANKRAIL_VERIFY_PROCESSES", "-1")
    pytester.makepyfile(test_other="def test_x(bankrail_server):\n    pass\n")
    result = _run(pytester, f"--bankrail-tmpdir={server_parent}")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*bankrail_server: bankrail serve exited with code *; its log ends:", "*VERIFY_PROCESSES*"]
    )
    assert list(server_parent.iterdir()) == []


def test_bankrail_url_needs_the_admin_token(
    pytester: pytest.Pytester, server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BANKRAIL_URL", server.base_url)
    monkeypatch.delenv("BANKRAIL_ADMIN_TOKEN", raising=False)
    pytester.makepyfile(test_other="def test_x(bankrail_server):\n    pass\n")
    result = _run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*bankrail_server: BANKRAIL_URL is set but BANKRAIL_ADMIN_TOKEN*"])
    assert re.search("Traceback", result.stdout.str()) is None
    assert os.environ.get("BANKRAIL_ADMIN_TOKEN") is None


def test_a_wrong_bankrail_url_says_at_once_what_is_there(
    pytester: pytest.Pytester, server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
    elsewhere = f"{server.base_url}/api"
    expected = {
        refused: f"*bankrail_server: nothing answers at {refused} (*): is `bankrail serve` "
        "running there, on this host and port?",
        elsewhere: f"*bankrail_server: {elsewhere} is not a Bankrail API: GET "
        f"{elsewhere}/readyz answered 404 *",
    }
    monkeypatch.setenv("BANKRAIL_ADMIN_TOKEN", server.admin_token)
    pytester.makepyfile(test_other="def test_x(bankrail_server):\n    pass\n")
    for url, line in expected.items():
        monkeypatch.setenv("BANKRAIL_URL", url)
        began = time.monotonic()
        result = _run(pytester)
        # Said at once, not after the 30 s that a server still starting is given.
        assert time.monotonic() - began < 25
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines([line])
        assert "Traceback" not in result.stdout.str()


def test_the_receiver_refuses_a_webhook_whose_signature_does_not_verify(
    server: RunningServer, operator: Operator
) -> None:
    merchant = operator.new_merchant(currencies=("GBP",))
    receiver = BankrailWebhooks(server.base_url)
    try:
        answer = operator.put(
            f"/admin/merchants/{merchant.merchant_id}/webhooks",
            {"payments_uri": receiver.payments_uri, "payouts_uri": receiver.payouts_uri},
        )
        assert answer.status_code == 200, answer.text
        assert operator.top_up(merchant.accounts["GBP"], 700).status_code == 201
        genuine = receiver.wait_for("topup_received", timeout=30, amount_in_minor=700)
        # The same bytes, with the signature of another body: refused, and never an event.
        sent = receiver.deliveries[0]
        forged = httpx.post(
            receiver.payouts_uri,
            content=sent.body.replace(b"700", b"900"),
            headers={
                "Content-Type": "application/json",
                "X-SVC-Webhook-Timestamp": sent.headers["x-svc-webhook-timestamp"],
                "Svc-Signature": sent.headers["svc-signature"],
            },
        )
        assert forged.status_code == 401
        unsigned = httpx.post(receiver.payouts_uri, json={**genuine, "event_id": "x"})
        assert unsigned.status_code == 401
        assert [(d.verified, d.error) for d in receiver.deliveries] == [
            (True, None),
            (False, "the signature does not match"),
            (False, "no Svc-Signature header"),
        ]
        assert receiver.events == [genuine]
        with pytest.raises(WebhookTimeout, match="REJECTED"):
            receiver.wait_for("topup_received", timeout=0.1, amount_in_minor=900)
    finally:
        receiver.close()
