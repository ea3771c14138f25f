"""The constraint arithmetic of mandates (bankrail.mandates.models): periods with `consent`
and `calendar` alignment, month ends, leap years, validity and the allowance."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bankrail.mandates.models import (
    CALENDAR_EPOCH,
    Alignment,
    Constraints,
    Period,
    PeriodicLimit,
    add_months,
    period_bounds,
    remaining,
)

P = Period
CONSENT, CALENDAR = Alignment.CONSENT, Alignment.CALENDAR


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


@pytest.mark.parametrize(
    ("moment", "months", "expected"),
    [
        (at(2026, 1, 31, 9), 1, at(2026, 2, 28, 9)),
        (at(2028, 1, 31, 9), 1, at(2028, 2, 29, 9)),  # leap year
        (at(2026, 1, 31, 9), 2, at(2026, 3, 31, 9)),
        (at(2026, 3, 31), 1, at(2026, 4, 30)),
        (at(2026, 8, 31), 6, at(2027, 2, 28)),
        (at(2028, 2, 29), 12, at(2029, 2, 28)),
        (at(2028, 2, 29), 48, at(2032, 2, 29)),
        (at(2026, 12, 15), 1, at(2027, 1, 15)),
        (at(2026, 5, 10), 0, at(2026, 5, 10)),
    ],
)
def test_add_months_keeps_the_day_or_the_months_last(
    moment: datetime, months: int, expected: datetime
) -> None:
    assert add_months(moment, months) == expected


# --- consent alignment ----------------------------------------------------------------------------

ANCHOR = at(2026, 1, 31, 10, 30)


@pytest.mark.parametrize(
    ("period", "now", "start", "end"),
    [
        (P.DAY, ANCHOR, ANCHOR, ANCHOR + timedelta(days=1)),
        (
            P.DAY,
            ANCHOR + timedelta(days=1, seconds=-1),
            ANCHOR,
            ANCHOR + timedelta(days=1),
        ),
        (
            P.DAY,
            ANCHOR + timedelta(days=3, hours=2),
            ANCHOR + timedelta(days=3),
            ANCHOR + timedelta(days=4),
        ),
        (
            P.WEEK,
            ANCHOR + timedelta(days=7),
            ANCHOR + timedelta(days=7),
            ANCHOR + timedelta(days=14),
        ),
        (
            P.FORTNIGHT,
            ANCHOR + timedelta(days=27),
            ANCHOR + timedelta(days=14),
            ANCHOR + timedelta(days=28),
        ),
        (P.MONTH, at(2026, 2, 27), ANCHOR, at(2026, 2, 28, 10, 30)),
        (P.MONTH, at(2026, 2, 28, 10, 30), at(2026, 2, 28, 10, 30), at(2026, 3, 31, 10, 30)),
        (P.MONTH, at(2026, 3, 31, 10, 29), at(2026, 2, 28, 10, 30), at(2026, 3, 31, 10, 30)),
        (P.MONTH, at(2026, 4, 15), at(2026, 3, 31, 10, 30), at(2026, 4, 30, 10, 30)),
        (P.HALF_YEAR, at(2026, 7, 31, 10, 30), at(2026, 7, 31, 10, 30), at(2027, 1, 31, 10, 30)),
        (P.HALF_YEAR, at(2026, 7, 1), ANCHOR, at(2026, 7, 31, 10, 30)),
        (P.YEAR, at(2027, 1, 31, 10, 29), ANCHOR, at(2027, 1, 31, 10, 30)),
        (P.YEAR, at(2029, 6, 1), at(2029, 1, 31, 10, 30), at(2030, 1, 31, 10, 30)),
    ],
)
def test_consent_periods_start_at_the_anchor(
    period: Period, now: datetime, start: datetime, end: datetime
) -> None:
    assert period_bounds(period, CONSENT, ANCHOR, now) == (start, end)


def test_consent_months_from_a_leap_day() -> None:
    anchor = at(2028, 2, 29, 8)
    assert period_bounds(P.MONTH, CONSENT, anchor, at(2028, 3, 29, 8)) == (
        at(2028, 3, 29, 8),
        at(2028, 4, 29, 8),
    )
    assert period_bounds(P.YEAR, CONSENT, anchor, at(2029, 3, 1)) == (
        at(2029, 2, 28, 8),
        at(2030, 2, 28, 8),
    )
    assert period_bounds(P.YEAR, CONSENT, anchor, at(2032, 2, 29, 8)) == (
        at(2032, 2, 29, 8),
        at(2033, 2, 28, 8),
    )


def test_before_the_anchor_is_the_first_period() -> None:
    assert period_bounds(P.WEEK, CONSENT, ANCHOR, ANCHOR - timedelta(days=3)) == (
        ANCHOR,
        ANCHOR + timedelta(days=7),
    )


@pytest.mark.parametrize("period", list(Period))
def test_consecutive_consent_periods_tile_time(period: Period) -> None:
    """Each period ends where the next starts, and every instant lies in exactly one."""
    anchor = at(2027, 8, 31, 23, 59)
    start, end = period_bounds(period, CONSENT, anchor, anchor)
    for _ in range(30):
        assert start < end
        assert period_bounds(period, CONSENT, anchor, end - timedelta(microseconds=1)) == (
            start,
            end,
        )
        start, end = period_bounds(period, CONSENT, anchor, end)


# --- calendar alignment ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("period", "now", "start", "end"),
    [
        (P.DAY, at(2026, 11, 25, 23, 59), at(2026, 11, 25), at(2026, 11, 26)),
        (P.DAY, at(2026, 12, 31, 12), at(2026, 12, 31), at(2027, 1, 1)),
        (P.WEEK, at(2026, 11, 25, 10), at(2026, 11, 23), at(2026, 11, 30)),  # Wed -> Mon
        (P.WEEK, at(2026, 11, 23), at(2026, 11, 23), at(2026, 11, 30)),
        (P.WEEK, at(2026, 11, 29, 23, 59), at(2026, 11, 23), at(2026, 11, 30)),  # Sunday
        (P.WEEK, at(2027, 1, 1), at(2026, 12, 28), at(2027, 1, 4)),  # across the year
        (P.FORTNIGHT, CALENDAR_EPOCH, CALENDAR_EPOCH, CALENDAR_EPOCH + timedelta(days=14)),
        (P.MONTH, at(2026, 2, 28, 23), at(2026, 2, 1), at(2026, 3, 1)),
        (P.MONTH, at(2028, 2, 29, 23), at(2028, 2, 1), at(2028, 3, 1)),
        (P.MONTH, at(2026, 12, 31, 23), at(2026, 12, 1), at(2027, 1, 1)),
        (P.HALF_YEAR, at(2026, 6, 30, 23, 59), at(2026, 1, 1), at(2026, 7, 1)),
        (P.HALF_YEAR, at(2026, 7, 1), at(2026, 7, 1), at(2027, 1, 1)),
        (P.YEAR, at(2028, 12, 31, 23), at(2028, 1, 1), at(2029, 1, 1)),
    ],
)
def test_calendar_periods(period: Period, now: datetime, start: datetime, end: datetime) -> None:
    assert period_bounds(period, CALENDAR, ANCHOR, now) == (start, end)


def test_calendar_fortnights_are_mondays_fourteen_days_apart() -> None:
    start, end = period_bounds(P.FORTNIGHT, CALENDAR, ANCHOR, at(2026, 11, 25, 10))
    assert start.weekday() == 0
    assert end - start == timedelta(days=14)
    assert (start - CALENDAR_EPOCH).days % 14 == 0
    assert start <= at(2026, 11, 25, 10) < end


def test_calendar_periods_ignore_the_anchor() -> None:
    now = at(2026, 5, 17, 13)
    for period in Period:
        assert period_bounds(period, CALENDAR, ANCHOR, now) == period_bounds(
            period, CALENDAR, at(2001, 9, 9, 1, 46), now
        )


# --- constraints -----------------------------------------------------------------------------


def _constraints(**extra: object) -> Constraints:
    limits = {
        P.DAY: PeriodicLimit(5_000, CONSENT),
        P.MONTH: PeriodicLimit(12_000, CALENDAR),
    }
    return Constraints(maximum_individual_amount=3_000, periodic_limits=limits, **extra)  # type: ignore[arg-type]


def test_a_payment_within_every_limit_is_allowed() -> None:
    constraints = _constraints()
    now = at(2026, 5, 1, 12)
    assert constraints.allows(3_000, now, {P.DAY: 2_000, P.MONTH: 9_000})
    assert not constraints.allows(3_001, now, {})  # over the individual maximum
    assert not constraints.allows(3_000, now, {P.DAY: 2_001})  # over the day's
    assert not constraints.allows(3_000, now, {P.MONTH: 9_001})  # over the month's


def test_validity_is_inclusive() -> None:
    start, stop = at(2026, 5, 1), at(2026, 6, 1)
    constraints = _constraints(valid_from=start, valid_to=stop)
    assert not constraints.allows(1, start - timedelta(microseconds=1), {})
    assert constraints.allows(1, start, {})
    assert constraints.allows(1, stop, {})
    assert not constraints.allows(1, stop + timedelta(microseconds=1), {})


def test_the_anchor_is_valid_from_else_the_authorisation() -> None:
    authorised = at(2026, 5, 3, 9)
    assert _constraints().anchor(authorised, at(2026, 6, 1)) == authorised
    assert _constraints(valid_from=at(2026, 5, 1)).anchor(authorised, at(2026, 6, 1)) == at(
        2026, 5, 1
    )
    assert _constraints().anchor(None, at(2026, 6, 1)) == at(2026, 6, 1)
    periods = _constraints().current_periods(authorised, at(2026, 5, 4, 10))
    assert periods[P.DAY] == (at(2026, 5, 4, 9), at(2026, 5, 5, 9))
    assert periods[P.MONTH] == (at(2026, 5, 1), at(2026, 6, 1))


def test_remaining_never_goes_negative() -> None:
    limit = PeriodicLimit(100, CONSENT)
    assert remaining(limit, 0) == 100
    assert remaining(limit, 60) == 40
    assert remaining(limit, 100) == 0
    assert remaining(limit, 130) == 0
