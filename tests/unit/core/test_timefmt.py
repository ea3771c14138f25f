"""Unit tests for bankrail.core.timefmt: ISO 8601 UTC rendering and parsing."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bankrail.core.timefmt import iso_utc, iso_utc_7, parse_rfc3339, parse_timestamp

SEVEN = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{7}Z$")


def test_iso_utc_7_has_seven_fractional_digits_and_z() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert iso_utc_7(moment) == "2026-01-02T03:04:05.1234560Z"


def test_iso_utc_7_with_zero_microseconds() -> None:
    assert iso_utc_7(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.0000000Z"


def test_iso_utc_7_converts_offsets_to_utc() -> None:
    moment = datetime(2026, 1, 2, 1, 0, 0, 5, tzinfo=timezone(timedelta(hours=-5)))
    assert iso_utc_7(moment) == "2026-01-02T06:00:00.0000050Z"


def test_iso_utc_has_microseconds_and_z() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 42, tzinfo=timezone(timedelta(hours=2)))
    assert iso_utc(moment) == "2026-01-02T01:04:05.000042Z"


def test_iso_utc_keeps_zero_microseconds() -> None:
    assert iso_utc(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000000Z"


def test_iso_utc_takes_a_naive_moment_as_local_time_like_astimezone() -> None:
    naive = datetime(2026, 1, 2, 3, 4, 5, 6)
    assert iso_utc(naive) == naive.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@given(st.datetimes(timezones=st.just(UTC), min_value=datetime(1970, 1, 1)))
def test_iso_utc_7_shape_and_round_trip(moment: datetime) -> None:
    text = iso_utc_7(moment)
    assert SEVEN.match(text), text
    assert parse_timestamp(text) == moment


@given(st.datetimes(timezones=st.just(UTC), min_value=datetime(1970, 1, 1)))
def test_iso_utc_round_trip(moment: datetime) -> None:
    assert parse_timestamp(iso_utc(moment)) == moment


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2026-01-02T03:04:05Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05.5Z", datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)),
        ("2026-01-02T03:04:05.1234567Z", datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
        ("2026-01-02T03:04:05.123456789Z", datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
        ("2026-01-02T03:04:05+00:00", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T05:04:05+02:00", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-01T22:04:05-05:00", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        (
            "2026-01-02T05:34:05.987654321+02:30",
            datetime(2026, 1, 2, 3, 4, 5, 987654, tzinfo=UTC),
        ),
        ("2026-01-02T03:04:05", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05.25", datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=UTC)),
        ("  2026-01-02T03:04:05Z  ", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ],
)
def test_parse_timestamp(raw: str, expected: datetime) -> None:
    parsed = parse_timestamp(raw)
    assert parsed == expected
    assert parsed.utcoffset() == timedelta(0)


def test_parse_timestamp_naive_is_taken_as_utc() -> None:
    parsed = parse_timestamp("2026-06-01T12:00:00")
    assert parsed.tzinfo is not None
    assert parsed == datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("raw", ["", "yesterday", "2026-13-01T00:00:00Z", "2026-01-02T25:00:00Z"])
def test_parse_timestamp_rejects_garbage(raw: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - datetime's own error
        parse_timestamp(raw)


@pytest.mark.parametrize("raw", ["٢٠٢٦-01-02T03:04:05Z", "2026-01-02T03:04:05+\u0660\u0661:00"])
def test_an_instant_in_another_scripts_digits_is_told_the_format(raw: str) -> None:
    # Not "a valid date-time between the years 1 and 9999": the digits are what is wrong.
    with pytest.raises(ValueError, match="must be an RFC 3339 date-time with an offset"):
        parse_rfc3339(raw)
    assert parse_rfc3339("2026-01-02T03:04:05+01:00") == datetime(2026, 1, 2, 2, 4, 5, tzinfo=UTC)
