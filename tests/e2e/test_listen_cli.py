"""`bankrail listen --forward-to URL` against a running server (docs/webhooks.md, "Listeners";
docs/testing-your-integration.md): the merchant's webhooks reach a local receiver through a
stream the CLI opens, with the headers and body the registered URI gets (the kit's receiver
verifies each signature), one printed line per delivery; a non-2xx answer is retried; several
listeners, a restarted CLI and a restarted server lose no event; the registered URI keeps
getting its own deliveries."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bankrail.testing import BankrailWebhooks
from support.api import MerchantClient, Operator, operator_of
from support.metrics import scrape_metrics
from support.receiver import Answer, Received, WebhookReceiver
from support.server import RunningServer, own_server

pytestmark = pytest.mark.slow

EVENT = "topup_received"


# Streams end within 80 % of the request deadline: a short one makes every test here cross
# several reconnects.
DEADLINE_SECONDS = 10


@pytest.fixture(scope="module")
def bankrail(pg_server: str) -> Iterator[RunningServer]:
    """A sandbox server of this module's own (one test restarts it), with a short request
    deadline."""
    env = {"BANKRAIL_REQUEST_TIMEOUT_SECONDS": str(DEADLINE_SECONDS)}
    with own_server(pg_server, env) as running:
        yield running


@pytest.fixture
def operator(bankrail: RunningServer) -> Iterator[Operator]:
    """The operator API of the module's server."""
    with operator_of(bankrail) as client:
        yield client


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory for the signing key and the CLI's data directory."""
    with tempfile.TemporaryDirectory(prefix="bankrail-listen-") as tmp:
        yield Path(tmp)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


class Listen:
    """`bankrail listen` as a subprocess, its output lines collected as they come."""

    def __init__(self, server: RunningServer, merchant: MerchantClient, workdir: Path,
                 forward_to: str, listener_id: str | None, *extra: str) -> None:  # fmt: skip
        workdir.mkdir(parents=True, exist_ok=True)
        key = workdir / "key.pem"
        key.write_text(merchant.private_key_pem)
        env = {k: v for k, v in os.environ.items() if not k.startswith("BANKRAIL_")}
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "bankrail", "listen",
                "--forward-to", forward_to,
                *(["--listener-id", listener_id] if listener_id else []),
                "--url", server.base_url,
                "--client-id", merchant.client_id,
                "--client-secret", merchant.client_secret,
                "--key", str(key),
                "--kid", merchant.kid,
                "--data-dir", str(workdir / "data"),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        assert self.process.stdout is not None
        assert self.process.stderr is not None
        self._readers = [
            threading.Thread(target=self._collect, args=(self.process.stdout, self.stdout)),
            threading.Thread(target=self._collect, args=(self.process.stderr, self.stderr)),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _collect(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    def wait_attached(self, times: int = 1) -> None:
        """Wait until the CLI said it attached `times` times."""
        wait_until(
            lambda: sum("attached as listener" in line for line in self.stderr) >= times,
            f"attached x{times}; stderr: {self.stderr}",
        )

    def lines(self, event_id: str) -> list[str]:
        """The printed lines of deliveries of `event_id`."""
        return [line for line in self.stdout if event_id in line]

    def stop(self, sig: signal.Signals = signal.SIGINT) -> int:
        """Signal the CLI, wait for it and its output; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout=30)
        for reader in self._readers:
            reader.join(timeout=10)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()
        return code


def top_up(operator: Operator, merchant: MerchantClient) -> None:
    """One sandbox bank transfer into the merchant's GBP account: one topup_received event."""
    answer = operator.top_up(merchant.accounts["GBP"], 1_00)
    assert answer.status_code in (200, 201, 202), answer.text


def set_webhooks(operator: Operator, merchant: MerchantClient, **uris: str | None) -> None:
    answer = operator.put(f"/admin/merchants/{merchant.merchant_id}/webhooks", uris)
    assert answer.status_code == 200, answer.text


def event_ids(webhooks: BankrailWebhooks) -> set[str]:
    """The event ids of the verified topup_received events the receiver got."""
    return {str(e["event_id"]) for e in webhooks.events if e.get("event_type") == EVENT}


@pytest.fixture
def registered(bankrail: RunningServer) -> Iterator[BankrailWebhooks]:
    """The merchant's registered receiver (the URI deliveries go to without a listener)."""
    made = BankrailWebhooks(bankrail.base_url)
    yield made
    made.close()


@pytest.fixture
def local(bankrail: RunningServer) -> Iterator[BankrailWebhooks]:
    """The developer's local app: another verifying receiver, at the same path."""
    made = BankrailWebhooks(bankrail.base_url)
    yield made
    made.close()


def test_each_event_reaches_the_local_app_signed_and_the_registered_uri_too(
    bankrail: RunningServer,
    operator: Operator,
    workdir: Path,
    registered: BankrailWebhooks,
    local: BankrailWebhooks,
) -> None:
    merchant = operator.new_merchant()
    set_webhooks(operator, merchant, payouts_uri=registered.payouts_uri)
    listen = Listen(bankrail, merchant, workdir, local.payouts_uri, str(uuid.uuid4()),
                    "--events", EVENT)  # fmt: skip
    try:
        listen.wait_attached()
        for _ in range(3):
            top_up(operator, merchant)

        wait_until(lambda: len(event_ids(local)) == 3, "3 events at the local app")
        wait_until(lambda: len(event_ids(registered)) == 3, "3 events at the registered URI")
        assert event_ids(local) == event_ids(registered)
        # The local app got exactly what the registered URI got, and verified it.
        assert all(d.verified for d in local.deliveries), [d.describe() for d in local.deliveries]
        for event_id in event_ids(local):
            wait_until(lambda e=event_id: len(listen.lines(e)) == 1, f"a line for {event_id}")
            [line] = listen.lines(event_id)
            assert EVENT in line, line
            assert line.endswith("-> 200"), line
    finally:
        assert listen.stop() == 0
    assert not any("Traceback" in line for line in listen.stderr), listen.stderr


def test_a_non_2xx_local_answer_is_retried_until_answered(
    bankrail: RunningServer, operator: Operator, workdir: Path
) -> None:
    merchant = operator.new_merchant()

    def first_fails(_request: Received, index: int) -> Answer:
        return Answer(503 if index == 0 else 200)

    app = WebhookReceiver(first_fails)
    before = _attempts_counted(bankrail)
    listener_id = str(uuid.uuid4())
    listen = Listen(bankrail, merchant, workdir, app.url + "/hooks", listener_id)
    try:
        listen.wait_attached()
        top_up(operator, merchant)
        got = app.wait_for(lambda seen: len(seen) >= 2)
        assert got[0].body == got[1].body  # the same event, sent again after the 503
        event_id = got[0].json()["event_id"]
        wait_until(lambda: len(listen.lines(event_id)) == 2, "two lines")
        first, second = listen.lines(event_id)
        assert first.endswith("-> 503"), first
        assert second.endswith("-> 200 (attempt 2)"), second

        # Answered once the 200 is reported: no third attempt.
        def listener_statuses() -> list[str]:
            answer = operator.get("/admin/webhook-deliveries", merchant_id=merchant.merchant_id)
            items = answer.json()["items"]
            return [d["status"] for d in items if d["listener_id"] is not None]

        wait_until(lambda: listener_statuses() == ["delivered"], "the delivery answered")

        # Each answer the CLI reported is counted once as an attempt (no registered URI:
        # no other attempt is made for this merchant).
        def counted() -> dict[str, float]:
            now = _attempts_counted(bankrail)
            return {outcome: now.get(outcome, 0) - before.get(outcome, 0) for outcome in now}

        wait_until(lambda: counted().get("delivered", 0) >= 1, "the answers counted")
        assert {k: v for k, v in counted().items() if v} == {"http_error": 1, "delivered": 1}
        # An answer refused (the delivery no longer awaits one; an unknown delivery) is no
        # attempt: nothing more is counted.
        [delivery] = [
            d["id"]
            for d in operator.get(
                "/admin/webhook-deliveries", merchant_id=merchant.merchant_id
            ).json()["items"]
            if d["listener_id"] is not None
        ]
        answers = f"/v3/webhook-listeners/{listener_id}/deliveries/{{}}/answers"
        late = merchant.signed_post(answers.format(delivery), {"status_code": 200})
        assert late.status_code == 409, late.text
        unknown = merchant.signed_post(answers.format(uuid.uuid4()), {"status_code": 200})
        assert unknown.status_code == 404, unknown.text
        assert {k: v for k, v in counted().items() if v} == {"http_error": 1, "delivered": 1}
    finally:
        listen.stop()
        app.close()
    assert len(app.snapshot()) == 2


def _attempts_counted(server: RunningServer) -> dict[str, float]:
    """`bankrail_webhook_attempts_total` by outcome, as the server's /metrics gives it now."""
    return scrape_metrics(server.base_url).labels("bankrail_webhook_attempts_total", "outcome")


def test_with_no_uri_registered_the_signature_covers_the_local_path(
    bankrail: RunningServer, operator: Operator, workdir: Path, local: BankrailWebhooks
) -> None:
    merchant = operator.new_merchant()  # no webhook URI
    listen = Listen(bankrail, merchant, workdir, local.payouts_uri, str(uuid.uuid4()))
    try:
        listen.wait_attached()
        top_up(operator, merchant)
        local.wait_for(EVENT, timeout=30)
    finally:
        listen.stop()


def test_two_listeners_each_get_every_event(
    bankrail: RunningServer, operator: Operator, workdir: Path
) -> None:
    merchant = operator.new_merchant()
    apps = [BankrailWebhooks(bankrail.base_url) for _ in range(2)]
    listens = [
        Listen(bankrail, merchant, workdir / str(n), app.payouts_uri, str(uuid.uuid4()))
        for n, app in enumerate(apps)
    ]
    try:
        for listen in listens:
            listen.wait_attached()
        top_up(operator, merchant)
        top_up(operator, merchant)
        for app in apps:
            wait_until(lambda a=app: len(event_ids(a)) == 2, "both events at each listener")
        assert event_ids(apps[0]) == event_ids(apps[1])
    finally:
        for listen in listens:
            listen.stop()
        for app in apps:
            app.close()


def test_events_raised_while_the_cli_is_down_arrive_when_it_comes_back(
    bankrail: RunningServer, operator: Operator, workdir: Path, local: BankrailWebhooks
) -> None:
    merchant = operator.new_merchant()
    listener_id = str(uuid.uuid4())
    first = Listen(bankrail, merchant, workdir, local.payouts_uri, listener_id)
    first.wait_attached()
    top_up(operator, merchant)
    wait_until(lambda: len(event_ids(local)) == 1, "the first event")
    first.stop(signal.SIGKILL)

    top_up(operator, merchant)
    top_up(operator, merchant)
    assert len(event_ids(local)) == 1

    again = Listen(bankrail, merchant, workdir, local.payouts_uri, listener_id)
    try:
        wait_until(lambda: len(event_ids(local)) == 3, "the events raised meanwhile")
    finally:
        assert again.stop() == 0


def test_ctrl_c_ends_it_cleanly(
    bankrail: RunningServer, operator: Operator, workdir: Path, local: BankrailWebhooks
) -> None:
    merchant = operator.new_merchant()
    listen = Listen(bankrail, merchant, workdir, local.payouts_uri, str(uuid.uuid4()))
    listen.wait_attached()

    assert listen.stop(signal.SIGINT) == 0
    assert not any("Traceback" in line for line in listen.stderr), listen.stderr


def test_the_listener_id_is_kept_in_the_data_directory(
    bankrail: RunningServer, operator: Operator, workdir: Path, local: BankrailWebhooks
) -> None:
    merchant = operator.new_merchant()
    first = Listen(bankrail, merchant, workdir, local.payouts_uri, None)
    first.wait_attached()
    assert first.stop() == 0
    kept = (workdir / "data" / "listener-id").read_text().strip()
    assert any(f"attached as listener {kept}" in line for line in first.stderr), first.stderr

    again = Listen(bankrail, merchant, workdir, local.payouts_uri, None)
    again.wait_attached()
    assert again.stop() == 0
    assert any(f"attached as listener {kept}" in line for line in again.stderr), again.stderr


def test_a_listener_id_that_is_not_a_uuid_is_refused(
    bankrail: RunningServer, operator: Operator, workdir: Path, local: BankrailWebhooks
) -> None:
    merchant = operator.new_merchant()
    listen = Listen(bankrail, merchant, workdir, local.payouts_uri, "not-a-uuid")
    assert listen.process.wait(timeout=60) == 1
    listen.stop()
    assert any("must be a UUID" in line for line in listen.stderr), listen.stderr


def test_a_server_restart_loses_no_event(
    bankrail: RunningServer,
    operator: Operator,
    workdir: Path,
    registered: BankrailWebhooks,
    local: BankrailWebhooks,
) -> None:
    merchant = operator.new_merchant()
    set_webhooks(operator, merchant, payouts_uri=registered.payouts_uri)
    listen = Listen(bankrail, merchant, workdir, local.payouts_uri, str(uuid.uuid4()))
    try:
        listen.wait_attached()
        top_up(operator, merchant)
        top_up(operator, merchant)
        began = time.monotonic()
        assert bankrail.stop() == 0
        # A graceful stop ends the open streams instead of waiting them out.
        assert time.monotonic() - began < 10
        bankrail.start(timeout=120)
        top_up(operator, merchant)

        wait_until(lambda: len(event_ids(local)) == 3, "every event at the local app", 60)
        wait_until(lambda: len(event_ids(registered)) == 3, "every event at the URI", 60)
        assert event_ids(local) == event_ids(registered)
    finally:
        listen.stop()


def test_a_stream_ends_within_the_deadline_and_is_the_merchants_own(
    bankrail: RunningServer, operator: Operator
) -> None:
    owner, other = operator.new_merchant(), operator.new_merchant()
    listener_id = uuid.uuid4()
    path = f"/v3/webhook-listeners/{listener_id}/events"
    began = time.monotonic()
    with owner.http.stream(
        "GET", path, headers={"Authorization": f"Bearer {owner.token()}"}
    ) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = list(stream.iter_lines())
    assert time.monotonic() - began < DEADLINE_SECONDS
    assert lines[:2] == ["retry: 1000", ": attached"]
    assert lines[-3:-1] == ["event: reconnect", "data: {}"]

    refused = other.http.get(path, headers={"Authorization": f"Bearer {other.token()}"})
    assert refused.status_code == 404, refused.text
    answer = other.signed_post(
        f"/v3/webhook-listeners/{listener_id}/deliveries/{uuid.uuid4()}/answers",
        {"status_code": 200},
    )
    assert answer.status_code == 404, answer.text
    unsigned = owner.http.post(
        f"/v3/webhook-listeners/{listener_id}/deliveries/{uuid.uuid4()}/answers",
        json={"status_code": 200},
        headers={"Authorization": f"Bearer {owner.token()}"},
    )
    assert unsigned.status_code == 401, unsigned.text
