"""Ledger rules in plain Python: what makes a set of postings a valid transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class UnbalancedTransaction(ValueError):
    """Postings that do not sum to zero, or that are otherwise not a transaction."""


class InsufficientFunds(Exception):
    """A posting would take an account that may not go negative below zero."""


class BalanceOverflow(Exception):
    """A balance would leave the range of a 64-bit integer of minor units."""


@dataclass(frozen=True)
class Posting:
    """An amount (minor units, signed) added to one ledger account."""

    account_id: int
    amount: int


def validate_postings(postings: Sequence[Posting]) -> None:
    """Accept only balanced transactions of at least two non-zero postings."""
    if len(postings) < 2:
        raise UnbalancedTransaction("a transaction needs at least two postings")
    if any(p.amount == 0 for p in postings):
        raise UnbalancedTransaction("a posting may not be zero")
    if sum(p.amount for p in postings) != 0:
        raise UnbalancedTransaction("postings must sum to zero")


def transfer(source: int, destination: int, amount: int) -> list[Posting]:
    """The two postings that move `amount` from one account to another."""
    if amount <= 0:
        raise UnbalancedTransaction("a transfer amount must be positive")
    return [Posting(source, -amount), Posting(destination, amount)]
