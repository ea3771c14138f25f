"""The rules of verified payouts (payouts/verification.py): which providers a selection leaves
the payee, name and transaction-search verification, and the stages before the rails."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from bankrail.core.problems import InvalidParameters
from bankrail.merchants.models import AccountIdentifiers
from bankrail.payouts.verification import (
    AUTHORIZATION_WINDOW,
    VerifiedStage,
    authorize,
    check_selection,
    choose_provider,
    expires_at,
    expiry,
    name_matches,
    pay_in_matches,
    selectable_providers,
    verification_failure,
)
from bankrail.rails.lifecycle import FailureReason, InvalidTransition, Stage
from bankrail.rails.pay_ins import KnownAccount, PayIn
from bankrail.rails.providers import CATALOGUE, VERIFIED_PAYOUT_PROVIDERS

JOHN = KnownAccount("John Doe", AccountIdentifiers("GB33MOCK04000412345678", "040004", "12345678"))
OTHER = KnownAccount("Alex Other", AccountIdentifiers("GB94MOCK04000487654321", None, None))
CRITERIA = {
    "tokens": ["18db38", "Betropolis LTD"],
    "amount_in_minor": 1_000,
    "currency": "GBP",
    "created_at": "2024-01-05",
}
PAY_IN = PayIn(1_000, "GBP", date(2024, 1, 5), "BETROPOLIS LTD 0f1e… deposit")


def _ids(selection: dict[str, Any], currency: str = "GBP") -> list[str]:
    return [p.id for p in selectable_providers(selection, currency, VERIFIED_PAYOUT_PROVIDERS)]


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        ({"type": "user_selected"}, ["mock"]),
        ({"type": "user_selected", "filter": {"countries": ["GB"]}}, ["mock"]),
        ({"type": "user_selected", "filter": {"countries": ["DE"]}}, []),
        ({"type": "user_selected", "filter": {"provider_ids": ["mock"]}}, ["mock"]),
        ({"type": "user_selected", "filter": {"provider_ids": ["other"]}}, []),
        ({"type": "preselected", "provider_id": "mock"}, ["mock"]),
        ({"type": "preselected", "provider_id": "mock-payments-gb-redirect"}, []),
    ],
)
def test_a_selection_leaves_the_payee_these_providers(
    selection: dict[str, Any], expected: list[str]
) -> None:
    assert _ids(selection) == expected


def test_the_mock_provider_pays_gbp_only() -> None:
    assert _ids({"type": "user_selected"}, "EUR") == []
    with pytest.raises(InvalidParameters) as raised:
        check_selection({"type": "user_selected"}, "EUR", VERIFIED_PAYOUT_PROVIDERS)
    assert "beneficiary.provider_selection.filter" in raised.value.errors


def test_the_verified_payout_provider_is_the_catalogues_mock() -> None:
    (mock,) = VERIFIED_PAYOUT_PROVIDERS
    assert mock is next(p for p in CATALOGUE if p.id == "mock")
    assert (mock.country_code, mock.schemes) == ("GB", ("faster_payments_service",))


def test_a_preselected_scheme_must_be_the_providers() -> None:
    selection = {
        "type": "preselected",
        "provider_id": "mock",
        "scheme_selection": {"type": "preselected", "scheme_id": "faster_payments_service"},
    }
    assert check_selection(selection, "GBP", VERIFIED_PAYOUT_PROVIDERS) == (
        "faster_payments_service"
    )
    selection["scheme_selection"] = {"type": "preselected", "scheme_id": "sepa_credit_transfer"}
    with pytest.raises(InvalidParameters) as raised:
        check_selection(selection, "GBP", VERIFIED_PAYOUT_PROVIDERS)
    assert "beneficiary.provider_selection.scheme_selection.scheme_id" in raised.value.errors


@pytest.mark.parametrize(
    ("holder", "user", "matches"),
    [
        ("John Doe", "John Doe", True),
        ("JOHN  DOE", "john doe", True),
        ("J.O.H.N Doe.", "John Doe", True),
        ("Jöhn Doe", "John Doe", True),
        ("Jane Doe", "John Doe", False),
    ],
)
def test_names_match_by_skeleton(holder: str, user: str, matches: bool) -> None:
    assert name_matches(holder, user) is matches


@pytest.mark.parametrize(
    ("change", "matches"),
    [
        ({}, True),
        ({"amount_in_minor": 999}, False),
        ({"currency": "EUR"}, False),
        ({"created_on": date(2024, 1, 6)}, False),
        ({"statement": "Another Shop 18DB38"}, True),  # any one token, case ignored
        ({"statement": "Another Shop"}, False),
    ],
)
def test_a_pay_in_matches_the_criteria_exactly(change: dict[str, Any], matches: bool) -> None:
    fields = {**PAY_IN.__dict__, **change}
    assert pay_in_matches(CRITERIA, PayIn(**fields)) is matches


def test_name_is_checked_before_the_transaction_search() -> None:
    both = {"verify_name": True, "transaction_search_criteria": CRITERIA}
    assert verification_failure(both, "John Doe", JOHN, [PAY_IN]) is None
    assert (
        verification_failure(both, "John Doe", OTHER, []) is FailureReason.NAME_VERIFICATION_FAILED
    )
    assert (
        verification_failure(both, "John Doe", JOHN, [])
        is FailureReason.TRANSACTION_VERIFICATION_FAILED
    )
    # Without verify_name, any holder may be paid (the search alone decides).
    search_only = {"verify_name": False, "transaction_search_criteria": CRITERIA}
    assert verification_failure(search_only, "John Doe", OTHER, [PAY_IN]) is None


def test_the_stages_before_the_rails() -> None:
    required = VerifiedStage.AUTHORIZATION_REQUIRED.value
    authorizing = VerifiedStage.AUTHORIZING.value
    assert choose_provider(required, None, "mock") is VerifiedStage.AUTHORIZING
    assert choose_provider(authorizing, "mock", "mock") is VerifiedStage.AUTHORIZING
    with pytest.raises(InvalidTransition):
        choose_provider(authorizing, "mock", "another")
    for later in ("pending", "executed", "failed"):
        with pytest.raises(InvalidTransition):
            choose_provider(later, "mock", "mock")
    name_only = {"verify_name": True}
    decide = {"verification": name_only, "user_name": "John Doe", "pay_ins": []}
    assert authorize(authorizing, account=JOHN, **decide).stage is Stage.PENDING
    declined = authorize(authorizing, account=None, **decide)
    assert (declined.stage, declined.failure_reason) == (
        Stage.FAILED,
        FailureReason.AUTHORIZATION_FAILED,
    )
    mismatch = authorize(authorizing, account=OTHER, **decide)
    assert mismatch.failure_reason is FailureReason.NAME_VERIFICATION_FAILED
    with pytest.raises(InvalidTransition):
        authorize(required, account=JOHN, **decide)  # the payee must choose a provider first


CREATED = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)


def test_the_window_is_the_payout_pages_seven_days() -> None:
    assert timedelta(days=7) == AUTHORIZATION_WINDOW
    assert expires_at(CREATED) == datetime(2026, 11, 27, 9, 30, tzinfo=UTC)


@pytest.mark.parametrize("stage", ["authorization_required", "authorizing"])
def test_a_payout_still_waiting_expires_when_the_window_closes(stage: str) -> None:
    closes = expires_at(CREATED)
    assert expiry(stage, CREATED, closes - timedelta(microseconds=1)) is None
    outcome = expiry(stage, CREATED, closes)
    assert outcome is not None
    assert (outcome.stage, outcome.failure_reason) == (Stage.FAILED, FailureReason.EXPIRED)


@pytest.mark.parametrize("stage", ["authorization_required", "authorizing"])
@pytest.mark.parametrize(
    "pending", [FailureReason.BLOCKED, FailureReason.INSUFFICIENT_FUNDS], ids=str
)
def test_a_payout_that_could_never_be_paid_fails_with_its_own_reason_when_the_window_closes(
    stage: str, pending: FailureReason
) -> None:
    # Accepted with a failure pending (a listed payee, no funds to hold): expiring it as
    # `expired` would tell the merchant the payee was at fault.
    closes = expires_at(CREATED)
    assert expiry(stage, CREATED, closes - timedelta(microseconds=1), pending) is None
    outcome = expiry(stage, CREATED, closes, pending)
    assert outcome is not None
    assert (outcome.stage, outcome.failure_reason) == (Stage.FAILED, pending)


@pytest.mark.parametrize("stage", [s.value for s in Stage])
def test_a_payout_on_the_rails_or_ended_never_expires(stage: str) -> None:
    assert expiry(stage, CREATED, expires_at(CREATED) + timedelta(days=30)) is None
