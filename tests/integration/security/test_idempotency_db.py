"""Integration tests of the rules of an Idempotency-Key (docs/api.md), for one request at a
time through the path every idempotent write takes (`security.idempotent_commit.run_batch`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg
import orjson
import pytest

from bankrail.core.problems import (
    IDEMPOTENCY_CONCURRENCY,
    IDEMPOTENCY_REUSE,
    UNKNOWN_ERROR,
    NotFound,
    ProblemError,
    ProblemType,
)
from bankrail.db.pool import Connection
from bankrail.security.idempotency import KeyedRequest, ProblemRenderer, fingerprint
from bankrail.security.idempotent_commit import IdempotentWork, run_batch

TTL = timedelta(hours=6)
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SCOPE = "client-1"
FP = fingerprint("POST", "/v3/payments", b'{"amount_in_minor":100}')
OTHER_FP = fingerprint("POST", "/v3/payments", b'{"amount_in_minor":200}')

Handler = Callable[[Connection], Awaitable[tuple[int, bytes]]]


async def _run_one(
    conn: Connection,
    *,
    scope: str,
    key: str,
    request_fingerprint: bytes,
    now: datetime,
    ttl: timedelta,
    handler: Handler,
    render_problem: ProblemRenderer,
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE,
    store_client_errors: bool = True,
) -> tuple[int, bytes]:
    """One request, as a batch of one; raises what the request is to raise."""
    keyed = KeyedRequest(scope, key, request_fingerprint, ttl)
    work = IdempotentWork(keyed, handler, now, reuse_problem, store_client_errors)
    [result] = await run_batch(conn, [work], render_problem)
    if isinstance(result, Exception):
        raise result
    return result


def render(problem: ProblemError) -> bytes:
    return orjson.dumps({"status": problem.problem.status, "detail": problem.detail})


async def _prepare(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await conn.execute("CREATE TABLE effects (id uuid PRIMARY KEY, key text NOT NULL)")


async def _effects(pool: asyncpg.Pool, key: str | None = None) -> int:
    async with pool.acquire() as conn:
        count = await conn.fetchval(
            "SELECT count(*) FROM effects WHERE $1::text IS NULL OR key = $1", key
        )
        assert isinstance(count, int)
        return count


def _creating(key: str, calls: list[str], delay: float = 0.0) -> Handler:
    """A handler with an effect: inserts a row and answers 201 with the new id."""

    async def handler(conn: Connection) -> tuple[int, bytes]:
        calls.append(key)
        new_id = uuid.uuid4()
        await conn.execute("INSERT INTO effects (id, key) VALUES ($1, $2)", new_id, key)
        if delay:
            await asyncio.sleep(delay)  # widen the in-flight window, not synchronisation
        return 201, orjson.dumps({"id": str(new_id)})

    return handler


async def _call(
    pool: asyncpg.Pool,
    key: str,
    handler: Handler,
    *,
    fp: bytes = FP,
    now: datetime = NOW,
) -> tuple[int, bytes]:
    async with pool.acquire() as conn, conn.transaction():
        return await _run_one(
            conn,
            scope=SCOPE,
            key=key,
            request_fingerprint=fp,
            now=now,
            ttl=TTL,
            handler=handler,
            render_problem=render,
        )


async def test_first_call_runs_the_handler_and_stores_the_answer(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    calls: list[str] = []
    status, body = await _call(pool, "k1", _creating("k1", calls))
    assert status == 201
    assert calls == ["k1"]
    assert await _effects(pool) == 1
    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT fingerprint, status_code, body, created_at FROM idempotency_keys"
            " WHERE scope = $1 AND key = $2",
            SCOPE,
            "k1",
        )
    assert row is not None
    assert (row["fingerprint"], row["status_code"], row["body"], row["created_at"]) == (
        FP,
        201,
        body,
        NOW,
    )


async def test_replay_returns_byte_identical_answer_and_runs_once(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    calls: list[str] = []
    first = await _call(pool, "k1", _creating("k1", calls))
    second = await _call(pool, "k1", _creating("k1", calls), now=NOW + timedelta(hours=5))
    third = await _call(pool, "k1", _creating("k1", calls), now=NOW + TTL - timedelta(seconds=1))
    assert first == second == third
    assert calls == ["k1"]
    assert await _effects(pool) == 1


async def test_keys_are_scoped(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    calls: list[str] = []
    await _call(pool, "k1", _creating("k1", calls))
    async with pool.acquire() as conn, conn.transaction():
        await _run_one(
            conn,
            scope="client-2",
            key="k1",
            request_fingerprint=FP,
            now=NOW,
            ttl=TTL,
            handler=_creating("k1", calls),
            render_problem=render,
        )
    assert calls == ["k1", "k1"]
    assert await _effects(pool) == 2


async def test_same_key_other_fingerprint_is_a_422(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    calls: list[str] = []
    await _call(pool, "k1", _creating("k1", calls))
    with pytest.raises(ProblemError) as caught:
        await _call(pool, "k1", _creating("k1", calls), fp=OTHER_FP)
    assert caught.value.problem is IDEMPOTENCY_REUSE
    assert caught.value.problem.status == 422
    assert calls == ["k1"]
    assert await _effects(pool) == 1


async def test_reuse_problem_type_can_be_chosen(pool: asyncpg.Pool) -> None:
    from bankrail.core.problems import CONFLICT

    await _prepare(pool)
    calls: list[str] = []
    await _call(pool, "k1", _creating("k1", calls))
    with pytest.raises(ProblemError) as caught:
        async with pool.acquire() as conn, conn.transaction():
            await _run_one(
                conn,
                scope=SCOPE,
                key="k1",
                request_fingerprint=OTHER_FP,
                now=NOW,
                ttl=TTL,
                handler=_creating("k1", calls),
                render_problem=render,
                reuse_problem=CONFLICT,
            )
    assert caught.value.problem.status == 409
    assert calls == ["k1"]


async def test_concurrent_identical_requests_take_effect_once(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    calls: list[str] = []
    start = asyncio.Event()

    async def attempt() -> tuple[int, bytes] | ProblemError:
        await start.wait()
        try:
            return await _call(pool, "same", _creating("same", calls, delay=0.05))
        except ProblemError as problem:
            return problem

    tasks = [asyncio.create_task(attempt()) for _ in range(20)]
    start.set()
    outcomes = await asyncio.gather(*tasks)

    assert calls == ["same"]
    assert await _effects(pool, "same") == 1
    answers = [o for o in outcomes if not isinstance(o, ProblemError)]
    conflicts = [o for o in outcomes if isinstance(o, ProblemError)]
    assert answers, "the request that ran must get its answer"
    assert len(set(answers)) == 1
    status, body = answers[0]
    assert status == 201
    async with pool.acquire() as conn:
        effect_id = await conn.fetchval("SELECT id FROM effects")
    assert orjson.loads(body) == {"id": str(effect_id)}
    for conflict in conflicts:
        assert conflict.problem is IDEMPOTENCY_CONCURRENCY
        assert conflict.problem.status == 409
        assert conflict.problem.anchor == "idempotency-key-concurrency-conflict"
    # Once the first request has finished, every retry replays it.
    assert await _call(pool, "same", _creating("same", calls)) == (status, body)
    assert calls == ["same"]


async def test_after_the_ttl_the_key_proceeds_again(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    calls: list[str] = []
    first = await _call(pool, "k1", _creating("k1", calls))
    later = NOW + TTL
    again = await _call(pool, "k1", _creating("k1", calls), fp=OTHER_FP, now=later)
    assert again != first
    assert calls == ["k1", "k1"]
    assert await _effects(pool) == 2
    # The new answer is the one now stored and replayed, valid from its own time.
    replay = await _call(
        pool, "k1", _creating("k1", calls), fp=OTHER_FP, now=later + timedelta(hours=5)
    )
    assert replay == again
    assert calls == ["k1", "k1"]


async def test_a_4xx_problem_is_stored_and_its_partial_writes_rolled_back(
    pool: asyncpg.Pool,
) -> None:
    await _prepare(pool)
    calls: list[str] = []

    async def not_found(conn: Connection) -> tuple[int, bytes]:
        calls.append("404")
        await conn.execute("INSERT INTO effects (id, key) VALUES ($1, 'partial')", uuid.uuid4())
        raise NotFound("Payment xyz not found.")

    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("INSERT INTO effects (id, key) VALUES ($1, 'caller')", uuid.uuid4())
        status, body = await _run_one(
            conn,
            scope=SCOPE,
            key="k404",
            request_fingerprint=FP,
            now=NOW,
            ttl=TTL,
            handler=not_found,
            render_problem=render,
        )
    assert status == 404
    assert orjson.loads(body) == {"status": 404, "detail": "Payment xyz not found."}
    assert await _effects(pool, "partial") == 0
    assert await _effects(pool, "caller") == 1  # the caller's own writes are untouched
    replay = await _call(pool, "k404", not_found)
    assert replay == (status, body)
    assert calls == ["404"]


async def test_client_errors_can_be_left_unstored(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    calls: list[str] = []

    async def not_found(conn: Connection) -> tuple[int, bytes]:
        calls.append("404")
        raise NotFound("not yet")

    with pytest.raises(ProblemError) as caught:
        async with pool.acquire() as conn, conn.transaction():
            await _run_one(
                conn,
                scope=SCOPE,
                key="k",
                request_fingerprint=FP,
                now=NOW,
                ttl=TTL,
                handler=not_found,
                render_problem=render,
                store_client_errors=False,
            )
    assert caught.value.problem.status == 404
    status, _ = await _call(pool, "k", _creating("k", calls))
    assert status == 201
    assert calls == ["404", "k"]


async def test_a_5xx_problem_is_not_stored(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    calls: list[str] = []

    async def broken(conn: Connection) -> tuple[int, bytes]:
        calls.append("500")
        raise ProblemError(UNKNOWN_ERROR, "boom")

    with pytest.raises(ProblemError):
        await _call(pool, "k500", broken)
    status, _ = await _call(pool, "k500", _creating("k500", calls))
    assert status == 201
    assert calls == ["500", "k500"]


async def test_an_unexpected_error_stores_nothing_and_frees_the_key(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    calls: list[str] = []

    async def crashing(conn: Connection) -> tuple[int, bytes]:
        calls.append("crash")
        await conn.execute("INSERT INTO effects (id, key) VALUES ($1, 'crash')", uuid.uuid4())
        raise RuntimeError("connection lost")

    with pytest.raises(RuntimeError, match="connection lost"):
        await _call(pool, "kx", crashing)
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM idempotency_keys") == 0
    assert await _effects(pool) == 0
    status, _ = await _call(pool, "kx", _creating("kx", calls))
    assert status == 201
    assert calls == ["crash", "kx"]
    assert await _effects(pool, "kx") == 1


async def test_a_request_that_dies_in_flight_frees_the_key_at_once(pool: asyncpg.Pool) -> None:
    await _prepare(pool)
    calls: list[str] = []
    entered = asyncio.Event()

    async def hanging(conn: Connection) -> tuple[int, bytes]:
        calls.append("hang")
        await conn.execute("INSERT INTO effects (id, key) VALUES ($1, 'hang')", uuid.uuid4())
        entered.set()
        await conn.execute("SELECT pg_sleep(60)")
        raise AssertionError("unreachable")

    async with pool.acquire() as conn:
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        task = asyncio.create_task(_call_on(conn, "kd", hanging))
        await entered.wait()
        with pytest.raises(ProblemError) as caught:
            await _call(pool, "kd", _creating("kd", calls))
        assert caught.value.problem is IDEMPOTENCY_CONCURRENCY
        # The request dies before commit: its connection is lost.
        async with pool.acquire() as admin:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError)):
            await task
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:  # the server releases a dead backend's locks promptly; poll for it
        try:
            status, _ = await _call(pool, "kd", _creating("kd", calls))
            break
        except ProblemError as problem:
            refused = problem
        assert refused.problem is IDEMPOTENCY_CONCURRENCY
        assert loop.time() < deadline, "the key stayed locked after its holder died"
        await asyncio.sleep(0.01)
    assert status == 201
    assert calls == ["hang", "kd"]
    assert await _effects(pool, "hang") == 0
    assert await _effects(pool, "kd") == 1


async def _call_on(conn: Connection, key: str, handler: Handler) -> tuple[int, bytes]:
    async with conn.transaction():
        return await _run_one(
            conn,
            scope=SCOPE,
            key=key,
            request_fingerprint=FP,
            now=NOW,
            ttl=TTL,
            handler=handler,
            render_problem=render,
        )
