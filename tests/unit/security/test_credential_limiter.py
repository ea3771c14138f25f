"""Unit tests for bankrail.security.ratelimit.CredentialLimiter: the wrong credential that
reaches the limit within a window blocks its keys for a window; while blocked every request
on a key is refused (right credentials too) with a `Retry-After` that is enough; a window
without enough wrong ones blocks nothing; memory stays bounded; a limit of 0 turns it off.

The limiter reads time through an injected clock, so every test here is exact and instant.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bankrail.core.problems import RATE_LIMITED
from bankrail.security.ratelimit import CredentialLimiter, RateLimited, address_key
from support.clocks import FakeClock

LIMIT = 5
WINDOW = 60.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def limiter(clock: FakeClock) -> CredentialLimiter:
    return CredentialLimiter(LIMIT, WINDOW, now=clock)


def _refused(call: Callable[..., None], *keys: str) -> RateLimited:
    with pytest.raises(RateLimited) as refused:
        call(*keys)
    return refused.value


def _count(limiter: CredentialLimiter, times: int, *keys: str) -> None:
    for _ in range(times):
        limiter.count_wrong(*keys)  # raises RateLimited if refused


def test_the_wrong_credential_that_reaches_the_limit_blocks_the_next_request(
    limiter: CredentialLimiter,
) -> None:
    _count(limiter, LIMIT - 1, "address:a")
    limiter.refuse_blocked("address:a")  # not yet
    assert not limiter.blocking
    limiter.count_wrong("address:a")  # the limit-th is still answered by its caller (401)
    assert limiter.blocking
    refused = _refused(limiter.count_wrong, "address:a")  # limit + 1: 429
    assert refused.problem is RATE_LIMITED
    assert refused.headers == {"Retry-After": str(int(WINDOW))}
    assert "wrong credentials" in refused.detail
    # A right credential on the blocked key is refused too.
    _refused(limiter.refuse_blocked, "address:a")


def test_every_key_of_a_wrong_credential_is_counted_and_blocked(
    limiter: CredentialLimiter,
) -> None:
    # Wrong secrets for one client from many addresses block the client everywhere...
    for index in range(LIMIT):
        limiter.count_wrong(f"address:{index}", "client:x")
    _refused(limiter.refuse_blocked, "address:elsewhere", "client:x")
    limiter.refuse_blocked("address:elsewhere", "client:y")  # ...and nobody else
    limiter.refuse_blocked("address:0")  # each address saw only one
    # Wrong secrets from one address for many clients block the address for every client.
    for index in range(LIMIT):
        limiter.count_wrong("address:guesser", f"client:{index}")
    _refused(limiter.refuse_blocked, "address:guesser", "client:y")
    limiter.refuse_blocked("address:other", "client:0")


def test_a_refused_wrong_credential_counts_nothing(
    limiter: CredentialLimiter, clock: FakeClock
) -> None:
    _count(limiter, LIMIT, "address:a")
    for _ in range(50):
        _refused(limiter.count_wrong, "address:a", "client:x")
    limiter.refuse_blocked("client:x")  # what was refused was not counted against it
    clock.advance(WINDOW)
    _count(limiter, LIMIT - 1, "address:a")  # after the block a new window starts
    limiter.refuse_blocked("address:a")


def test_the_block_ends_after_one_window_and_retry_after_is_enough(
    limiter: CredentialLimiter, clock: FakeClock
) -> None:
    _count(limiter, LIMIT, "address:a")
    clock.advance(59.2)
    refused = _refused(limiter.refuse_blocked, "address:a")
    assert refused.headers == {"Retry-After": "1"}  # 0.8 s rounded up, never 0
    clock.advance(float(refused.headers["Retry-After"]))
    limiter.refuse_blocked("address:a")
    assert not limiter.blocking  # the expired block is forgotten


def test_wrong_credentials_spread_over_more_than_a_window_block_nothing(
    limiter: CredentialLimiter, clock: FakeClock
) -> None:
    _count(limiter, LIMIT - 1, "address:a")
    clock.advance(WINDOW)  # the window that began with the first one is over
    _count(limiter, LIMIT - 1, "address:a")
    limiter.refuse_blocked("address:a")
    assert not limiter.blocking


def test_the_window_opens_at_the_first_wrong_credential(
    limiter: CredentialLimiter, clock: FakeClock
) -> None:
    _count(limiter, 1, "address:a")
    clock.advance(WINDOW - 1)
    _count(limiter, LIMIT - 1, "address:a")  # the limit within one window
    _refused(limiter.refuse_blocked, "address:a")


def test_memory_stays_bounded_under_many_keys(clock: FakeClock) -> None:
    counting = CredentialLimiter(2, WINDOW, max_keys=100, now=clock)
    for index in range(10_000):
        counting.count_wrong(f"address:{index}")
    assert len(counting._counts) == 100
    blocking = CredentialLimiter(1, WINDOW, max_keys=100, now=clock)
    for index in range(10_000):
        blocking.count_wrong(f"address:{index}")
    assert len(blocking._blocked) == 100
    _refused(blocking.refuse_blocked, "address:9999")  # the latest blocks are kept
    blocking.refuse_blocked("address:0")  # the oldest are forgotten: generous, never stricter


def test_a_limit_of_zero_turns_the_limiter_off(clock: FakeClock) -> None:
    limiter = CredentialLimiter(0, WINDOW, now=clock)
    _count(limiter, 1, "address:a")
    for _ in range(1000):
        limiter.count_wrong("address:a", "client:x")
    assert not limiter.blocking
    limiter.refuse_blocked("address:a", "client:x")


def test_long_keys_are_kept_by_their_digest(limiter: CredentialLimiter) -> None:
    # A client id or a token's `sub` is the caller's to choose: a huge one is not kept whole.
    huge = "client:" + "x" * 100_000
    _count(limiter, LIMIT, huge)
    assert all(len(key) <= 100 for key in limiter._blocked)
    _refused(limiter.refuse_blocked, huge)
    limiter.refuse_blocked(huge[:-1] + "y")  # another huge one is another key


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("203.0.113.7", "address:203.0.113.7"),
        ("2001:db8:1:2:3:4:5:6", "address:2001:db8:1:2::/64"),
        ("2001:DB8:1:2:ffff::1", "address:2001:db8:1:2::/64"),  # the same /64
        ("::ffff:203.0.113.7", "address:203.0.113.7"),  # IPv4-mapped: the IPv4 address
        ("unknown", "address:unknown"),
    ],
)
def test_an_ipv6_address_counts_as_its_64(host: str, key: str) -> None:
    assert address_key(host) == key
