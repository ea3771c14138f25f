"""Group commit (`db.group_commit.GroupCommit`) on real PostgreSQL.

Promise: requests submitted together are committed in one transaction, each getting its own
result once it has committed; a batch that PostgreSQL rolls back to break a deadlock is run
again as a whole, with nothing of the rolled-back attempt left, and fails every request only
after `ATTEMPTS` such rollbacks; with room for more than one batch in flight, a batch that
waits does not hold up the next; a request submitted as the last batch ends is committed
without waiting for another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg
import pytest

from bankrail.db.group_commit import ATTEMPTS, GroupCommit
from bankrail.db.pool import Connection

# What PostgreSQL raises in the transaction it chooses to end a deadlock.
_DEADLOCK = "DO $$ BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = '40P01'; END $$"


async def _table(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await conn.execute("CREATE TABLE written (item integer NOT NULL, attempt integer)")


async def _written(pool: asyncpg.Pool) -> list[tuple[int, int]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT item, attempt FROM written ORDER BY item")
    return [(r["item"], r["attempt"]) for r in rows]


def _committer(pool: asyncpg.Pool, deadlocks: int) -> tuple[GroupCommit[int, int], list[int]]:
    """A GroupCommit whose batches write their items, the first `deadlocks` attempts ending
    in a deadlock after writing; returns it with the sizes of the batches it ran."""
    sizes: list[int] = []

    async def run(conn: Connection, items: Sequence[int]) -> list[int]:
        sizes.append(len(items))
        attempt = len(sizes)
        await conn.executemany(
            "INSERT INTO written (item, attempt) VALUES ($1, $2)", [(i, attempt) for i in items]
        )
        if attempt <= deadlocks:
            await conn.execute(_DEADLOCK)
        return [item * 10 for item in items]

    return GroupCommit(pool, run), sizes


async def test_requests_submitted_together_are_committed_together(pool: asyncpg.Pool) -> None:
    await _table(pool)
    commits, sizes = _committer(pool, deadlocks=0)
    results = await asyncio.gather(*(commits.submit(i) for i in range(5)))
    assert results == [0, 10, 20, 30, 40]
    assert sizes == [5]
    assert await _written(pool) == [(i, 1) for i in range(5)]


async def test_a_batch_rolled_back_by_a_deadlock_runs_again_once_written(
    pool: asyncpg.Pool,
) -> None:
    await _table(pool)
    commits, sizes = _committer(pool, deadlocks=ATTEMPTS - 1)
    results = await asyncio.gather(*(commits.submit(i) for i in range(3)))
    assert results == [0, 10, 20]
    assert sizes == [3] * ATTEMPTS
    assert await _written(pool) == [(i, ATTEMPTS) for i in range(3)]  # the last attempt only


async def test_a_batch_that_keeps_deadlocking_fails_every_request(pool: asyncpg.Pool) -> None:
    await _table(pool)
    commits, sizes = _committer(pool, deadlocks=ATTEMPTS)
    results = await asyncio.gather(*(commits.submit(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, asyncpg.DeadlockDetectedError) for r in results)
    assert sizes == [3] * ATTEMPTS
    assert await _written(pool) == []


async def test_a_waiting_batch_holds_up_the_next_only_without_room_for_it(
    pool: asyncpg.Pool,
) -> None:
    release = asyncio.Event()

    async def run(conn: Connection, items: Sequence[str]) -> list[str]:
        if "waits" in items:
            await release.wait()  # a row another transaction holds, say
        return list(items)

    for in_flight, next_is_held_up in ((1, True), (2, False)):
        release.clear()
        commits: GroupCommit[str, str] = GroupCommit(pool, run, in_flight=in_flight)
        waiting = asyncio.create_task(commits.submit("waits"))
        await asyncio.sleep(0)  # its batch has started
        done, _ = await asyncio.wait([asyncio.create_task(commits.submit("next"))], timeout=1.0)
        assert (not done) is next_is_held_up
        release.set()
        assert await waiting == "waits"


async def _send_next_after(pool: asyncpg.Pool, hops: int) -> str:
    """Commit a first request, sending the next one `hops` loop steps after the first
    batch's statement; the next one's result."""
    loop = asyncio.get_running_loop()
    sent: list[asyncio.Task[str]] = []

    def send_later(left: int) -> None:
        if left:
            loop.call_soon(send_later, left - 1)
        else:
            sent.append(asyncio.create_task(commits.submit("next")))

    async def run(conn: Connection, items: Sequence[str]) -> list[str]:
        await conn.execute("SELECT 1")
        if items == ["first"]:
            loop.call_soon(send_later, hops)
        return list(items)

    commits: GroupCommit[str, str] = GroupCommit(pool, run)
    assert await commits.submit("first") == "first"
    while not sent:  # the chain of hops has not reached its end yet
        await asyncio.sleep(0)
    return await asyncio.wait_for(sent[0], timeout=5)


async def test_a_request_sent_as_the_last_batch_ends_is_committed(pool: asyncpg.Pool) -> None:
    # A request can arrive at any step of the event loop, the one in which the flusher of
    # the last batch finds nothing else pending included: here, every step from the first
    # batch's statement to well past its commit. Each must be committed without waiting
    # for a third request (with the flusher counted until its done callbacks ran, one was
    # left waiting: 30 s, the request timeout, in a bench run).
    for hops in range(40):
        assert await _send_next_after(pool, hops) == "next", hops


async def test_a_request_cancelled_while_its_batch_commits_leaves_the_batch_whole(
    pool: asyncpg.Pool,
) -> None:
    await _table(pool)
    in_flight, go_on = asyncio.Event(), asyncio.Event()
    sizes: list[int] = []

    async def run(conn: Connection, items: Sequence[int]) -> list[int]:
        sizes.append(len(items))
        in_flight.set()
        await go_on.wait()
        await conn.executemany(
            "INSERT INTO written (item, attempt) VALUES ($1, 1)", [(i,) for i in items]
        )
        return [item * 10 for item in items]

    commits: GroupCommit[int, int] = GroupCommit(pool, run)
    waiting = [asyncio.create_task(commits.submit(i)) for i in range(3)]
    await in_flight.wait()
    # The request whose submission started the batch's flush goes away mid-commit.
    waiting[0].cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting[0]
    go_on.set()
    assert await waiting[1] == 10
    assert await waiting[2] == 20
    # What it submitted is committed with the others, once.
    assert sizes == [3]
    assert await _written(pool) == [(i, 1) for i in range(3)]
    assert await commits.submit(7) == 70
