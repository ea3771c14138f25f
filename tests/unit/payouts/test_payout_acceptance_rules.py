"""The acceptance rules of a payout (`payouts.models.decide_payout`), without a database."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from bankrail.core.problems import InvalidParameters, NotFound, ProblemError, invalid_field
from bankrail.merchants.models import AccountIdentifiers
from bankrail.payouts.models import (
    CLOSED_LOOP_FIELD,
    OPEN_LOOP_FIELD,
    AccountFacts,
    FailureReason,
    PayoutFacts,
    PayoutRequest,
    SourceFacts,
    decide_payout,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ACCOUNT = AccountFacts(
    id=uuid.uuid4(),
    merchant_id=uuid.uuid4(),
    currency="GBP",
    available_ledger_id=1,
    held_ledger_id=2,
    balance_threshold=None,
    notification_state="normal",
    available=1_000,
    held=0,
)
PAYEE = AccountIdentifiers("", "040004", "12345678")
OPEN = PayoutRequest(
    api="v3",
    merchant_id=ACCOUNT.merchant_id,
    account_id=ACCOUNT.id,
    currency="GBP",
    amount=300,
    beneficiary={
        "type": "external_account",
        "account_holder_name": "Jane Doe",
        "reference": "rent",
        "account_identifier": {
            "type": "sort_code_account_number",
            "sort_code": "040004",
            "account_number": "12345678",
        },
    },
    identifiers=PAYEE,
    field=OPEN_LOOP_FIELD,
    reference="rent",
    now=NOW,
)
FOUND = PayoutFacts(account=ACCOUNT, source=None, payee=None, screened=False)


def _decide(
    request: PayoutRequest = OPEN, facts: PayoutFacts = FOUND, available: int = 1_000
) -> Any:
    return decide_payout(request, facts, available, uuid.uuid4())


def test_an_open_loop_payout_within_the_funds_holds_them() -> None:
    payout = _decide()
    assert payout.holds_funds
    assert payout.pending_failure is None
    assert payout.destination_account_id is None
    assert payout.name == "Jane Doe"
    assert payout.beneficiary["account_identifiers"] == PAYEE.as_list()


@pytest.mark.parametrize(("available", "holds"), [(300, True), (299, False)])
def test_funds_left_by_earlier_requests_decide_the_hold(available: int, holds: bool) -> None:
    payout = _decide(available=available)
    assert payout.holds_funds is holds
    assert payout.pending_failure == (None if holds else FailureReason.INSUFFICIENT_FUNDS)


def test_a_screened_beneficiary_is_accepted_and_fails_blocked_without_a_hold() -> None:
    payout = _decide(facts=replace(FOUND, screened=True))
    assert payout.pending_failure is FailureReason.BLOCKED
    assert not payout.holds_funds


def test_a_payee_at_bankrail_in_the_currency_is_an_internal_transfer() -> None:
    payee = uuid.uuid4()
    assert _decide(facts=replace(FOUND, payee=(payee, "GBP"))).destination_account_id == payee
    # In another currency it is paid as any external account.
    assert _decide(facts=replace(FOUND, payee=(payee, "EUR"))).destination_account_id is None


def test_an_account_paying_itself_is_an_internal_transfer_to_itself() -> None:
    payout = _decide(facts=replace(FOUND, payee=(ACCOUNT.id, "GBP")))
    assert payout.destination_account_id == ACCOUNT.id
    assert payout.scheme == "internal_transfer"
    assert payout.holds_funds


@pytest.mark.parametrize(
    ("currency", "selection", "scheme"),
    [
        ("GBP", None, "faster_payments_service"),
        ("GBP", {"type": "instant_only"}, "faster_payments_service"),
        ("GBP", {"type": "instant_preferred"}, "faster_payments_service"),
        (
            "GBP",
            {"type": "preselected", "scheme_id": "faster_payments_service"},
            "faster_payments_service",
        ),
        ("EUR", {"type": "instant_only"}, "sepa_credit_transfer_instant"),
        (
            "EUR",
            {"type": "preselected", "scheme_id": "sepa_credit_transfer"},
            "sepa_credit_transfer",
        ),
    ],
)
def test_the_scheme_selection_decides_the_scheme(
    currency: str, selection: dict[str, str] | None, scheme: str
) -> None:
    account = replace(ACCOUNT, currency=currency)
    identifiers = (
        PAYEE if currency == "GBP" else AccountIdentifiers("DE89370400440532013000", None, None)
    )
    request = replace(OPEN, currency=currency, identifiers=identifiers, scheme_selection=selection)
    assert _decide(request, replace(FOUND, account=account)).scheme == scheme
    # A payee held here is paid internally whatever was selected.
    internal = replace(FOUND, account=account, payee=(uuid.uuid4(), currency))
    assert _decide(request, internal).scheme == "internal_transfer"


def test_a_preselected_scheme_the_currency_lacks_is_refused_naming_it() -> None:
    selection = {"type": "preselected", "scheme_id": "sepa_credit_transfer"}
    with pytest.raises(InvalidParameters) as raised:
        _decide(replace(OPEN, scheme_selection=selection))
    assert "scheme_selection.scheme_id" in (raised.value.errors or {})


def test_an_unknown_account_is_404_in_v3_and_400_in_v1() -> None:
    with pytest.raises(NotFound):
        _decide(facts=replace(FOUND, account=None))
    with pytest.raises(InvalidParameters) as raised:
        _decide(replace(OPEN, api="v1", account_id=None), replace(FOUND, account=None))
    assert "currency" in (raised.value.errors or {})


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (replace(OPEN, currency="EUR"), "currency"),
        (
            replace(OPEN, identifiers=AccountIdentifiers("DE89370400440532013000", None, None)),
            OPEN_LOOP_FIELD,
        ),
        (
            replace(OPEN, identifiers=invalid_field("beneficiary.account_identifier.iban", "bad")),
            "beneficiary.account_identifier.iban",
        ),
    ],
)
def test_route_and_identifier_errors_name_their_field(request_: PayoutRequest, field: str) -> None:
    with pytest.raises(ProblemError) as raised:
        _decide(request_)
    assert field in (raised.value.errors or {})


def test_the_account_is_checked_before_the_identifiers() -> None:
    request = replace(OPEN, identifiers=invalid_field("beneficiary.account_identifier", "bad"))
    with pytest.raises(NotFound):
        _decide(request, replace(FOUND, account=None))


def test_a_closed_loop_payout_pays_the_source_and_needs_one() -> None:
    source = SourceFacts(uuid.uuid4(), "user-1", "Ann Payer", PAYEE)
    request = replace(
        OPEN,
        beneficiary={
            "type": "payment_source",
            "user_id": "user-1",
            "payment_source_id": str(source.id),
            "reference": "refund",
        },
        identifiers=None,
        field=CLOSED_LOOP_FIELD,
    )
    payout = _decide(request, replace(FOUND, source=source))
    assert payout.name == "Ann Payer"
    assert payout.beneficiary == {
        "type": "payment_source",
        "user_id": "user-1",
        "payment_source_id": str(source.id),
        "reference": "refund",
        "account_holder_name": "Ann Payer",
        "account_identifiers": PAYEE.as_list(),
    }
    with pytest.raises(InvalidParameters) as raised:
        _decide(request, FOUND)
    assert CLOSED_LOOP_FIELD in (raised.value.errors or {})
