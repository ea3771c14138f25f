"""Waiting for a condition in a test: poll it, never sleep a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None],
    *,
    timeout: float = 10,
    what: str = "condition",
    interval: float = 0.05,
) -> T:
    """Poll `check` until it returns something truthy and return that, or fail the test after
    `timeout` seconds naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
