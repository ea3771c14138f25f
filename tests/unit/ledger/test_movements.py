"""Unit tests for bankrail.ledger.movements: which ledger accounts each kind of movement
moves, and its transaction's kind."""

from __future__ import annotations

import uuid

import pytest

from bankrail.ledger.movements import (
    PAYOUT,
    REFUND,
    Clearing,
    Ledgers,
    Movement,
    Payee,
    columns,
    end_hold,
    hold,
    settle_pay_in,
    top_up,
)

ACCOUNT = Ledgers(uuid.UUID(int=1), "GBP", available_ledger_id=10, held_ledger_id=11)
REF = uuid.UUID(int=2)
PAYEE = Payee(uuid.UUID(int=3), available_ledger_id=30)


def _route(m: Movement) -> tuple[object, ...]:
    return (m.kind, m.source, m.destination, m.available_of)


def test_a_hold_moves_available_to_held() -> None:
    assert _route(hold(ACCOUNT, PAYOUT, 5, REF)) == ("payout_hold", 10, 11, ACCOUNT.id)
    assert _route(hold(ACCOUNT, REFUND, 5, REF))[0] == "refund_hold"


@pytest.mark.parametrize(
    ("failed", "payee", "expected"),
    [
        (True, None, ("payout_release", 11, 10, ACCOUNT.id)),
        (True, PAYEE, ("payout_release", 11, 10, ACCOUNT.id)),
        (False, PAYEE, ("internal_transfer", 11, 30, PAYEE.id)),
        (False, None, ("payout_execution", 11, Clearing("fps", "GBP", ACCOUNT.id), None)),
    ],
    ids=["failed", "failed-closed-loop", "closed-loop", "open-loop"],
)
def test_a_hold_ends_released_transferred_or_executed(
    failed: bool, payee: Payee | None, expected: tuple[object, ...]
) -> None:
    movement = end_hold(ACCOUNT, PAYOUT, 5, REF, failed=failed, rail="fps", payee=payee)
    assert _route(movement) == expected


def test_a_refund_ends_as_refund_transactions() -> None:
    assert end_hold(ACCOUNT, REFUND, 5, REF, failed=True, rail="fps").kind == "refund_release"
    assert end_hold(ACCOUNT, REFUND, 5, REF, failed=False, rail="fps").kind == "refund_execution"


def test_money_from_outside_moves_a_rails_clearing_account_to_available() -> None:
    clearing = Clearing("card", "GBP", ACCOUNT.id)
    assert _route(settle_pay_in(ACCOUNT, "card", 5, REF)) == ("payment", clearing, 10, ACCOUNT.id)
    assert _route(top_up(ACCOUNT, "card", 5, REF)) == ("topup", clearing, 10, ACCOUNT.id)
    assert clearing.code == f"clearing:card:GBP:{ACCOUNT.id}"


def test_columns_name_a_clearing_account_by_its_code() -> None:
    executed = end_hold(ACCOUNT, PAYOUT, 7, REF, failed=False, rail="fps")
    released = end_hold(ACCOUNT, PAYOUT, 8, REF, failed=True, rail="fps")
    ids, kinds, refs, sources, to_ids, to_codes, currencies, amounts = columns([executed, released])
    assert ids == [executed.id, released.id]
    assert kinds == ["payout_execution", "payout_release"]
    assert refs == [REF, REF]
    assert sources == [11, 11]
    assert to_ids == [None, 10]
    assert to_codes == [f"clearing:fps:GBP:{ACCOUNT.id}", None]
    assert (currencies, amounts) == (["GBP", "GBP"], [7, 8])
