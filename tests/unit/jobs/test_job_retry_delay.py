"""Unit tests for bankrail.jobs.queue.retry_delay."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bankrail.jobs.queue import retry_delay


@pytest.mark.parametrize(
    ("attempts", "seconds"),
    [(1, 1), (2, 2), (3, 4), (4, 8), (5, 16), (8, 128), (9, 256), (10, 300), (11, 300)],
)
def test_retry_delay_doubles_from_one_second_up_to_five_minutes(
    attempts: int, seconds: int
) -> None:
    assert retry_delay(attempts) == timedelta(seconds=seconds)


@pytest.mark.parametrize("attempts", [0, -1, -100])
def test_retry_delay_never_below_one_second(attempts: int) -> None:
    assert retry_delay(attempts) == timedelta(seconds=1)


def test_retry_delay_is_capped_for_many_attempts() -> None:
    assert retry_delay(1000) == timedelta(minutes=5)


def test_retry_delay_never_decreases() -> None:
    delays = [retry_delay(n) for n in range(0, 40)]
    assert delays == sorted(delays)
