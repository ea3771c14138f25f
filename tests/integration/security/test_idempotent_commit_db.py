"""Idempotent requests committed together (`security.idempotent_commit`) on real PostgreSQL.

Promise: in a batch, each request's effect runs at most once per key and its answer is stored
with it; a key's second use in the batch is in flight (409) and a later repeat is replayed
byte for byte; a request whose effect fails (a 4xx, or any other error) leaves none of its
own writes and does not undo the others'; a 4xx is stored and replayed like a success. A
signed request's signature is remembered with its stored answer, so that once the answer is
no longer kept the same signed request is a 409 that does nothing. The rows the batch's
effects act on (`LockedEffect`) are read and locked in one statement, and an effect is given
its row only while no other effect of the batch may have changed it.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import orjson
import pytest

from bankrail.core.problems import CONFLICT, NotFound, ProblemError, problem_title_var
from bankrail.core.tracing import trace_id_var
from bankrail.db.pool import Connection
from bankrail.security.idempotency import (
    Handler,
    KeyedRequest,
    ReplayedAnswer,
    delete_expired,
    fingerprint,
)
from bankrail.security.idempotent_commit import (
    IdempotentCommit,
    IdempotentWork,
    LockedEffect,
    Result,
    run_batch,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TTL = timedelta(hours=6)


def render(problem: ProblemError) -> bytes:
    return orjson.dumps({"status": problem.problem.status, "detail": problem.detail})


async def _prepare(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await conn.execute("CREATE TABLE effects (id uuid PRIMARY KEY, name text NOT NULL)")


async def _effects(pool: asyncpg.Pool) -> list[str]:
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT name FROM effects ORDER BY name")
    return [row["name"] for row in rows]


def _work(
    name: str,
    key: str | None = None,
    *,
    fails: Exception | None = None,
    signature: bytes | None = None,
    now: datetime = NOW,
) -> IdempotentWork:
    """A request (signed with `signature`, a digest, when given) that writes a row named
    `name` and answers 201 with its id, then raises `fails` if given (after its write)."""

    async def effect(conn: Connection) -> tuple[int, bytes]:
        row_id = uuid.uuid4()
        await conn.execute("INSERT INTO effects (id, name) VALUES ($1, $2)", row_id, name)
        if fails is not None:
            raise fails
        return 201, orjson.dumps({"id": str(row_id)})

    handler: Handler = effect
    keyed = None
    if key is not None:
        request_fingerprint = fingerprint("POST", "/x", name.encode())
        keyed = KeyedRequest("v3:test", key, request_fingerprint, TTL, signature)
    return IdempotentWork(keyed, handler, now)


async def _batch(pool: asyncpg.Pool, *batch: IdempotentWork) -> list[Result]:
    """The results of requests run as one batch, committed in one transaction."""
    async with pool.acquire() as conn, conn.transaction():
        return await run_batch(conn, batch, render)


async def test_each_request_of_a_batch_runs_once_and_is_replayed(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    first = await _batch(pool, _work("a", "ka"), _work("b", "kb"), _work("c"))
    assert [r[0] for r in first if isinstance(r, tuple)] == [201, 201, 201]
    again = await _batch(pool, _work("a", "ka"), _work("b", "kb"))
    assert again == first[:2]  # byte for byte, and no effect again
    assert await _effects(pool) == ["a", "b", "c"]


async def test_a_key_used_twice_in_a_batch_is_in_flight_the_second_time(
    pool: asyncpg.Pool,
) -> None:
    await _prepare(pool)
    first, second = await _batch(pool, _work("a", "same"), _work("a", "same"))
    assert isinstance(first, tuple)
    assert isinstance(second, ProblemError)
    assert second.problem.status == 409
    assert await _effects(pool) == ["a"]


async def test_a_failing_request_undoes_only_its_own_writes(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    refused = _work("refused", "k1", fails=NotFound("gone"))
    broken = _work("broken", "k2", fails=RuntimeError("bug"))
    results = await _batch(pool, _work("before", "k0"), refused, broken, _work("after", "k3"))
    assert isinstance(results[1], tuple)
    assert results[1][0] == 404  # a 4xx is an answer, stored under its key
    assert isinstance(results[2], RuntimeError)  # raised to its request, nothing stored
    assert await _effects(pool) == ["after", "before"]
    assert await _batch(pool, refused) == [results[1]]  # replayed, not run again
    assert await _effects(pool) == ["after", "before"]
    [retried] = await _batch(pool, broken)  # its key was not taken: it runs again
    assert isinstance(retried, RuntimeError)


async def test_a_statement_postgresql_refuses_undoes_only_its_own_request(
    pool: asyncpg.Pool,
) -> None:
    await _prepare(pool)

    async def refused_by_storage(conn: Connection) -> tuple[int, bytes]:
        await conn.execute("INSERT INTO effects (id, name) VALUES ($1, 'refused')", uuid.uuid4())
        await conn.execute("SELECT 1 / 0")  # the transaction's error, not the request's code
        return 201, b"{}"

    refused = IdempotentWork(None, refused_by_storage, NOW)
    results = await _batch(pool, _work("before", "k0"), refused, _work("after", "k1"))
    assert isinstance(results[1], asyncpg.DataError)  # raised to its request alone
    assert [result[0] for result in (results[0], results[2]) if isinstance(result, tuple)] == [
        201,
        201,
    ]
    assert await _effects(pool) == ["after", "before"]


async def test_requests_sent_together_share_a_commit(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    commit = IdempotentCommit(pool, render)
    answers = await asyncio.gather(*(commit.accept(_work(f"w{n}", f"k{n}")) for n in range(5)))
    assert [status for status, _ in answers] == [201] * 5
    assert await _effects(pool) == [f"w{n}" for n in range(5)]


SIGNATURE = bytes(range(32))


async def test_a_signed_request_whose_answer_expired_is_a_409_and_does_nothing(
    pool: asyncpg.Pool,
) -> None:
    await _prepare(pool)
    [first] = await _batch(pool, _work("a", "ka", signature=SIGNATURE))
    assert isinstance(first, tuple)
    # Within the key's validity the same signed request is replayed, as any other.
    assert await _batch(pool, _work("a", "ka", signature=SIGNATURE, now=NOW + TTL / 2)) == [first]
    # After it the answer is no longer kept, whether still stored or deleted: the signature
    # was accepted once, so the request is refused.
    later = NOW + TTL
    [expired] = await _batch(pool, _work("a", "ka", signature=SIGNATURE, now=later))
    async with pool.acquire() as conn:
        assert await delete_expired(conn, later, 100) == 1
    [deleted] = await _batch(pool, _work("a", "ka", signature=SIGNATURE, now=later))
    for refused in (expired, deleted):
        assert isinstance(refused, ProblemError)
        assert refused.problem is CONFLICT
        assert "already used" in refused.detail
    assert await _effects(pool) == ["a"]
    # The same request signed anew is a new request once the key has expired.
    [again] = await _batch(pool, _work("a", "ka", signature=bytes(32), now=later))
    assert isinstance(again, tuple)
    assert await _effects(pool) == ["a", "a"]


async def test_a_signature_is_remembered_only_with_a_stored_answer(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    # A request that failed stored nothing and took no effect: its exact retry (the same
    # signature) runs, after the key's validity too.
    [broken] = await _batch(pool, _work("a", "ka", signature=SIGNATURE, fails=RuntimeError("x")))
    assert isinstance(broken, RuntimeError)
    [retried] = await _batch(pool, _work("a", "ka", signature=SIGNATURE, now=NOW + TTL))
    assert isinstance(retried, tuple)
    async with pool.acquire() as conn:
        remembered = await conn.fetch("SELECT digest, accepted_at FROM accepted_signatures")
    assert [(row["digest"], row["accepted_at"]) for row in remembered] == [(SIGNATURE, NOW + TTL)]


# Rows an effect acts on (`LockedEffect`): read and locked for the whole batch by one call of
# `locked_counters`, which counts its calls; `_OTHER` is another query of the same rows.
_LOCK = "SELECT * FROM locked_counters($1::uuid[], $2::uuid[])"
_OTHER = "SELECT * FROM locked_counters($1::uuid[], $2::uuid[]) AS other"
OWNER = uuid.uuid4()


async def _counters(pool: asyncpg.Pool, count: int) -> list[uuid.UUID]:
    """`count` counters of OWNER at 0, ordered by id, and the function that locks them."""
    async with pool.acquire() as conn:
        await conn.execute(
            """
            CREATE TABLE counters (
                id uuid PRIMARY KEY, merchant_id uuid NOT NULL, value int NOT NULL
            );
            CREATE TABLE lock_calls (ids uuid[] NOT NULL);
            CREATE FUNCTION locked_counters(wanted uuid[], owners uuid[])
            RETURNS SETOF counters AS $$
            BEGIN
                INSERT INTO lock_calls VALUES (wanted);
                RETURN QUERY SELECT c.* FROM counters c
                    WHERE EXISTS (
                        SELECT FROM unnest(wanted, owners) AS w (id, owner)
                        WHERE w.id = c.id AND (w.owner IS NULL OR w.owner = c.merchant_id))
                    ORDER BY c.id FOR UPDATE OF c;
            END $$ LANGUAGE plpgsql;
            """
        )
        ids = sorted(uuid.uuid4() for _ in range(count))
        await conn.executemany("INSERT INTO counters VALUES ($1, $2, 0)", [(i, OWNER) for i in ids])
    return ids


def _increment(
    row_id: uuid.UUID,
    key: str | None,
    given: list[int | None],
    *,
    fails: Exception | None = None,
    query: str = _LOCK,
    owner: uuid.UUID | None = OWNER,
    now: datetime = NOW,
) -> IdempotentWork:
    """A request of `owner` that adds one to a counter, from the value it was given
    (appended to `given`) or, given none, that it read (404 unless the owner's); then raises
    `fails` if given."""

    async def effect(conn: Connection, row: Any | None) -> tuple[int, bytes]:
        given.append(None if row is None else row["value"])
        if row is None:
            row = await conn.fetchrow(
                "SELECT * FROM counters WHERE id = $1 AND ($2::uuid IS NULL OR merchant_id = $2)"
                " FOR UPDATE",
                row_id,
                owner,
            )
        if row is None:
            raise NotFound("no such counter")
        await conn.execute("UPDATE counters SET value = $2 WHERE id = $1", row_id, row["value"] + 1)
        if fails is not None:
            raise fails
        return 200, orjson.dumps({"value": row["value"] + 1})

    keyed = None
    if key is not None:
        keyed = KeyedRequest("v3:test", key, fingerprint("POST", "/c", key.encode()), TTL)
    return IdempotentWork(keyed, LockedEffect(query, row_id, owner, effect), now)


async def _values_and_lock_calls(pool: asyncpg.Pool) -> tuple[list[int], list[list[uuid.UUID]]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT value FROM counters ORDER BY id")
        values = [row["value"] for row in rows]
        calls = [list(row["ids"]) for row in await conn.fetch("SELECT ids FROM lock_calls")]
    return values, calls


async def test_the_rows_of_a_batchs_effects_are_read_and_locked_in_one_statement(
    pool: asyncpg.Pool,
) -> None:
    ids = await _counters(pool, 3)
    given: list[int | None] = []
    # Out of the order of their ids: the statement locks them in order all the same.
    batch = [_increment(row_id, f"k{n}", given) for n, row_id in enumerate(reversed(ids))]
    results = await _batch(pool, *batch)
    assert [result[0] for result in results if isinstance(result, tuple)] == [200, 200, 200]
    assert given == [0, 0, 0]  # each effect was handed its row
    assert await _values_and_lock_calls(pool) == ([1, 1, 1], [ids])


async def test_the_rows_are_locked_until_the_batch_commits_and_only_the_owners(
    pool: asyncpg.Pool,
) -> None:
    ids = await _counters(pool, 3)
    given: list[int | None] = []
    intruder = _increment(ids[2], "k2", given, owner=uuid.uuid4())
    async with pool.acquire() as conn, conn.transaction():
        [mine, refused] = await run_batch(conn, [_increment(ids[0], "k0", given), intruder], render)
        async with pool.acquire() as other:
            lock = "SELECT 1 FROM counters WHERE id = $1 FOR UPDATE NOWAIT"
            with pytest.raises(asyncpg.LockNotAvailableError):
                await other.fetch(lock, ids[0])
            # Neither a row no request named nor one another owner's request named.
            assert await other.fetch(lock, ids[1])
            assert await other.fetch(lock, ids[2])
    assert isinstance(mine, tuple)
    assert isinstance(refused, tuple)
    assert refused[0] == 404
    assert given == [0, None]
    assert (await _values_and_lock_calls(pool))[0] == [1, 0, 0]


async def test_a_row_named_by_another_owner_first_is_handed_to_its_owner_only(
    pool: asyncpg.Pool,
) -> None:
    [row_id] = await _counters(pool, 1)
    given: list[int | None] = []
    results = await _batch(
        pool,
        _increment(row_id, "k0", given, owner=uuid.uuid4()),
        _increment(row_id, "k1", given),
    )
    # The row was read once, for its owner; the other request read nothing it may not see.
    assert isinstance(results[0], tuple)
    assert results[0][0] == 404
    assert results[1] == (200, orjson.dumps({"value": 1}))
    assert given == [None, 0]


async def test_only_a_request_that_will_run_locks_its_row(pool: asyncpg.Pool) -> None:
    ids = await _counters(pool, 2)
    [first] = await _batch(pool, _increment(ids[0], "k0", []))
    given: list[int | None] = []
    # A replay of k0 and k1 used twice (the second in flight): only k1's first use locks.
    results = await _batch(
        pool,
        _increment(ids[0], "k0", given),
        _increment(ids[1], "k1", given),
        _increment(ids[0], "k1", given),
    )
    assert results[0] == first
    assert isinstance(results[2], ProblemError)
    assert results[2].problem.status == 409
    assert given == [0]
    assert await _values_and_lock_calls(pool) == ([1, 1], [[ids[0]], [ids[1]]])
    # Once k0's answer has expired, the same request runs again: its row is locked with
    # the batch's and handed to it.
    [again] = await _batch(pool, _increment(ids[0], "k0", given, now=NOW + TTL))
    assert again == (200, orjson.dumps({"value": 2}))
    assert given == [0, 1]
    assert (await _values_and_lock_calls(pool))[1][-1] == [ids[0]]


async def test_a_row_another_request_of_the_batch_acted_on_is_read_again(
    pool: asyncpg.Pool,
) -> None:
    [row_id] = await _counters(pool, 1)
    given: list[int | None] = []
    batch = [_increment(row_id, f"k{n}", given) for n in range(3)]
    results = await _batch(pool, *batch)
    assert [result for result in results if isinstance(result, tuple)] == [
        (200, orjson.dumps({"value": value})) for value in (1, 2, 3)
    ]
    # The first was given the row as read; the others read it as the one before left it.
    assert given == [0, None, None]
    assert await _values_and_lock_calls(pool) == ([3], [[row_id]])


async def test_a_row_whose_effect_was_undone_is_read_again(pool: asyncpg.Pool) -> None:
    [row_id] = await _counters(pool, 1)
    given: list[int | None] = []
    failing = _increment(row_id, "k0", given, fails=RuntimeError("bug"))
    results = await _batch(pool, failing, _increment(row_id, "k1", given))
    assert isinstance(results[0], RuntimeError)
    assert results[1] == (200, orjson.dumps({"value": 1}))  # from the row as it is, undone
    # It wrote, then failed without a savepoint of its own: the batch ran again with them.
    assert given == [0, 0, None]
    assert (await _values_and_lock_calls(pool))[0] == [1]


async def test_after_any_other_effect_the_rows_are_read_again(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    [row_id] = await _counters(pool, 1)

    async def sets_the_counter(conn: Connection) -> tuple[int, bytes]:
        await conn.execute("UPDATE counters SET value = 10 WHERE id = $1", row_id)
        return 200, b"{}"

    given: list[int | None] = []
    plain = IdempotentWork(None, sets_the_counter, NOW)
    results = await _batch(pool, plain, _increment(row_id, "k1", given))
    assert results[1] == (200, orjson.dumps({"value": 11}))  # not 1: it read the 10 written
    assert given == [None]


async def test_after_an_effect_of_another_query_the_rows_are_read_again(
    pool: asyncpg.Pool,
) -> None:
    ids = await _counters(pool, 2)
    given: list[int | None] = []
    # The middle request, of another query, acts on the third's row; the third must see it.
    results = await _batch(
        pool,
        _increment(ids[0], "k0", given),
        _increment(ids[1], "k1", given, query=_OTHER),
        _increment(ids[1], "k2", given),
    )
    assert results[2] == (200, orjson.dumps({"value": 2}))
    # Each effect after one of another query reads its row itself.
    assert given == [0, None, None]


async def test_an_effect_whose_row_is_not_found_is_given_none(pool: asyncpg.Pool) -> None:
    await _counters(pool, 1)
    given: list[int | None] = []
    [result] = await _batch(pool, _increment(uuid.uuid4(), "k0", given))
    assert isinstance(result, tuple)
    assert result[0] == 404
    assert given == [None]


def _stamp(
    row_id: uuid.UUID,
    key: str,
    runs: list[str],
    *,
    fails_before: Exception | None = None,
    fails_after: Exception | None = None,
) -> IdempotentWork:
    """An action on a counter (handed its row by the batch) that writes a row named `key`
    with a new id and answers that id; it notes each run in `runs`, and raises
    `fails_before` before any statement or `fails_after` after its write."""

    async def effect(conn: Connection, row: Any | None) -> tuple[int, bytes]:
        assert row is not None  # each counter is acted on once: its row is handed
        runs.append(key)
        if fails_before is not None:
            raise fails_before
        row_id = uuid.uuid4()
        await conn.execute("INSERT INTO effects (id, name) VALUES ($1, $2)", row_id, key)
        if fails_after is not None:
            raise fails_after
        return 201, orjson.dumps({"id": str(row_id)})

    keyed = KeyedRequest("v3:test", key, fingerprint("POST", "/s", key.encode()), TTL)
    return IdempotentWork(keyed, LockedEffect(_LOCK, row_id, OWNER, effect), NOW)


async def _three_actions(
    pool: asyncpg.Pool, **middle: Exception
) -> tuple[list[uuid.UUID], list[Result], list[str]]:
    """Three actions k0, k1, k2 on three counters in one batch, the middle one failing as
    `middle` says (`_stamp`): the counters, the results and the runs noted."""
    await _prepare(pool)
    ids = await _counters(pool, 3)
    runs: list[str] = []
    results = await _batch(
        pool,
        _stamp(ids[0], "k0", runs),
        _stamp(ids[1], "k1", runs, **middle),
        _stamp(ids[2], "k2", runs),
    )
    return ids, results, runs


async def test_an_action_that_fails_after_writing_leaves_only_the_committed_runs_answers(
    pool: asyncpg.Pool,
) -> None:
    # Handed its row, an action runs without a savepoint of its own: when it fails after a
    # write, the batch is undone and run again with savepoints. Each answer must be its
    # committed run's (the id of the row that run wrote), and the failed write must be gone.
    ids, results, runs = await _three_actions(pool, fails_after=NotFound("gone"))
    async with pool.acquire() as conn:
        rows = {r["name"]: str(r["id"]) for r in await conn.fetch("SELECT id, name FROM effects")}
    assert set(rows) == {"k0", "k2"}
    assert results[0] == (201, orjson.dumps({"id": rows["k0"]}))
    assert isinstance(results[1], tuple)
    assert results[1][0] == 404  # stored under its key, and replayed
    assert results[2] == (201, orjson.dumps({"id": rows["k2"]}))
    assert runs == ["k0", "k1", "k0", "k1", "k2"]  # the batch ran again from its start
    again = await _batch(pool, *(_stamp(i, f"k{n}", runs) for n, i in enumerate(ids)))
    assert again == results  # byte for byte, and no action ran again
    assert len(runs) == 5


async def test_an_action_that_fails_before_using_the_connection_costs_the_batch_nothing(
    pool: asyncpg.Pool,
) -> None:
    _, results, runs = await _three_actions(pool, fails_before=ProblemError(CONFLICT, "not now"))
    assert runs == ["k0", "k1", "k2"]  # each once: nothing had to be undone
    assert [r[0] for r in results if isinstance(r, tuple)] == [201, 409, 201]
    assert await _effects(pool) == ["k0", "k2"]


async def test_each_request_of_a_batch_is_refused_under_its_own_trace_id(
    pool: asyncpg.Pool,
) -> None:
    await _prepare(pool)
    # One batch in flight: the three are committed together by a flusher that the first
    # one's task started, under its trace id.
    commit = IdempotentCommit(pool, _render_traced, in_flight=1)

    async def refused(n: int) -> tuple[int, bytes]:
        trace_id_var.set(f"trace-{n}")
        return await commit.accept(_work(f"w{n}", f"k{n}", fails=NotFound("gone")))

    answers = await asyncio.gather(*(refused(n) for n in range(3)))
    # Each stored problem names its own request's trace id, as its answer's header does.
    assert [orjson.loads(body)["trace_id"] for _, body in answers] == [
        "trace-0",
        "trace-1",
        "trace-2",
    ]


async def test_each_request_of_a_batch_notes_its_own_problem_title_for_its_access_line(
    pool: asyncpg.Pool,
) -> None:
    await _prepare(pool)
    commit = IdempotentCommit(pool, _render_titled, in_flight=1)

    async def refused(n: int) -> str | None:
        trace_id_var.set(f"trace-{n}")
        await commit.accept(_work(f"w{n}", f"k{n}", fails=NotFound("gone")))
        return problem_title_var.get()

    # The flusher renders all three in its own task; each request's access line names the
    # title of the problem its own answer holds.
    assert await asyncio.gather(*(refused(n) for n in range(3))) == [
        "Not Found (trace-0)",
        "Not Found (trace-1)",
        "Not Found (trace-2)",
    ]

    async def replayed() -> str | None:
        trace_id_var.set("trace-retry")
        status, body = await commit.accept(_work("w1", "k1", fails=NotFound("gone")))
        assert (status, type(body)) == (404, ReplayedAnswer)
        return problem_title_var.get()

    # A retry is answered the stored problem, and its line names that problem's title.
    assert await asyncio.create_task(replayed()) == "Not Found (trace-1)"


def _render_titled(problem: ProblemError) -> bytes:
    return orjson.dumps({"title": f"{problem.problem.title} ({trace_id_var.get()})"})


def _render_traced(problem: ProblemError) -> bytes:
    return orjson.dumps({"status": problem.problem.status, "trace_id": trace_id_var.get()})
