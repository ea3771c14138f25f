"""Merchant accounts as the API shows them, and the rules for their identifiers."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from schwifty import IBAN

# Bankrail's own bank code and sort codes. GBP accounts are GB IBANs that embed a UK sort
# code and account number; EUR accounts are IE IBANs (a euro rail reached from the UK).
BANK_CODE = "BRAL"
GBP_SORT_CODE = "608371"
EUR_BRANCH_CODE = "608372"


@dataclass(frozen=True)
class AccountIdentifiers:
    """The identifiers that route money to an account."""

    iban: str
    sort_code: str | None
    account_number: str | None

    def as_list(self) -> list[dict[str, str]]:
        """The `account_identifiers` array of spec 2.4.1."""
        items: list[dict[str, str]] = []
        if self.sort_code and self.account_number:
            items.append(
                {
                    "type": "sort_code_account_number",
                    "sort_code": self.sort_code,
                    "account_number": self.account_number,
                }
            )
        if self.iban:
            items.append({"type": "iban", "iban": self.iban})
        return items


@dataclass(frozen=True)
class AccountFacts:
    """A merchant account as a batch's read found it, its ledger rows locked: what the
    rules of an outgoing payment (a payout, a refund) need to know of the account paying it."""

    id: uuid.UUID
    merchant_id: uuid.UUID
    currency: str
    available_ledger_id: int
    held_ledger_id: int
    balance_threshold: int | None
    notification_state: str
    available: int
    held: int

    @classmethod
    def from_row(cls, row: Any) -> AccountFacts:
        """The account of a batch read's row, whose columns name it `account_id`,
        `account_merchant_id`, `account_currency`, and its ledger rows, threshold,
        notification state and balances by their own names."""
        return cls(
            id=row["account_id"],
            merchant_id=row["account_merchant_id"],
            currency=row["account_currency"],
            available_ledger_id=row["available_ledger_id"],
            held_ledger_id=row["held_ledger_id"],
            balance_threshold=row["balance_threshold"],
            notification_state=row["notification_state"],
            available=row["available"],
            held=row["held"],
        )


def new_account_identifiers(currency: str) -> AccountIdentifiers:
    """Fresh, valid identifiers for a new account in `currency` (GBP or EUR)."""
    account_number = f"{secrets.randbelow(10**8):08d}"
    if currency == "GBP":
        iban = IBAN.generate(
            "GB", bank_code=BANK_CODE, branch_code=GBP_SORT_CODE, account_code=account_number
        )
        return AccountIdentifiers(str(iban), GBP_SORT_CODE, account_number)
    if currency == "EUR":
        iban = IBAN.generate(
            "IE", bank_code=BANK_CODE, branch_code=EUR_BRANCH_CODE, account_code=account_number
        )
        return AccountIdentifiers(str(iban), None, None)
    raise ValueError(f"merchant accounts are held in GBP or EUR, not {currency}")


@dataclass(frozen=True)
class MerchantAccount:
    """A merchant's currency account with its balances."""

    id: uuid.UUID
    merchant_id: uuid.UUID
    currency: str
    identifiers: AccountIdentifiers
    account_holder_name: str
    available_ledger_id: int
    held_ledger_id: int
    available_balance: int
    held_balance: int
    balance_threshold: int | None
    notification_state: str
    status: str
    created_at: datetime

    @property
    def current_balance(self) -> int:
        """Settled funds: what is available plus what is held for pending payouts."""
        return self.available_balance + self.held_balance

    def to_v3(self) -> dict[str, Any]:
        """The v3 merchant-account resource."""
        return {
            "id": str(self.id),
            "currency": self.currency,
            "account_identifiers": self.identifiers.as_list(),
            "account_holder_name": self.account_holder_name,
            "current_balance_in_minor": self.current_balance,
            "available_balance_in_minor": self.available_balance,
            "balance_threshold_in_minor": self.balance_threshold,
        }

    def to_v1_balance(self) -> dict[str, Any]:
        """The v1 balance entry (spec 2.1)."""
        return {
            "currency": self.currency,
            "iban": self.identifiers.iban,
            "status": self.status,
            "current_balance_in_minor": self.current_balance,
            "available_balance_in_minor": self.available_balance,
        }
