"""Unit tests for bankrail.security.ratelimit: each key may spend `burst` requests at once and
`rate` more per second after that; a refused request is a 429 whose `Retry-After` says when
the next one will pass; the memory it keeps is bounded; a rate of 0 turns the limit off.

The limiter reads time through an injected clock, so every test here is exact and instant.
"""

from __future__ import annotations

import pytest

from bankrail.core.problems import RATE_LIMITED
from bankrail.security.ratelimit import RateLimited, RateLimiter
from support.clocks import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _passes(limiter: RateLimiter, key: str) -> bool:
    try:
        limiter.take(key)
    except RateLimited:
        return False
    return True


def _refused(limiter: RateLimiter, key: str) -> RateLimited:
    with pytest.raises(RateLimited) as refused:
        limiter.take(key)
    return refused.value


def _spend(limiter: RateLimiter, key: str, count: int) -> None:
    for index in range(count):
        assert _passes(limiter, key), f"request {index + 1} of {count} was refused"


def test_a_full_bucket_allows_exactly_the_burst(clock: FakeClock) -> None:
    limiter = RateLimiter(1.0, 5, now=clock)
    _spend(limiter, "client-a", 5)
    refused = _refused(limiter, "client-a")
    assert refused.problem is RATE_LIMITED
    assert refused.problem.status == 429
    assert refused.headers == {"Retry-After": "1"}


def test_refused_requests_do_not_spend_the_budget(clock: FakeClock) -> None:
    limiter = RateLimiter(1.0, 2, now=clock)
    _spend(limiter, "client-a", 2)
    for _ in range(10):
        _refused(limiter, "client-a")
    clock.advance(1.0)
    assert _passes(limiter, "client-a")


def test_the_bucket_refills_at_the_rate(clock: FakeClock) -> None:
    limiter = RateLimiter(2.0, 4, now=clock)
    _spend(limiter, "client-a", 4)
    _refused(limiter, "client-a")
    clock.advance(0.49)  # 0.98 of a request: not yet
    _refused(limiter, "client-a")
    clock.advance(0.02)
    assert _passes(limiter, "client-a")
    _refused(limiter, "client-a")
    clock.advance(1.5)  # three more
    _spend(limiter, "client-a", 3)
    _refused(limiter, "client-a")


def test_the_bucket_never_holds_more_than_the_burst(clock: FakeClock) -> None:
    limiter = RateLimiter(10.0, 3, now=clock)
    _spend(limiter, "client-a", 1)
    clock.advance(3600)  # an hour idle refills to the burst, not to 36,000
    _spend(limiter, "client-a", 3)
    _refused(limiter, "client-a")


@pytest.mark.parametrize(
    ("rate", "waited", "retry_after"),
    [
        (1.0, 0.0, "1"),
        (0.25, 0.0, "4"),  # a request every 4 s
        (0.25, 1.0, "3"),  # a quarter of a request earned: 3 s to go
        (0.25, 3.5, "1"),  # 0.875 earned: rounded up to a whole second, never 0
        (0.125, 2.0, "6"),
        (100.0, 0.0, "1"),  # 10 ms to go is still announced as 1 s
    ],
)
def test_retry_after_is_the_whole_seconds_until_a_request_will_pass(
    clock: FakeClock, rate: float, waited: float, retry_after: str
) -> None:
    limiter = RateLimiter(rate, 1, now=clock)
    _spend(limiter, "client-a", 1)
    clock.advance(waited)
    refused = _refused(limiter, "client-a")
    assert refused.headers["Retry-After"] == retry_after
    assert f"retry after {retry_after} second" in refused.detail
    # Honouring Retry-After is enough: the request then passes.
    clock.advance(float(retry_after))
    assert _passes(limiter, "client-a")


def test_keys_have_separate_buckets(clock: FakeClock) -> None:
    limiter = RateLimiter(1.0, 2, now=clock)
    _spend(limiter, "client-a", 2)
    _refused(limiter, "client-a")
    _spend(limiter, "client-b", 2)
    _refused(limiter, "client-b")


def test_the_least_recently_seen_key_is_forgotten_beyond_max_keys(clock: FakeClock) -> None:
    limiter = RateLimiter(0.001, 1, max_keys=2, now=clock)
    _spend(limiter, "a", 1)
    _spend(limiter, "b", 1)
    _refused(limiter, "a")  # a is still remembered, and now the most recently seen
    _spend(limiter, "c", 1)  # a third key: b, the least recently seen, is forgotten
    _refused(limiter, "a")
    _refused(limiter, "c")
    assert _passes(limiter, "b")  # forgotten, so it starts again with a full bucket


def test_memory_stays_bounded_under_many_keys(clock: FakeClock) -> None:
    limiter = RateLimiter(1.0, 1, max_keys=100, now=clock)
    for index in range(10_000):
        _spend(limiter, f"address-{index}", 1)
    assert len(limiter._buckets) == 100
    _refused(limiter, "address-9999")


def test_rate_zero_turns_the_limit_off(clock: FakeClock) -> None:
    limiter = RateLimiter(0, 1, now=clock)
    assert not limiter.enabled
    _spend(limiter, "client-a", 10_000)


def test_a_positive_rate_is_enabled_and_burst_is_at_least_one(clock: FakeClock) -> None:
    limiter = RateLimiter(1.0, 0, now=clock)
    assert limiter.enabled
    _spend(limiter, "client-a", 1)
    _refused(limiter, "client-a")
