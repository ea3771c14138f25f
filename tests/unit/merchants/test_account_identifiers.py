"""Unit tests for bankrail.merchants.models: account identifiers and their shapes."""

from __future__ import annotations

import pytest
from schwifty import IBAN

from bankrail.merchants.models import (
    BANK_CODE,
    EUR_BRANCH_CODE,
    GBP_SORT_CODE,
    AccountIdentifiers,
    new_account_identifiers,
)


def test_gbp_identifiers_are_a_valid_gb_iban_with_sort_code_and_account_number() -> None:
    for _ in range(50):
        ids = new_account_identifiers("GBP")
        iban = IBAN(ids.iban)  # raises on a bad checksum or format
        assert iban.country_code == "GB"
        assert str(iban) == ids.iban  # stored in compact form
        assert ids.sort_code == GBP_SORT_CODE == "608371"
        assert ids.account_number is not None
        assert len(ids.account_number) == 8
        assert ids.account_number.isdigit()
        assert ids.iban == f"GB{ids.iban[2:4]}{BANK_CODE}608371{ids.account_number}"
        assert iban.bank_code == BANK_CODE
        assert iban.branch_code == "608371"
        assert iban.account_code == ids.account_number


def test_eur_identifiers_are_a_valid_ie_iban_only() -> None:
    for _ in range(50):
        ids = new_account_identifiers("EUR")
        iban = IBAN(ids.iban)
        assert iban.country_code == "IE"
        assert iban.bank_code == BANK_CODE
        assert iban.branch_code == EUR_BRANCH_CODE
        assert ids.sort_code is None
        assert ids.account_number is None


def test_identifiers_are_fresh() -> None:
    ibans = {new_account_identifiers("GBP").iban for _ in range(200)}
    assert len(ibans) > 190


@pytest.mark.parametrize("currency", ["USD", "gbp", "", "EURO"])
def test_other_currencies_are_refused(currency: str) -> None:
    with pytest.raises(ValueError, match="GBP or EUR"):
        new_account_identifiers(currency)


def test_as_list_for_gbp_has_sort_code_then_iban() -> None:
    ids = AccountIdentifiers("GB33BRAL60837112345678", "608371", "12345678")
    assert ids.as_list() == [
        {"type": "sort_code_account_number", "sort_code": "608371", "account_number": "12345678"},
        {"type": "iban", "iban": "GB33BRAL60837112345678"},
    ]


def test_as_list_for_eur_has_only_the_iban() -> None:
    ids = AccountIdentifiers("IE29BRAL60837212345678", None, None)
    assert ids.as_list() == [{"type": "iban", "iban": "IE29BRAL60837212345678"}]


def test_as_list_needs_both_sort_code_and_account_number() -> None:
    assert [i["type"] for i in AccountIdentifiers("X", "608371", None).as_list()] == ["iban"]
    assert [i["type"] for i in AccountIdentifiers("X", None, "12345678").as_list()] == ["iban"]


def test_generated_identifiers_as_list_round_trip() -> None:
    ids = new_account_identifiers("GBP")
    listed = ids.as_list()
    assert listed[0]["sort_code"] == ids.sort_code
    assert listed[0]["account_number"] == ids.account_number
    assert listed[1]["iban"] == ids.iban
