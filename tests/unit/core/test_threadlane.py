"""The thread lane runs calls off the event loop and answers the awaiting coroutine."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bankrail.core.threadlane import ThreadLane


async def test_a_call_runs_on_a_lane_thread_and_its_result_comes_back() -> None:
    lane = ThreadLane(1, "test")
    assert await lane.run(lambda: threading.current_thread().name) == "test-0"
    assert await lane.run(lambda: 6 * 7) == 42


async def test_a_calls_exception_is_raised_in_the_awaiting_coroutine() -> None:
    lane = ThreadLane(1, "test")

    def broken() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await lane.run(broken)
    assert await lane.run(lambda: "still serving") == "still serving"


async def test_calls_run_at_once_on_as_many_threads_as_the_lane_has() -> None:
    lane = ThreadLane(2, "test")
    both_running = threading.Barrier(2, timeout=10)  # breaks unless two calls run at once

    results = await asyncio.gather(lane.run(both_running.wait), lane.run(both_running.wait))

    assert sorted(results) == [0, 1]


async def test_a_cancelled_caller_leaves_the_lane_working() -> None:
    lane = ThreadLane(1, "test")
    release = threading.Event()
    blocked = asyncio.ensure_future(lane.run(lambda: release.wait(10)))
    await asyncio.sleep(0)  # let the call reach the thread's queue
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    release.set()

    assert await lane.run(lambda: "after") == "after"
