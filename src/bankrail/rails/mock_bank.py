"""The mock bank: what a payer's choice at the bank does, and who the payer's account is."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from schwifty import IBAN

from bankrail.merchants.models import AccountIdentifiers

# The usernames that pick an outcome on the consent page and in the embedded form.
USERNAME_ACTIONS = {
    "test_executed": "Execute",
    "test_authorisation_failed": "RejectAuthorisation",
    "test_execution_rejected": "RejectExecution",
}


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
