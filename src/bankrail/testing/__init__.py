"""Bankrail's kit for testing a merchant integration: a pytest plugin and the pieces it is
made of.

Installed with the `bankrail` package, the plugin is loaded by pytest through the `pytest11`
entry point; it starts nothing until a test uses one of its fixtures:

- `bankrail_server` (session): a `bankrail serve` on an embedded PostgreSQL in a temporary
  directory, or the server at `BANKRAIL_URL` with `BANKRAIL_ADMIN_TOKEN`;
- `bankrail_operator` (session): an `httpx.Client` for the operator and sandbox API;
- `bankrail_merchant`: a new merchant per test, with credentials, a signing key and funded
  GBP and EUR accounts;
- `bankrail_client`: an `httpx.Client` for that merchant (`BankrailAuth`);
- `bankrail_webhooks`: a local receiver of the merchant's webhooks, verifying signatures;
- `bankrail_clock`: the service clock.

`BankrailAuth` is also meant for use outside tests. Everything here talks to Bankrail over
HTTP only.
"""

from __future__ import annotations

import importlib.util

from bankrail.testing._auth import BankrailAuth
from bankrail.testing._client import (
    BankrailClock,
    Merchant,
    OperatorError,
    create_merchant,
    mock_bank_pay_in,
)
from bankrail.testing._jws import generate_key_pem, public_key_pem
from bankrail.testing._server import (
    BankrailServer,
    ServerError,
    connect_server,
    probe_server,
    start_server,
)
from bankrail.testing._webhooks import BankrailWebhooks, WebhookDelivery, WebhookTimeout

__all__ = [
    "BankrailAuth",
    "BankrailClock",
    "BankrailServer",
    "BankrailWebhooks",
    "Merchant",
    "OperatorError",
    "ServerError",
    "WebhookDelivery",
    "WebhookTimeout",
    "connect_server",
    "create_merchant",
    "generate_key_pem",
    "mock_bank_pay_in",
    "probe_server",
    "public_key_pem",
    "start_server",
]

# The fixtures need pytest, which is not a runtime dependency; BankrailAuth does not.
if importlib.util.find_spec("pytest") is not None:
    from bankrail.testing._fixtures import (
        bankrail_client,
        bankrail_clock,
        bankrail_merchant,
        bankrail_operator,
        bankrail_server,
        bankrail_webhooks,
        pytest_addoption,
    )

    __all__ += [
        "bankrail_client",
        "bankrail_clock",
        "bankrail_merchant",
        "bankrail_operator",
        "bankrail_server",
        "bankrail_webhooks",
        "pytest_addoption",
    ]
