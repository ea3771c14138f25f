"""A merchant made through the operator API, the sandbox clock, and a pay-in through the
headless mock bank: the objects behind the fixtures, usable on their own."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from bankrail.testing._auth import BankrailAuth
from bankrail.testing._jws import generate_key_pem, public_key_pem

__all__ = [
    "DEFAULT_FUNDING",
    "BankrailClock",
    "Merchant",
    "OperatorError",
    "create_merchant",
    "mock_bank_pay_in",
]

# What a new merchant's accounts receive through the sandbox's bank transfers, in minor units.
DEFAULT_FUNDING: Mapping[str, int] = {"GBP": 1_000_000, "EUR": 1_000_000}

# The mock bank's redirect provider for each account currency.
_PROVIDERS = {"GBP": "mock-payments-gb-redirect", "EUR": "mock-payments-de-redirect"}


class OperatorError(RuntimeError):
    """The operator API refused a call the kit needs."""


def _ok(answer: httpx.Response, *codes: int) -> Any:
    if answer.status_code not in codes:
        raise OperatorError(
            f"{answer.request.method} {answer.request.url.path} answered "
            f"{answer.status_code}: {answer.text}"
        )
    return answer.json()


@dataclass
class Merchant:
    """A merchant's identity and credentials: `accounts` maps a currency to its merchant
    account (`id`, `currency`, `account_identifiers`, ...) as the operator API created it."""

    id: str
    name: str
    client_id: str
    client_secret: str
    kid: str
    private_key_pem: str = field(repr=False)
    accounts: dict[str, dict[str, Any]]

    def auth(self) -> BankrailAuth:
        """An `httpx.Auth` that gets this merchant's tokens and signs its POSTs."""
        return BankrailAuth(self.client_id, self.client_secret, self.kid, self.private_key_pem)

    def account_id(self, currency: str) -> str:
        """The id of the merchant account in `currency`."""
        return str(self.accounts[currency]["id"])

    def iban(self, currency: str) -> str:
        """The IBAN of the merchant account in `currency`."""
        return next(
            str(i["iban"])
            for i in self.accounts[currency]["account_identifiers"]
            if i["type"] == "iban"
        )


def create_merchant(
    operator: httpx.Client,
    name: str = "Test Merchant",
    funding: Mapping[str, int] = DEFAULT_FUNDING,
) -> Merchant:
    """A new merchant through the operator API: client credentials (scope `payments`), a new
    P-521 signing key registered, and a funded merchant account per currency of `funding`
    (a sandbox bank transfer each; 0 leaves the account empty)."""
    made = _ok(operator.post("/admin/merchants", json={"name": name}), 201)
    merchant_id = str(made["id"])
    client = _ok(operator.post(f"/admin/merchants/{merchant_id}/clients", json={}), 201)
    pem = generate_key_pem()
    key = _ok(
        operator.post(
            f"/admin/merchants/{merchant_id}/signing-keys",
            json={"public_key_pem": public_key_pem(pem)},
        ),
        201,
    )
    merchant = Merchant(
        id=merchant_id,
        name=name,
        client_id=str(client["client_id"]),
        client_secret=str(client["client_secret"]),
        kid=str(key["kid"]),
        private_key_pem=pem,
        accounts={},
    )
    for currency, amount in funding.items():
        merchant.accounts[currency] = _ok(
            operator.post(
                f"/admin/merchants/{merchant_id}/merchant-accounts", json={"currency": currency}
            ),
            201,
        )
        if amount > 0:
            _ok(
                operator.post(
                    "/sandbox/bank-transfers",
                    json={
                        "iban": merchant.iban(currency),
                        "amount_in_minor": amount,
                        "currency": currency,
                        "remitter_name": "Bankrail Test Funding",
                        "reference": "test funding",
                    },
                ),
                201,
            )
    return merchant


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class BankrailClock:
    """The server's service clock (`/sandbox/clock`): shared by every merchant on that
    server, and it only moves forward."""

    def __init__(self, operator: httpx.Client) -> None:
        self._operator = operator

    def now(self) -> datetime:
        """The service time (timezone-aware, UTC)."""
        return _parse_time(str(_ok(self._operator.get("/sandbox/clock"), 200)["now"]))

    def advance(self, seconds: float) -> datetime:
        """Move the service clock forward; due work (webhook retries, delayed payout steps,
        expiries) happens at once. Returns the new service time."""
        answer = self._operator.post("/sandbox/clock/advance", json={"seconds": seconds})
        return _parse_time(str(_ok(answer, 200)["now"]))


def mock_bank_pay_in(
    client: httpx.Client,
    merchant_account_id: str,
    amount_in_minor: int,
    currency: str = "GBP",
    *,
    user: Mapping[str, Any] | None = None,
    action: str = "Execute",
    metadata: Mapping[str, str] | None = None,
    return_uri: str = "https://merchant.example/return",
) -> str:
    """Create a pay-in into the merchant account and have the payer decide it at the mock
    bank, headless (`action`: `Execute`, `RejectAuthorisation`, `RejectExecution` or
    `Cancel`). `client` is the merchant's (authenticated with `BankrailAuth`). Returns the
    payment id; the payment then settles (or fails) and its webhooks follow."""
    body: dict[str, Any] = {
        "amount_in_minor": amount_in_minor,
        "currency": currency,
        "payment_method": {
            "type": "bank_transfer",
            "provider_selection": {
                "type": "preselected",
                "provider_id": _PROVIDERS[currency],
            },
            "beneficiary": {"type": "merchant_account", "merchant_account_id": merchant_account_id},
        },
        "user": dict(user) if user is not None else {"id": str(uuid.uuid4()), "name": "Test Payer"},
    }
    if metadata is not None:
        body["metadata"] = dict(metadata)
    created = _ok(client.post("/v3/payments", json=body), 201)
    payment_id = str(created["id"])
    flow = _ok(
        client.post(
            f"/v3/payments/{payment_id}/authorization-flow",
            json={"provider_selection": {}, "redirect": {"return_uri": return_uri}},
        ),
        200,
    )
    step = flow["authorization_flow"]["actions"]["next"]
    if step["type"] != "redirect":
        raise OperatorError(f"expected a redirect to the mock bank, got {step}")
    bank_token = parse_qs(urlsplit(step["uri"]).fragment)["token"][0]
    decided = client.post(
        f"/mock-bank/api/single-immediate-payments/{payment_id}/action",
        json={"action": action},
        headers={"Authorization": f"Bearer {bank_token}"},
    )
    if decided.status_code != 202:  # its answer is the provider return URL, plain text
        raise OperatorError(f"the mock bank answered {decided.status_code}: {decided.text}")
    return payment_id
