"""Simulated payout schemes (bankrail.rails.schemes): which scheme carries a payout, and the
sandbox outcome tokens read from the beneficiary reference."""

from __future__ import annotations

import pytest

from bankrail.core.powers import SANDBOX, SandboxPowers
from bankrail.rails.lifecycle import FailureReason
from bankrail.rails.schemes import (
    FASTER_PAYMENTS,
    INTERNAL_TRANSFER,
    SEPA_INSTANT,
    SandboxOutcome,
    sandbox_outcome,
    scheme_for,
)


def test_scheme_names_are_the_documented_ones() -> None:
    assert INTERNAL_TRANSFER == "internal_transfer"
    assert FASTER_PAYMENTS == "faster_payments_service"
    assert SEPA_INSTANT == "sepa_credit_transfer_instant"


@pytest.mark.parametrize(
    ("currency", "internal", "expected"),
    [
        ("GBP", False, "faster_payments_service"),
        ("EUR", False, "sepa_credit_transfer_instant"),
        ("GBP", True, "internal_transfer"),
        ("EUR", True, "internal_transfer"),
    ],
)
def test_scheme_for(currency: str, internal: bool, expected: str) -> None:
    assert scheme_for(currency, internal) == expected


@pytest.mark.parametrize("reference", ["", "invoice 42", "payout", "failure", "fail:", "delay"])
def test_no_token_means_immediate_success(reference: str) -> None:
    assert sandbox_outcome(reference, SANDBOX) == SandboxOutcome(
        failure=None, execution_delay_seconds=0
    )


@pytest.mark.parametrize(
    ("reference", "reason"),
    [
        ("fail:scheme_error", FailureReason.SCHEME_ERROR),
        ("fail:server_error", FailureReason.SERVER_ERROR),
        ("fail:invalid_iban", FailureReason.INVALID_IBAN),
        ("FAIL:SCHEME_ERROR", FailureReason.SCHEME_ERROR),
        ("Fail:Server_Error", FailureReason.SERVER_ERROR),
        ("fAiL:InVaLiD_iBaN", FailureReason.INVALID_IBAN),
        ("invoice 42 fail:scheme_error", FailureReason.SCHEME_ERROR),
        ("xfail:scheme_errorx", FailureReason.SCHEME_ERROR),
        ("order-7/fail:server_error/retry", FailureReason.SERVER_ERROR),
    ],
)
def test_failure_tokens_anywhere_any_case(reference: str, reason: FailureReason) -> None:
    outcome = sandbox_outcome(reference, SANDBOX)
    assert outcome.failure is reason
    assert outcome.execution_delay_seconds == 0


@pytest.mark.parametrize(
    "reference",
    [
        "fail:insufficient_funds",  # rejections are not scheme outcomes
        "fail:blocked",
        "fail:unknown",
        "fail scheme_error",
        "fail:scheme-error",
        "fail: scheme_error",
    ],
)
def test_unknown_or_malformed_failure_tokens_are_ignored(reference: str) -> None:
    assert sandbox_outcome(reference, SANDBOX).failure is None


@pytest.mark.parametrize(
    ("reference", "seconds"),
    [
        ("delay:600", 600),
        ("DELAY:5", 5),
        ("Delay:0", 0),
        ("payout delay:30 for Bob", 30),
        ("delay:0042", 42),
        ("delay:2592000", 2_592_000),
        ("delay:9999999", 2_592_000),  # capped at 30 days
        ("delay:12345678", 2_592_000),
    ],
)
def test_delay_tokens(reference: str, seconds: int) -> None:
    outcome = sandbox_outcome(reference, SANDBOX)
    assert outcome.execution_delay_seconds == seconds
    assert outcome.failure is None


@pytest.mark.parametrize(
    "reference",
    # The last: Arabic-Indic twelve, which \d matches and int() reads as 12.
    ["delay:", "delay:abc", "delay: 10", "delay=10", "delay-10", "delay:\u0661\u0662"],
)
def test_malformed_delay_falls_back_to_the_default(reference: str) -> None:
    assert sandbox_outcome(reference, SANDBOX).execution_delay_seconds == 0
    assert sandbox_outcome(reference, SANDBOX, 17).execution_delay_seconds == 17


def test_default_delay_applies_without_a_token() -> None:
    assert sandbox_outcome("invoice 42", SANDBOX, 120) == SandboxOutcome(None, 120)


def test_explicit_delay_overrides_the_default() -> None:
    assert sandbox_outcome("delay:3", SANDBOX, 120).execution_delay_seconds == 3
    assert sandbox_outcome("delay:0", SANDBOX, 120).execution_delay_seconds == 0


def test_failure_and_delay_combine() -> None:
    assert sandbox_outcome("delay:60 fail:scheme_error", SANDBOX) == SandboxOutcome(
        FailureReason.SCHEME_ERROR, 60
    )
    assert sandbox_outcome("FAIL:server_error;DELAY:7", SANDBOX, 1) == SandboxOutcome(
        FailureReason.SERVER_ERROR, 7
    )


def test_first_token_wins_when_repeated() -> None:
    outcome = sandbox_outcome("fail:server_error fail:scheme_error delay:5 delay:9", SANDBOX)
    assert outcome.failure is FailureReason.SERVER_ERROR
    assert outcome.execution_delay_seconds == 5


@pytest.mark.parametrize("reference", ["fail:scheme_error", "delay:600", "FAIL:invalid_iban"])
def test_without_the_outcome_tokens_power_a_reference_chooses_nothing(reference: str) -> None:
    production = SandboxPowers.for_deployment(sandbox=False, mock_providers=False)
    assert sandbox_outcome(reference, production, 5) == SandboxOutcome(None, 5)
    staging = SandboxPowers.for_deployment(sandbox=False, mock_providers=True)
    assert sandbox_outcome(reference, staging) == sandbox_outcome(reference, SANDBOX)
