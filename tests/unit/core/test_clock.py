"""The service clock (core/clock.py): `now_us` is `now()` as a number, offset included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bankrail.core.clock import ServiceClock

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _at(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def test_now_us_is_now_in_microseconds_since_the_epoch_with_the_offset() -> None:
    clock = ServiceClock()
    for offset in (timedelta(0), timedelta(days=3, microseconds=7), timedelta(days=40)):
        clock.set_offset(offset)
        before = clock.now()
        micros = clock.now_us()
        after = clock.now()
        # now() has microseconds; now_us() truncates the nanoseconds it reads.
        assert before - timedelta(microseconds=1) <= _at(micros) <= after
    plain = ServiceClock().now_us()
    assert clock.now_us() - plain >= 40 * 86_400 * 1_000_000
