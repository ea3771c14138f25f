"""The pytest fixtures and options of the `bankrail.testing` plugin."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bankrail.testing._client import BankrailClock, Merchant, OperatorError, create_merchant
from bankrail.testing._server import BankrailServer, ServerError, connect_server, start_server
from bankrail.testing._webhooks import BankrailWebhooks

__all__ = [
    "bankrail_client",
    "bankrail_clock",
    "bankrail_merchant",
    "bankrail_operator",
    "bankrail_server",
    "bankrail_webhooks",
    "pytest_addoption",
]

_MERCHANT_NAME_LENGTH = 100


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--bankrail-port` and `--bankrail-tmpdir` for the session's own server."""
    group = parser.getgroup("bankrail", "Bankrail test server (bankrail.testing)")
    group.addoption(
        "--bankrail-port",
        type=int,
        default=None,
        help="Port of the session's bankrail serve (default: a free port).",
    )
    group.addoption(
        "--bankrail-tmpdir",
        type=Path,
        default=None,
        help="Directory in which the session's server makes its temporary data directory "
        "(default: the system's temporary directory).",
    )


@pytest.fixture(scope="session")
def bankrail_server(request: pytest.FixtureRequest) -> Iterator[BankrailServer]:
    """The Bankrail server of the session: the one at `BANKRAIL_URL` (with
    `BANKRAIL_ADMIN_TOKEN`) when set, else a `bankrail serve` started on an embedded
    PostgreSQL in a new temporary directory, stopped and removed at the end."""
    url = os.environ.get("BANKRAIL_URL")
    try:
        if url:
            server = connect_server(url, os.environ.get("BANKRAIL_ADMIN_TOKEN"))
        else:
            server = start_server(
                port=request.config.getoption("bankrail_port"),
                parent_dir=request.config.getoption("bankrail_tmpdir"),
            )
    except ServerError as exc:
        pytest.fail(f"bankrail_server: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def bankrail_operator(bankrail_server: BankrailServer) -> Iterator[httpx.Client]:
    """An `httpx.Client` for the operator and sandbox API of the session's server."""
    with bankrail_server.operator() as client:
        yield client


@pytest.fixture
def bankrail_merchant(request: pytest.FixtureRequest, bankrail_operator: httpx.Client) -> Merchant:
    """A new merchant for this test: client credentials, a registered P-521 signing key, and
    GBP and EUR merchant accounts funded with 1,000,000 minor units each."""
    name = f"test {request.node.name}"[:_MERCHANT_NAME_LENGTH]
    try:
        return create_merchant(bankrail_operator, name=name)
    except OperatorError as exc:
        pytest.fail(f"bankrail_merchant: {exc}", pytrace=False)


@pytest.fixture
def bankrail_client(
    bankrail_server: BankrailServer, bankrail_merchant: Merchant
) -> Iterator[httpx.Client]:
    """An `httpx.Client` on the server for the test's merchant, authenticated and signing
    with `BankrailAuth`."""
    with httpx.Client(
        base_url=bankrail_server.url, auth=bankrail_merchant.auth(), timeout=30
    ) as client:
        yield client


@pytest.fixture
def bankrail_webhooks(
    bankrail_server: BankrailServer, bankrail_merchant: Merchant, bankrail_operator: httpx.Client
) -> Iterator[BankrailWebhooks]:
    """A verifying webhook receiver on 127.0.0.1, set as the test merchant's payments (v3)
    and payouts (v1) webhook URIs."""
    receiver = BankrailWebhooks(bankrail_server.url)
    try:
        answer = bankrail_operator.put(
            f"/admin/merchants/{bankrail_merchant.id}/webhooks",
            json={"payments_uri": receiver.payments_uri, "payouts_uri": receiver.payouts_uri},
        )
        if answer.status_code != 200:
            pytest.fail(
                f"bankrail_webhooks: setting the webhook URIs answered {answer.status_code}: "
                f"{answer.text}",
                pytrace=False,
            )
        yield receiver
    finally:
        receiver.close()


@pytest.fixture
def bankrail_clock(bankrail_operator: httpx.Client) -> BankrailClock:
    """The server's service clock: `now()` and `advance(seconds)` (shared by every test on
    the server; it only moves forward)."""
    return BankrailClock(bankrail_operator)
