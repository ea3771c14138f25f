"""The mock bank: where the payer logs in, what a payer's choice at the bank does, and who the
payer's account is."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

from schwifty import IBAN

from bankrail.merchants.models import AccountIdentifiers

# The usernames that pick an outcome on the consent page and in the embedded form.
USERNAME_ACTIONS = {
    "test_executed": "Execute",
    "test_authorisation_failed": "RejectAuthorisation",
    "test_execution_rejected": "RejectExecution",
}


def login_uri(public_url: str, resource_id: uuid.UUID, token: str) -> str:
    """The mock bank's login page of one payment or mandate, as the real sandbox shapes it:
    `{public_url}/mock-bank/login/{id}#token={token}` (the token stays in the browser)."""
    return f"{public_url}/mock-bank/login/{resource_id}#token={token}"


def provider_return_url(target: str, public_url: str, kind: str, resource_id: uuid.UUID) -> str:
    """The absolute URL the mock bank sends the payer to after a decision: the resource's
    return URI with `{kind}_id` in its query, or (none given) the mock bank's own page of the
    resource, which carries the same query (`POST /v3/payments-provider-return` reads it)."""
    return target or f"{public_url}/mock-bank/login/{resource_id}?{kind}_id={resource_id}"


def action_for_username(username: str) -> str:
    """The bank action a username chooses; any other username succeeds."""
    return USERNAME_ACTIONS.get(username.strip().lower(), "Execute")


@dataclass(frozen=True)
class Remitter:
    """The payer's bank account at the mock bank."""

    account_holder_name: str
    identifiers: AccountIdentifiers


def remitter_for(user_id: str, currency: str, name: str | None) -> Remitter:
    """The same user always pays from the same account (so its payment source is stable)."""
    digest = int.from_bytes(hashlib.sha256(f"{user_id}|{currency}".encode()).digest()[:8], "big")
    holder = name or "Sandbox Payer"
    if currency == "GBP":
        number = f"{digest % 10**8:08d}"
        iban = IBAN.generate("GB", bank_code="MOCK", branch_code="040004", account_code=number)
        return Remitter(holder, AccountIdentifiers(str(iban), "040004", number))
    number = f"{digest % 10**10:010d}"
    iban = IBAN.generate("NL", bank_code="MOCK", account_code=number)
    return Remitter(holder, AccountIdentifiers(str(iban), None, None))
