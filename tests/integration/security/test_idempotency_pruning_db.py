"""Integration tests for deleting expired idempotency answers and forgetting accepted
signatures (security.idempotency.delete_expired and delete_forgotten_signatures,
jobs.pruning.Pruner, migrations 0009 and 0018)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import orjson

from bankrail.config import Settings
from bankrail.core.clock import ServiceClock
from bankrail.jobs.pruning import Pruner, Retention
from bankrail.security.idempotency import (
    DELETE_EXPIRED_SQL,
    Decision,
    StoredAnswer,
    decide,
    delete_expired,
    delete_forgotten_signatures,
    fingerprint,
)
from bankrail.worker import retentions

TTL = timedelta(hours=6)
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FP = fingerprint("POST", "/v3/payouts", b"{}")


async def _store(pool: asyncpg.Pool, scope: str, key: str, created_at: datetime) -> None:
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO idempotency_keys (scope, key, fingerprint, status_code, body,"
            " created_at) VALUES ($1, $2, $3, 202, $4, $5)",
            scope,
            key,
            FP,
            orjson.dumps({"id": key}),
            created_at,
        )


async def _kept(pool: asyncpg.Pool) -> set[tuple[str, str]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT scope, key FROM idempotency_keys")
    return {(row["scope"], row["key"]) for row in rows}


async def test_deletes_exactly_the_answers_a_request_would_no_longer_replay(
    pool: asyncpg.Pool,
) -> None:
    ages = {
        "long-gone": timedelta(days=30),
        "just-expired": TTL,
        "about-to-expire": TTL - timedelta(microseconds=1),
        "fresh": timedelta(0),
    }
    scopes = [
        "v3:client-1",
        "sandbox:bank-transfers",
        "console:sandbox-bank-transfer",
        "v1:merchant-1",
        "legacy-deposits:merchant-1",
    ]
    for scope in scopes:
        for key, age in ages.items():
            await _store(pool, scope, key, NOW - age)

    async with pool.acquire() as conn:
        deleted = await delete_expired(conn, expired_before=NOW - TTL, limit=100)

    kept = await _kept(pool)
    for scope in scopes[:3]:
        for key, age in ages.items():
            stored = StoredAnswer(FP, 202, b"", NOW - age)
            replayable = decide(stored, FP, NOW, TTL) is Decision.REPLAY
            assert ((scope, key) in kept) == replayable, (scope, key)
    # A v1 transaction_id and a legacy deposit_id are keys for good, however old.
    assert {(scope, key) for scope in scopes[3:] for key in ages} <= kept
    assert deleted == 6
    assert len(kept) == len(scopes) * len(ages) - 6


async def test_deletes_the_oldest_first_and_no_more_than_the_limit(pool: asyncpg.Pool) -> None:
    for hours in (7, 9, 8, 30):
        await _store(pool, "v3:client-1", f"{hours}h", NOW - timedelta(hours=hours))

    async with pool.acquire() as conn:
        assert await delete_expired(conn, expired_before=NOW - TTL, limit=2) == 2

    assert await _kept(pool) == {("v3:client-1", "7h"), ("v3:client-1", "8h")}


async def test_finds_expired_keys_through_their_own_index(pool: asyncpg.Pool) -> None:
    # The partial index serves only a query whose WHERE clause implies its predicate; without
    # it each batch would read every key that never expires (all of v1's) again.
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        await conn.execute("SET LOCAL enable_bitmapscan = off")
        plan = await conn.fetch("EXPLAIN " + DELETE_EXPIRED_SQL, NOW - TTL, 10)
    text = "\n".join(row[0] for row in plan)
    assert "idempotency_keys_expiring" in text, text


async def test_skips_a_key_that_a_request_holds_rather_than_waiting(pool: asyncpg.Pool) -> None:
    await _store(pool, "v3:client-1", "in-use", NOW - timedelta(hours=7))
    await _store(pool, "v3:client-1", "idle", NOW - timedelta(hours=8))
    async with pool.acquire() as holder, holder.transaction():
        # A request storing its new answer under the expired key, not yet committed.
        await holder.execute(
            "UPDATE idempotency_keys SET created_at = $1 WHERE key = 'in-use'", NOW
        )
        async with pool.acquire() as conn:
            deleted = await asyncio.wait_for(
                delete_expired(conn, expired_before=NOW - TTL, limit=10), timeout=10
            )
        assert deleted == 1
    # The request's answer, committed, is now fresh, and stays.
    async with pool.acquire() as conn:
        assert await delete_expired(conn, expired_before=NOW - TTL, limit=10) == 0
    assert await _kept(pool) == {("v3:client-1", "in-use")}


async def test_pruner_works_through_a_backlog_then_waits_for_its_interval(
    pool: asyncpg.Pool,
) -> None:
    clock = ServiceClock()
    now = clock.now()
    for n in range(5):
        await _store(pool, "v3:client-1", f"old-{n}", now - TTL - timedelta(minutes=n + 1))
    await _store(pool, "v3:client-1", "fresh", now)
    pruner = _pruner(pool, clock, interval=3600, batch=2)

    assert [await pruner.run() for _ in range(4)] == [2, 2, 1, 0]
    assert await _kept(pool) == {("v3:client-1", "fresh")}

    # Not due again until its interval has passed, whatever has expired meanwhile.
    await _store(pool, "v3:client-1", "late", now - TTL - timedelta(hours=1))
    assert await pruner.run() == 0
    assert ("v3:client-1", "late") in await _kept(pool)


async def test_pruner_reads_validity_in_service_time(pool: asyncpg.Pool) -> None:
    real_now = datetime.now(UTC)
    await _store(pool, "v3:client-1", "k", real_now - timedelta(hours=1))
    assert await _pruner(pool, ServiceClock(), interval=0).run() == 0

    # The sandbox clock advanced by six hours: the key has expired in service time.
    advanced = ServiceClock(offset=timedelta(hours=5, minutes=1))
    assert await _pruner(pool, advanced, interval=0).run() == 1
    assert await _kept(pool) == set()


def _pruner(
    pool: asyncpg.Pool, clock: ServiceClock, *, interval: float, batch: int = 1000
) -> Pruner:
    keys = Retention("expired idempotency keys", TTL, delete_expired)
    return Pruner(pool, clock, [keys], interval=interval, batch=batch)


async def test_forgets_the_signatures_accepted_before_the_replay_window(
    pool: asyncpg.Pool,
) -> None:
    window = timedelta(days=30)
    ages = {b"a" * 32: window + timedelta(days=1), b"b" * 32: window, b"c" * 32: window / 2}
    async with pool.acquire() as conn:
        for digest, age in ages.items():
            await conn.execute(
                "INSERT INTO accepted_signatures (digest, accepted_at) VALUES ($1, $2)",
                digest,
                NOW - age,
            )
        assert await delete_forgotten_signatures(conn, NOW - window, limit=1) == 1
        assert await delete_forgotten_signatures(conn, NOW - window, limit=100) == 1
        kept = await conn.fetch("SELECT digest FROM accepted_signatures")
    assert [row["digest"] for row in kept] == [b"c" * 32]


def test_the_worker_forgets_signatures_after_the_configured_window() -> None:
    settings = Settings(signature_replay_window_seconds=7 * 86400)
    [forgetting] = [r for r in retentions(settings) if r.delete is delete_forgotten_signatures]
    assert forgetting.keep == timedelta(days=7)
    assert Settings().signature_replay_window_seconds == 30 * 86400
