"""The rules of a payment on a mandate that are plain Python (bankrail.mandates.models,
bankrail.payments.schemas, docs/api.md "Payments on a mandate"): the retry window a `for`
names, when a smart or standard retry asks the bank again and when it gives up, the minimum
balance a smart retry keeps, and the request fields a payment on a mandate accepts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from bankrail.mandates.models import (
    RETRY_EVERY,
    RetryPolicy,
    balance_covers,
    retry_window,
)
from bankrail.payments.schemas import PaymentRequest

CREATED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MANDATE_ID = "00000000-0000-4000-8000-000000000004"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30m", timedelta(minutes=30)),
        ("1m", timedelta(minutes=1)),
        ("12h", timedelta(hours=12)),
        ("90d", timedelta(days=90)),
    ],
)
def test_a_retry_window_is_minutes_hours_or_days(text: str, expected: timedelta) -> None:
    assert retry_window(text) == expected


@pytest.mark.parametrize(
    "text",
    # The last two: Arabic-Indic twelve and a superscript two, digits to str.isdigit().
    ["", "m", "30", "30s", "0m", "91d", "-1d", "1.5h", "3w", "\u0661\u0662d", "\u00b2d"],
)
def test_other_retry_windows_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="must be"):
        retry_window(text)


def test_a_smart_retry_keeps_the_minimum_balance() -> None:
    smart = RetryPolicy.from_stored(
        {"type": "smart", "for": "90d", "ensure_minimum_balance_in_minor": 100}
    )
    assert smart is not None
    assert smart.minimum_balance == 100
    assert balance_covers(1_100, 1_000, smart)
    assert not balance_covers(1_099, 1_000, smart)  # would leave the payer 99
    standard = RetryPolicy.from_stored({"type": "standard", "for": "30m"})
    assert standard is not None
    assert balance_covers(1_000, 1_000, standard)  # standard keeps nothing back
    assert not balance_covers(999, 1_000, standard)
    assert balance_covers(1_000, 1_000, None)
    assert not balance_covers(999, 1_000, None)


def test_a_payment_without_a_policy_is_not_retried() -> None:
    assert RetryPolicy.from_stored(None) is None
    assert RetryPolicy.from_stored({}) is None


@pytest.mark.parametrize("kind", ["standard", "smart"])
def test_retries_are_paced_and_end_with_the_window(kind: str) -> None:
    policy = RetryPolicy.from_stored({"type": kind, "for": "30m"})
    assert policy is not None
    every = RETRY_EVERY[kind]
    end = CREATED + timedelta(minutes=30)
    first = policy.next_attempt(CREATED, CREATED)
    assert first == min(CREATED + every, end)
    # The last attempt falls on the window's end, never after it.
    assert policy.next_attempt(CREATED, end - timedelta(seconds=1)) == end
    assert policy.next_attempt(CREATED, end) is None
    assert policy.next_attempt(CREATED, end + timedelta(days=1)) is None


def test_a_smart_retry_over_ninety_days_asks_hourly() -> None:
    policy = RetryPolicy.from_stored({"type": "smart", "for": "90d"})
    assert policy is not None
    later = CREATED + timedelta(days=30)
    assert policy.next_attempt(CREATED, later) == later + timedelta(hours=1)
    assert policy.next_attempt(CREATED, CREATED + timedelta(days=90)) is None


def _request(**method: object) -> PaymentRequest:
    return PaymentRequest.model_validate(
        {
            "amount_in_minor": 1000,
            "currency": "GBP",
            "payment_method": {"type": "mandate", "mandate_id": MANDATE_ID, **method},
        }
    )


def test_a_payment_on_a_mandate_takes_retry_and_user_interaction() -> None:
    smart = _request(
        retry={"type": "smart", "for": "90d", "ensure_minimum_balance_in_minor": 100},
        user_interaction="present",
    ).payment_method
    assert smart.retry is not None
    assert smart.retry.model_dump(by_alias=True) == {
        "type": "smart",
        "for": "90d",
        "ensure_minimum_balance_in_minor": 100,
    }
    assert smart.user_interaction == "present"
    standard = _request(retry={"type": "standard", "for": "30m"}, user_interaction="not_present")
    assert standard.payment_method.retry is not None
    # null is the same as absent (Java writes retry: null, reference: null).
    plain = _request(retry=None, user_interaction=None, reference=None).payment_method
    assert plain.retry is None
    assert plain.user_interaction is None


@pytest.mark.parametrize(
    "method",
    [
        {"retry": {"type": "standard", "for": "30m", "ensure_minimum_balance_in_minor": 1}},
        {"retry": {"type": "smart"}},
        {"retry": {"type": "eager", "for": "30m"}},
        {"retry": {"type": "smart", "for": "91d"}},
        {"retry": {"type": "smart", "for": "90d", "ensure_minimum_balance_in_minor": -1}},
        {"user_interaction": "absent"},
    ],
)
def test_bad_retry_or_user_interaction_is_refused(method: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as raised:
        _request(**method)
    paths = {".".join(str(p) for p in error["loc"]) for error in raised.value.errors()}
    assert any(path.startswith("payment_method.") for path in paths), paths
