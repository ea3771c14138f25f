"""The mock bank's rules (bankrail.rails.mock_bank, docs/api.md): which
outcome a username picks, and which bank account a payer pays from."""

from __future__ import annotations

import pytest
from schwifty import IBAN

from bankrail.rails.mock_bank import action_for_username, remitter_for


@pytest.mark.parametrize(
    ("username", "action"),
    [
        ("test_executed", "Execute"),
        ("test_authorisation_failed", "RejectAuthorisation"),
        ("test_execution_rejected", "RejectExecution"),
        ("TEST_EXECUTED", "Execute"),
        ("Test_Authorisation_Failed", "RejectAuthorisation"),
        ("TEST_execution_REJECTED", "RejectExecution"),
        ("  test_execution_rejected  ", "RejectExecution"),
    ],
)
def test_each_username_picks_its_outcome_case_insensitively(username: str, action: str) -> None:
    assert action_for_username(username) == action


@pytest.mark.parametrize(
    "username",
    ["alice", "", "test", "test_authorization_failed", "test_executed_x", "x_test_executed"],
)
def test_any_other_username_executes(username: str) -> None:
    assert action_for_username(username) == "Execute"


@pytest.mark.parametrize("currency", ["GBP", "EUR"])
def test_the_same_user_always_pays_from_the_same_account(currency: str) -> None:
    first = remitter_for("user-1", currency, "Jane Payer")
    again = remitter_for("user-1", currency, "Jane Payer")
    assert first == again
    # The name shown does not pick the account.
    assert remitter_for("user-1", currency, None).identifiers == first.identifiers


@pytest.mark.parametrize("currency", ["GBP", "EUR"])
def test_different_users_pay_from_different_accounts(currency: str) -> None:
    users = [f"user-{n}" for n in range(200)]
    ibans = {remitter_for(u, currency, None).identifiers.iban for u in users}
    assert len(ibans) == len(users)


def test_one_user_has_a_different_account_per_currency() -> None:
    gbp = remitter_for("user-1", "GBP", None).identifiers
    eur = remitter_for("user-1", "EUR", None).identifiers
    assert gbp.iban != eur.iban


@pytest.mark.parametrize("currency", ["GBP", "EUR"])
@pytest.mark.parametrize("user", ["u1", "0", "ünïcode-user", "a" * 200, "8f9e6a4c-user"])
def test_remitter_ibans_are_valid(currency: str, user: str) -> None:
    identifiers = remitter_for(user, currency, None).identifiers
    parsed = IBAN(identifiers.iban)  # raises on a bad checksum, length or format
    assert str(parsed.compact) == identifiers.iban
    if currency == "GBP":
        assert parsed.country_code == "GB"
    else:
        assert parsed.country_code != "GB"


@pytest.mark.parametrize("user", ["u1", "u2", "someone-else"])
def test_gbp_remitter_has_a_sort_code_and_account_number_matching_its_iban(user: str) -> None:
    identifiers = remitter_for(user, "GBP", None).identifiers
    assert identifiers.sort_code is not None
    assert identifiers.account_number is not None
    assert len(identifiers.sort_code) == 6
    assert identifiers.sort_code.isdigit()
    assert len(identifiers.account_number) == 8
    assert identifiers.account_number.isdigit()
    # A GB IBAN is GBkk BANK SSSSSS AAAAAAAA.
    assert identifiers.iban[8:14] == identifiers.sort_code
    assert identifiers.iban[14:] == identifiers.account_number
    kinds = [item["type"] for item in identifiers.as_list()]
    assert kinds == ["sort_code_account_number", "iban"]


def test_eur_remitter_has_only_an_iban() -> None:
    identifiers = remitter_for("u1", "EUR", None).identifiers
    assert identifiers.sort_code is None
    assert identifiers.account_number is None
    assert identifiers.as_list() == [{"type": "iban", "iban": identifiers.iban}]


def test_holder_name_is_the_users_name_or_a_default() -> None:
    assert remitter_for("u1", "GBP", "Jane Payer").account_holder_name == "Jane Payer"
    default = remitter_for("u1", "GBP", None).account_holder_name
    assert default
    assert default == remitter_for("u2", "EUR", None).account_holder_name
