"""Per-client request rate limits: a token bucket per key, in this process's memory."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from bankrail.core.problems import RATE_LIMITED, ProblemError

__all__ = ["RateLimited", "RateLimiter"]


class RateLimited(ProblemError):
    """429: the client spent its budget; `Retry-After` says when a request will pass."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            RATE_LIMITED,
            f"Too many requests; retry after {retry_after} second(s).",
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
