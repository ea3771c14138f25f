"""When a failed webhook delivery is tried again (spec 6.5, docs/api.md).

Attempt 1 is immediate. Attempts 2, 3 and 4 follow after 1 s, 2 s and 4 s. Before attempt
n >= 5 the wait is drawn uniformly from [0, min(6 h, 30 s x 2^(n-4))] ("full jitter"), so that
receivers recovering from an outage are not hit by every sender at once. A delivery whose next
attempt would fall more than 72 h after its event (or its last replay) is discarded instead.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

FAST_RETRIES = (timedelta(seconds=1), timedelta(seconds=2), timedelta(seconds=4))
BACKOFF_BASE = timedelta(seconds=30)
BACKOFF_CAP = timedelta(hours=6)
RETRY_WINDOW = timedelta(hours=72)


def wait_before_attempt(attempt: int, rng: random.Random | None = None) -> timedelta:
    """The wait between attempt `attempt - 1` failing and attempt `attempt` (attempt >= 2)."""
    if attempt < 2:
        raise ValueError("the first attempt is immediate")
    if attempt - 2 < len(FAST_RETRIES):
        return FAST_RETRIES[attempt - 2]
    # The exponent is bounded before multiplying: from attempt 14 on the cap applies anyway,
    # and an unbounded power would overflow timedelta after a few dozen attempts.
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(attempt - 4, 16))
    draw = (rng or random).uniform(0.0, ceiling.total_seconds())
    return timedelta(seconds=draw)


def next_attempt_at(
    window_start: datetime,
    failed_at: datetime,
    attempts_made: int,
    rng: random.Random | None = None,
) -> datetime | None:
    """When to try again after `attempts_made` failed attempts, or None to discard."""
    candidate = failed_at + wait_before_attempt(attempts_made + 1, rng)
    if candidate > window_start + RETRY_WINDOW:
        return None
    return candidate
