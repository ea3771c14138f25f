"""A fake monotonic clock for what reads time through an injected `() -> float`."""

from __future__ import annotations


class FakeClock:
    """A monotonic clock that only moves when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
