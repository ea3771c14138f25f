"""Request rate limits (a token bucket per client) and the limit on wrong credentials (a
window per client address and per claimed identity), in this process's memory."""

from __future__ import annotations

import hashlib
import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable

from bankrail.core.problems import RATE_LIMITED, ProblemError

__all__ = ["CredentialLimiter", "RateLimited", "RateLimiter", "address_key"]


class RateLimited(ProblemError):
    """429: the client spent its budget; `Retry-After` says when a request will pass."""

    def __init__(self, retry_after: int, reason: str = "Too many requests") -> None:
        super().__init__(
            RATE_LIMITED,
            f"{reason}; retry after {retry_after} second(s).",
            headers={"Retry-After": str(retry_after)},
        )


class RateLimiter:
    """Allows each key `rate` requests per second on average, with bursts up to `burst`.

    A rate of 0 turns the limiter off. Buckets live in memory, one set per API process, and
    the least recently seen keys are forgotten beyond `max_keys` (a forgotten key starts
    again with a full bucket, which only ever errs on the generous side).
    """

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        max_keys: int = 100_000,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self.burst = max(burst, 1)
        self.max_keys = max_keys
        self._now = now
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        """False when configured with a rate of 0."""
        return self.rate > 0

    def take(self, key: str) -> None:
        """Spend one request of `key`'s budget, or raise RateLimited."""
        if self.rate <= 0:
            return
        now = self._now()
        tokens, seen = self._buckets.pop(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - seen) * self.rate)
        if tokens < 1.0:
            self._remember(key, tokens, now)
            raise RateLimited(max(1, math.ceil((1.0 - tokens) / self.rate)))
        self._remember(key, tokens - 1.0, now)

    def _remember(self, key: str, tokens: float, now: float) -> None:
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)


WRONG_CREDENTIALS = "Too many wrong credentials from this address or for this identity"
# Longer keys (a client id or a token's `sub` are the caller's to choose) are kept as their
# SHA-256, so that the memory a key takes is bounded as well as their number.
_LONGEST_KEY = 100


def address_key(host: str) -> str:
    """The credential limiter's key of a calling address: an IPv6 address counts as its /64,
    the smallest block a subscriber is given (one address each would let a guesser with a
    /64 go on for ever); an IPv4 address, or an IPv4-mapped IPv6 one, as itself."""
    if ":" not in host:
        return "address:" + host  # IPv4 (or not an address at all): as it is
    try:
        address = ipaddress.IPv6Address(host)
    except ValueError:
        return "address:" + host
    if address.ipv4_mapped is not None:
        return f"address:{address.ipv4_mapped}"
    return f"address:{ipaddress.IPv6Network((address, 64), strict=False)}"


class CredentialLimiter:
    """Blocks a key (a client address, or an identity a credential claims) once `limit` wrong
    credentials were counted against it within `window` seconds of the first of them.

    A window opens at a key's first wrong credential; the one that reaches the limit blocks
    the key for `window` seconds from then. While blocked, every request on the key is
    refused, right credentials too, so that guessing cannot go on. A limit of 0 turns the
    limiter off. Counts and blocks live in memory, one set per API process, and at most
    `max_keys` of each are kept: beyond that the oldest are forgotten, which only ever errs
    on the generous side.
    """

    def __init__(
        self,
        limit: int,
        window: float,
        *,
        max_keys: int = 100_000,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window = window
        self.max_keys = max_keys
        self._now = now
        self._counts: OrderedDict[str, tuple[float, int]] = OrderedDict()
        # key -> end of its block; insertion order is expiry order (every block lasts one
        # window), so the expired ones are always at the front.
        self._blocked: dict[str, float] = {}

    @property
    def blocking(self) -> bool:
        """True while some key may be blocked: the one test a right credential costs when
        none is."""
        return bool(self._blocked)

    def refuse_blocked(self, *keys: str) -> None:
        """Raise RateLimited when any of `keys` is blocked."""
        blocked = self._blocked
        if not blocked:
            return
        until = 0.0
        for key in keys:
            until = max(until, blocked.get(_bounded(key), 0.0))
        if until:
            now = self._now()
            if now < until:
                raise RateLimited(max(1, math.ceil(until - now)), WRONG_CREDENTIALS)
            self._forget_expired(now)

    def count_wrong(self, *keys: str) -> None:
        """Count one wrong credential against each of `keys`; raises RateLimited, counting
        nothing, when one of them is blocked already."""
        if self.limit <= 0:
            return
        self.refuse_blocked(*keys)
        now = self._now()
        for key in map(_bounded, keys):
            start, count = self._counts.pop(key, (now, 0))
            if now - start >= self.window:
                start, count = now, 0
            count += 1
            if count >= self.limit:
                self._blocked.pop(key, None)  # to the end: the latest to expire
                self._blocked[key] = now + self.window
                continue
            self._counts[key] = (start, count)
        while len(self._counts) > self.max_keys:
            self._counts.popitem(last=False)
        self._forget_expired(now)
        while len(self._blocked) > self.max_keys:
            del self._blocked[next(iter(self._blocked))]

    def _forget_expired(self, now: float) -> None:
        while self._blocked:
            first = next(iter(self._blocked))
            if self._blocked[first] > now:
                return
            del self._blocked[first]


def _bounded(key: str) -> str:
    if len(key) <= _LONGEST_KEY:
        return key
    return "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
