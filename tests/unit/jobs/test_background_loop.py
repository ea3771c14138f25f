"""The background loop: under load it pauses between rounds so that work arriving meanwhile
is taken together; after an idle spell a wake runs its steps at once."""

from __future__ import annotations

import asyncio
import itertools

from bankrail.jobs.runner import BackgroundLoop


class _Work:
    """A step that takes everything queued when it runs, and records when it ran."""

    def __init__(self) -> None:
        self.queued = 0
        self.rounds: list[tuple[float, int]] = []
        self.ran = asyncio.Event()

    async def step(self) -> int:
        taken, self.queued = self.queued, 0
        self.rounds.append((asyncio.get_running_loop().time(), taken))
        self.ran.set()
        return taken

    async def next_round(self) -> tuple[float, int]:
        self.ran.clear()
        await asyncio.wait_for(self.ran.wait(), 10)
        return self.rounds[-1]


async def test_under_load_rounds_are_a_gather_apart_and_take_what_arrived_meanwhile() -> None:
    work = _Work()
    loop = BackgroundLoop("test", [work.step], poll_interval=60, gather=0.5)
    loop.start()
    try:
        await work.next_round()  # idle
        for _ in range(10):  # ten arrivals about 10 ms apart, each announced
            work.queued += 1
            loop.wake()
            await asyncio.sleep(0.01)
        while sum(taken for _, taken in work.rounds) < 10:
            await work.next_round()
        busy = [at for at, taken in work.rounds if taken]
        # Without the gather, each wake would have been a round of its own.
        assert len(busy) <= 3, work.rounds
        assert all(later - earlier >= 0.5 for earlier, later in itertools.pairwise(busy))
    finally:
        await loop.stop()


async def test_after_an_idle_round_a_wake_runs_the_steps_without_the_gather() -> None:
    work = _Work()
    loop = BackgroundLoop("test", [work.step], poll_interval=60, gather=30)
    loop.start()
    try:
        await work.next_round()  # finds nothing: the loop now waits for a wake
        woken_at = asyncio.get_running_loop().time()
        work.queued = 1
        loop.wake()
        ran_at, took = await work.next_round()  # would time out if it waited the gather
        assert took == 1
        assert ran_at - woken_at < 30
    finally:
        await loop.stop()


async def test_a_wake_while_the_steps_run_is_not_lost() -> None:
    """Work committed after a step looked, announced while the round is still running: the
    loop runs its steps again at once, not after the poll."""
    work = _Work()
    first = True

    async def step() -> int:
        nonlocal first
        if first:  # looks too early, then the work and its notice arrive
            first = False
            work.queued = 1
            loop.wake()
            return 0
        return await work.step()

    loop = BackgroundLoop("test", [step], poll_interval=60)
    loop.start()
    try:
        while sum(taken for _, taken in work.rounds) < 1:
            await work.next_round()  # would time out if the loop waited the poll
    finally:
        await loop.stop()
