"""Unit tests for bankrail.ledger.models: what makes postings a valid transaction."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bankrail.ledger.models import Posting, UnbalancedTransaction, transfer, validate_postings


def test_balanced_two_postings_are_valid() -> None:
    validate_postings([Posting(1, -500), Posting(2, 500)])


def test_balanced_multi_leg_transaction_is_valid() -> None:
    validate_postings([Posting(1, -700), Posting(2, 200), Posting(3, 500)])


def test_postings_on_the_same_account_that_balance_are_valid() -> None:
    validate_postings([Posting(1, -5), Posting(1, 5)])


def test_zero_posting_is_rejected_even_when_balanced() -> None:
    with pytest.raises(UnbalancedTransaction, match="zero"):
        validate_postings([Posting(1, -100), Posting(2, 100), Posting(3, 0)])


def test_single_posting_is_rejected() -> None:
    with pytest.raises(UnbalancedTransaction, match="two postings"):
        validate_postings([Posting(1, 0)])
    with pytest.raises(UnbalancedTransaction, match="two postings"):
        validate_postings([Posting(1, 100)])


def test_no_postings_is_rejected() -> None:
    with pytest.raises(UnbalancedTransaction):
        validate_postings([])


@pytest.mark.parametrize(
    "postings",
    [
        [Posting(1, -100), Posting(2, 99)],
        [Posting(1, -100), Posting(2, 101)],
        [Posting(1, 100), Posting(2, 100)],
        [Posting(1, -1), Posting(2, -1), Posting(3, 1)],
    ],
)
def test_unbalanced_postings_are_rejected(postings: list[Posting]) -> None:
    with pytest.raises(UnbalancedTransaction, match="sum to zero"):
        validate_postings(postings)


def test_unbalanced_transaction_is_a_value_error() -> None:
    assert issubclass(UnbalancedTransaction, ValueError)


def test_transfer_moves_amount_from_source_to_destination() -> None:
    postings = transfer(7, 9, 1234)
    assert postings == [Posting(7, -1234), Posting(9, 1234)]
    validate_postings(postings)


@pytest.mark.parametrize("amount", [0, -1, -1000])
def test_transfer_of_non_positive_amount_is_rejected(amount: int) -> None:
    with pytest.raises(UnbalancedTransaction, match="positive"):
        transfer(1, 2, amount)


@given(
    source=st.integers(min_value=1, max_value=10**6),
    destination=st.integers(min_value=1, max_value=10**6),
    amount=st.integers(min_value=1, max_value=10**15),
)
def test_every_transfer_is_a_valid_transaction(source: int, destination: int, amount: int) -> None:
    postings = transfer(source, destination, amount)
    validate_postings(postings)
    assert sum(p.amount for p in postings) == 0
    assert {p.account_id for p in postings} == {source, destination}
