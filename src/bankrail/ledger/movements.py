"""Every kind of movement of a merchant account's money, named once: which ledger accounts
move, and the kind of the ledger transaction that records it.

- `hold`: a payout or refund is accepted; available falls, current does not.
- `release`: it failed; held funds go back to available.
- `execute`: it left over a rail; held funds go to the rail's clearing account.
- `transfer`: a payout to another Bankrail account executed; held funds of the payer credit
  the payee's available funds in one transaction.
- `end_hold`: which of the three ends a hold (`release`, `transfer` or `execute`).
- `settle_pay_in`, `top_up`: money arrives from outside over a rail; available rises.
- `sandbox_reset`: a sandbox merchant starts clean; a balance (available or held) goes to the
  account's sandbox-reset account, so that the books stay balanced with the history kept.

A refund's movements are `hold`, `release` and `execute` with the purpose `REFUND` (kinds
`refund_hold`, `refund_release`, `refund_execution`), a payout's the same with `PAYOUT`.

Each function only decides; the writers are `record` (one movement, in the caller's
transaction), `columns` (the parallel arrays the batch writers of db/functions pass to
`bankrail_post_transactions`) and `merchants.balances.move` (a movement followed by the
balance notification it may cause).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from bankrail.core.ids import new_id
from bankrail.db.pool import Connection
from bankrail.ledger.models import transfer as postings
from bankrail.ledger.service import ensure_account, post

__all__ = [
    "PAYOUT",
    "REFUND",
    "AccountLedgers",
    "Clearing",
    "Ledgers",
    "Movement",
    "Payee",
    "Purpose",
    "columns",
    "end_hold",
    "execute",
    "hold",
    "record",
    "release",
    "sandbox_reset",
    "settle_pay_in",
    "top_up",
    "transfer",
]


class Purpose(StrEnum):
    """What funds are held for; it names the kinds of the hold's transactions."""

    PAYOUT = "payout"
    REFUND = "refund"


PAYOUT = Purpose.PAYOUT
REFUND = Purpose.REFUND


class AccountLedgers(Protocol):
    """What the ledger knows of a merchant account: its id and currency, and the ledger
    accounts of its available and held funds (a `merchants.models.MerchantAccount` or
    `AccountFacts`)."""

    @property
    def id(self) -> uuid.UUID: ...

    @property
    def currency(self) -> str: ...

    @property
    def available_ledger_id(self) -> int: ...

    @property
    def held_ledger_id(self) -> int: ...


@dataclass(frozen=True)
class Ledgers:
    """An `AccountLedgers` read from a row rather than a merchant account."""

    id: uuid.UUID
    currency: str
    available_ledger_id: int
    held_ledger_id: int


@dataclass(frozen=True)
class Clearing:
    """The ledger account that stands for the outside world on one rail, for one merchant
    account, created on first use. (One per merchant account rather than one per rail: a
    single shared account would sum every merchant's volume and could overflow 64 bits,
    failing everyone.)"""

    rail: str
    currency: str
    account_id: uuid.UUID

    @property
    def code(self) -> str:
        """Its code in ledger_accounts (`bankrail_clearing_accounts` creates it from SQL)."""
        return f"clearing:{self.rail}:{self.currency}:{self.account_id}"


@dataclass(frozen=True)
class Movement:
    """One balanced ledger transaction of two postings, decided and not yet written.

    `available_of` is the merchant account whose available balance it changes (its balance
    notification may move), None when none does."""

    kind: str
    reference_id: uuid.UUID
    currency: str
    amount: int
    source: int | Clearing
    destination: int | Clearing
    available_of: uuid.UUID | None
    id: uuid.UUID = field(default_factory=new_id)


def hold(
    account: AccountLedgers, purpose: Purpose, amount: int, reference_id: uuid.UUID
) -> Movement:
    """Set `amount` aside for a payout or refund: available to held."""
    return Movement(
        f"{purpose}_hold",
        reference_id,
        account.currency,
        amount,
        account.available_ledger_id,
        account.held_ledger_id,
        account.id,
    )


def release(
    account: AccountLedgers, purpose: Purpose, amount: int, reference_id: uuid.UUID
) -> Movement:
    """Give held funds back (the payout or refund failed): held to available."""
    return Movement(
        f"{purpose}_release",
        reference_id,
        account.currency,
        amount,
        account.held_ledger_id,
        account.available_ledger_id,
        account.id,
    )


def execute(
    account: AccountLedgers, purpose: Purpose, rail: str, amount: int, reference_id: uuid.UUID
) -> Movement:
    """Held funds leave over `rail` (the payout or refund executed): held to the rail's
    clearing account; current falls."""
    return Movement(
        f"{purpose}_execution",
        reference_id,
        account.currency,
        amount,
        account.held_ledger_id,
        Clearing(rail, account.currency, account.id),
        None,
    )


def transfer(
    account: AccountLedgers,
    payee_id: uuid.UUID,
    payee_available_ledger_id: int,
    amount: int,
    reference_id: uuid.UUID,
) -> Movement:
    """A payout to another Bankrail account executed: the payer's held funds credit the
    payee's available funds."""
    return Movement(
        "internal_transfer",
        reference_id,
        account.currency,
        amount,
        account.held_ledger_id,
        payee_available_ledger_id,
        payee_id,
    )


@dataclass(frozen=True)
class Payee:
    """The Bankrail account a closed-loop payout pays."""

    id: uuid.UUID
    available_ledger_id: int


def end_hold(
    account: AccountLedgers,
    purpose: Purpose,
    amount: int,
    reference_id: uuid.UUID,
    *,
    failed: bool,
    rail: str,
    payee: Payee | None = None,
) -> Movement:
    """How a hold ends: released when its payout or refund failed, else paid to the payee
    at Bankrail when there is one, else executed over `rail`."""
    if failed:
        return release(account, purpose, amount, reference_id)
    if payee is not None:
        return transfer(account, payee.id, payee.available_ledger_id, amount, reference_id)
    return execute(account, purpose, rail, amount, reference_id)


def settle_pay_in(
    account: AccountLedgers, rail: str, amount: int, payment_id: uuid.UUID
) -> Movement:
    """A pay-in settled: the rail's clearing account to available (kind `payment`)."""
    return _arrival("payment", account, rail, amount, payment_id)


def top_up(account: AccountLedgers, rail: str, amount: int, transfer_id: uuid.UUID) -> Movement:
    """A bank transfer arrived: the rail's clearing account to available (kind `topup`)."""
    return _arrival("topup", account, rail, amount, transfer_id)


def _arrival(
    kind: str, account: AccountLedgers, rail: str, amount: int, reference_id: uuid.UUID
) -> Movement:
    return Movement(
        kind,
        reference_id,
        account.currency,
        amount,
        Clearing(rail, account.currency, account.id),
        account.available_ledger_id,
        account.id,
    )


def sandbox_reset(account: AccountLedgers, ledger_id: int, amount: int) -> Movement:
    """A sandbox merchant started clean: the whole balance `amount` of one of the account's
    ledger accounts (its available or its held funds) leaves for the account's sandbox-reset
    account (kind `sandbox_reset`, referencing the merchant account)."""
    return Movement(
        "sandbox_reset",
        account.id,
        account.currency,
        amount,
        ledger_id,
        Clearing("sandbox_reset", account.currency, account.id),
        account.id if ledger_id == account.available_ledger_id else None,
    )


async def _ledger_id(conn: Connection, end: int | Clearing) -> int:
    if isinstance(end, int):
        return end
    return await ensure_account(conn, end.code, end.currency, allow_negative=True)


async def record(conn: Connection, movement: Movement, now: datetime) -> None:
    """Write one movement in the caller's transaction (`ledger.service.post`: raises
    InsufficientFunds, nothing written, when available would fall below zero)."""
    source = await _ledger_id(conn, movement.source)
    destination = await _ledger_id(conn, movement.destination)
    await post(
        conn,
        kind=movement.kind,
        reference_id=movement.reference_id,
        postings=postings(source, destination, movement.amount),
        now=now,
        transaction_id=movement.id,
    )


def columns(movements: Sequence[Movement]) -> list[list[Any]]:
    """The movements as the parallel arrays of the batch writers: ids, kinds, references,
    source ledger ids, destination ledger ids (NULL for a clearing account), destination
    clearing codes (NULL otherwise), currencies, amounts. A source is always a merchant's
    ledger account on these paths (holds and their ends)."""
    out: list[list[Any]] = [[] for _ in range(8)]
    for m in movements:
        assert isinstance(m.source, int), "batch movements leave a merchant's ledger account"
        to_id = m.destination if isinstance(m.destination, int) else None
        to_code = m.destination.code if isinstance(m.destination, Clearing) else None
        row = (m.id, m.kind, m.reference_id, m.source, to_id, to_code, m.currency, m.amount)
        for column, value in zip(out, row, strict=True):
            column.append(value)
    return out
