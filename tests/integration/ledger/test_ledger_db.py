"""Integration tests for bankrail.ledger.service on real PostgreSQL."""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid
from datetime import UTC, datetime

import asyncpg
import pytest

from bankrail.ledger.models import InsufficientFunds, Posting, UnbalancedTransaction, transfer
from bankrail.ledger.service import check_ledger, ensure_account, post

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def _balance(conn: asyncpg.Connection, account_id: int) -> int:
    value = await conn.fetchval("SELECT balance FROM ledger_accounts WHERE id = $1", account_id)
    assert isinstance(value, int)
    return value


async def _counts(conn: asyncpg.Connection) -> tuple[int, int]:
    transactions = await conn.fetchval("SELECT count(*) FROM ledger_transactions")
    postings = await conn.fetchval("SELECT count(*) FROM ledger_postings")
    return transactions, postings


async def test_ensure_account_is_idempotent(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        first = await ensure_account(conn, "test:a", "GBP", allow_negative=False)
        again = await ensure_account(conn, "test:a", "GBP", allow_negative=False)
        other = await ensure_account(conn, "test:b", "GBP", allow_negative=False)
        assert first == again
        assert other != first
        assert await conn.fetchval("SELECT count(*) FROM ledger_accounts") == 2


async def test_post_updates_balances_and_books_stay_clean(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        world = await ensure_account(conn, "clearing:test:GBP", "GBP", allow_negative=True)
        alice = await ensure_account(conn, "test:alice", "GBP", allow_negative=False)
        bob = await ensure_account(conn, "test:bob", "GBP", allow_negative=False)
        reference = uuid.uuid4()
        async with conn.transaction():
            tx1 = await post(
                conn,
                kind="topup",
                reference_id=reference,
                postings=transfer(world, alice, 10_000),
                now=NOW,
            )
        async with conn.transaction():
            await post(
                conn,
                kind="split",
                reference_id=None,
                postings=[Posting(alice, -3_000), Posting(bob, 2_000), Posting(world, 1_000)],
                now=NOW,
            )
        assert await _balance(conn, world) == -9_000
        assert await _balance(conn, alice) == 7_000
        assert await _balance(conn, bob) == 2_000
        assert await check_ledger(conn) == []
        row = await conn.fetchrow(
            "SELECT kind, reference_id, created_at FROM ledger_transactions WHERE id = $1", tx1
        )
        assert row is not None
        assert (row["kind"], row["reference_id"], row["created_at"]) == ("topup", reference, NOW)
        postings = await conn.fetch(
            "SELECT account_id, amount FROM ledger_postings WHERE transaction_id = $1"
            " ORDER BY amount",
            tx1,
        )
        assert [(p["account_id"], p["amount"]) for p in postings] == [
            (world, -10_000),
            (alice, 10_000),
        ]


async def test_post_to_the_same_account_twice_in_one_transaction(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        world = await ensure_account(conn, "clearing:test:GBP", "GBP", allow_negative=True)
        alice = await ensure_account(conn, "test:alice", "GBP", allow_negative=False)
        async with conn.transaction():
            await post(
                conn,
                kind="t",
                reference_id=None,
                postings=[Posting(world, -300), Posting(alice, 100), Posting(alice, 200)],
                now=NOW,
            )
        assert await _balance(conn, alice) == 300
        assert await check_ledger(conn) == []


async def test_unbalanced_postings_are_refused_before_writing(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        a = await ensure_account(conn, "test:a", "GBP", allow_negative=True)
        b = await ensure_account(conn, "test:b", "GBP", allow_negative=True)
        with pytest.raises(UnbalancedTransaction):
            await post(
                conn,
                kind="t",
                reference_id=None,
                postings=[Posting(a, -100), Posting(b, 99)],
                now=NOW,
            )
        assert await _counts(conn) == (0, 0)
        assert await _balance(conn, a) == 0


async def test_insufficient_funds_writes_nothing(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        world = await ensure_account(conn, "clearing:test:GBP", "GBP", allow_negative=True)
        alice = await ensure_account(conn, "test:alice", "GBP", allow_negative=False)
        bob = await ensure_account(conn, "test:bob", "GBP", allow_negative=False)
        async with conn.transaction():
            await post(
                conn, kind="topup", reference_id=None, postings=transfer(world, alice, 500), now=NOW
            )
        before = await _counts(conn)
        async with conn.transaction():
            with pytest.raises(InsufficientFunds):
                async with conn.transaction():  # savepoint around the failing post
                    await post(
                        conn,
                        kind="pay",
                        reference_id=None,
                        postings=transfer(alice, bob, 501),
                        now=NOW,
                    )
            # The outer transaction is still usable and saw no partial write.
            assert await _counts(conn) == before
        assert await _counts(conn) == before
        assert await _balance(conn, alice) == 500
        assert await _balance(conn, bob) == 0
        # Exactly the available amount is fine.
        async with conn.transaction():
            await post(
                conn, kind="pay", reference_id=None, postings=transfer(alice, bob, 500), now=NOW
            )
        assert await _balance(conn, alice) == 0
        assert await check_ledger(conn) == []


async def test_check_ledger_detects_a_tampered_balance(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        world = await ensure_account(conn, "clearing:test:GBP", "GBP", allow_negative=True)
        alice = await ensure_account(conn, "test:alice", "GBP", allow_negative=False)
        async with conn.transaction():
            await post(
                conn,
                kind="topup",
                reference_id=None,
                postings=transfer(world, alice, 1_000),
                now=NOW,
            )
        assert await check_ledger(conn) == []
        await conn.execute("UPDATE ledger_accounts SET balance = balance + 1 WHERE id = $1", alice)
        violations = await check_ledger(conn)
        assert violations == [
            {
                "rule": "balance_equals_sum_of_postings",
                "account": "test:alice",
                "balance": 1_001,
                "sum_of_postings": 1_000,
            }
        ]


async def test_check_ledger_detects_an_unbalanced_transaction(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        world = await ensure_account(conn, "clearing:test:GBP", "GBP", allow_negative=True)
        alice = await ensure_account(conn, "test:alice", "GBP", allow_negative=False)
        bad = uuid.uuid4()
        async with conn.transaction():
            await conn.execute(
                "INSERT INTO ledger_transactions (id, kind, created_at) VALUES ($1, 'raw', $2)",
                bad,
                NOW,
            )
            await conn.execute(
                "INSERT INTO ledger_postings (transaction_id, account_id, amount, created_at)"
                " VALUES ($1, $2, -100, $4), ($1, $3, 90, $4)",
                bad,
                world,
                alice,
                NOW,
            )
            await conn.execute("UPDATE ledger_accounts SET balance = -100 WHERE id = $1", world)
            await conn.execute("UPDATE ledger_accounts SET balance = 90 WHERE id = $1", alice)
        violations = await check_ledger(conn)
        assert violations == [
            {"rule": "transaction_postings_sum_to_zero", "transaction_id": str(bad), "sum": -10}
        ]


async def test_check_ledger_detects_a_transaction_without_postings(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        lonely = uuid.uuid4()
        await conn.execute(
            "INSERT INTO ledger_transactions (id, kind, created_at) VALUES ($1, 'raw', $2)",
            lonely,
            NOW,
        )
        assert await check_ledger(conn) == [
            {"rule": "transaction_has_postings", "transaction_id": str(lonely)}
        ]


async def test_check_ledger_detects_a_cross_currency_transaction(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        gbp = await ensure_account(conn, "test:gbp", "GBP", allow_negative=True)
        eur = await ensure_account(conn, "test:eur", "EUR", allow_negative=True)
        mixed = uuid.uuid4()
        await conn.execute(
            "INSERT INTO ledger_transactions (id, kind, created_at) VALUES ($1, 'raw', $2)",
            mixed,
            NOW,
        )
        await conn.execute(
            "INSERT INTO ledger_postings (transaction_id, account_id, amount, created_at)"
            " VALUES ($1, $2, -100, $4), ($1, $3, 100, $4)",
            mixed,
            gbp,
            eur,
            NOW,
        )
        await conn.execute("UPDATE ledger_accounts SET balance = -100 WHERE id = $1", gbp)
        await conn.execute("UPDATE ledger_accounts SET balance = 100 WHERE id = $1", eur)
        assert await check_ledger(conn) == [
            {"rule": "single_currency_transaction", "transaction_id": str(mixed)}
        ]


async def test_post_refuses_postings_across_currencies(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        gbp = await ensure_account(conn, "test:gbp", "GBP", allow_negative=True)
        eur = await ensure_account(conn, "test:eur", "EUR", allow_negative=True)
        async with conn.transaction():
            with pytest.raises(UnbalancedTransaction):
                async with conn.transaction():
                    await post(
                        conn,
                        kind="fx",
                        reference_id=None,
                        postings=transfer(gbp, eur, 100),
                        now=NOW,
                    )
        assert await check_ledger(conn) == []


async def _wait_until_blocked_on_a_lock(conn: asyncpg.Connection, pid: int) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while asyncio.get_running_loop().time() < deadline:
        waiting = await conn.fetchval(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid
        )
        if waiting:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"backend {pid} never waited for a lock")


async def test_post_locks_accounts_in_id_order(pool: asyncpg.Pool) -> None:
    """While post() waits for the higher-id account, it already holds the lower-id one.

    That is what "lock and update accounts in id order" means, and what makes concurrent
    postings deadlock-free whatever accounts they touch.
    """
    async with pool.acquire() as setup:
        ids = [
            await ensure_account(setup, f"test:{i}", "GBP", allow_negative=True) for i in range(6)
        ]
    out_of_order: list[tuple[int, int]] = []
    async with pool.acquire() as blocker, pool.acquire() as poster, pool.acquire() as probe:
        poster_pid = await poster.fetchval("SELECT pg_backend_pid()")
        for lo, hi in itertools.combinations(sorted(ids), 2):
            for source, destination in ((lo, hi), (hi, lo)):
                blocker_tx = blocker.transaction()
                await blocker_tx.start()
                await blocker.execute("SELECT 1 FROM ledger_accounts WHERE id = $1 FOR UPDATE", hi)

                async def posting(source: int = source, destination: int = destination) -> None:
                    async with poster.transaction():
                        await post(
                            poster,
                            kind="t",
                            reference_id=None,
                            postings=transfer(source, destination, 1),
                            now=NOW,
                        )

                task = asyncio.create_task(posting())
                try:
                    await _wait_until_blocked_on_a_lock(probe, poster_pid)
                    try:
                        async with probe.transaction():
                            await probe.execute(
                                "SELECT 1 FROM ledger_accounts WHERE id = $1 FOR UPDATE NOWAIT", lo
                            )
                        out_of_order.append((source, destination))
                    except asyncpg.LockNotAvailableError:
                        pass  # held by the poster, as it should be
                finally:
                    await blocker_tx.rollback()
                    await task
    assert out_of_order == []


async def test_concurrent_posts_over_overlapping_accounts_never_deadlock(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        ids = [
            await ensure_account(conn, f"test:{i}", "GBP", allow_negative=True) for i in range(5)
        ]
        # Should a deadlock happen, detect it quickly (only a superuser may set this).
        superuser = await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = user")
    deadlocks = 0

    async def worker(seed: int) -> None:
        nonlocal deadlocks
        rng = random.Random(seed)
        for _ in range(10):
            accounts = rng.sample(ids, 3)
            async with pool.acquire() as conn:
                try:
                    async with conn.transaction():
                        if superuser:
                            await conn.execute("SET LOCAL deadlock_timeout = '20ms'")
                        await post(
                            conn,
                            kind="t",
                            reference_id=None,
                            postings=[
                                Posting(accounts[0], -7),
                                Posting(accounts[1], 3),
                                Posting(accounts[2], 4),
                            ],
                            now=NOW,
                        )
                except asyncpg.DeadlockDetectedError:
                    deadlocks += 1  # the victim rolled back entirely

    await asyncio.gather(*(worker(seed) for seed in range(10)))
    assert deadlocks == 0
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM ledger_transactions") == 100
        assert await conn.fetchval("SELECT sum(balance) FROM ledger_accounts") == 0
        assert await check_ledger(conn) == []


_POST_MANY = (
    "SELECT bankrail_post_transactions($1::uuid[], $2::text[], $3::uuid[], $4::timestamptz[],"
    " $5::uuid[], $6::bigint[], $7::bigint[])"
)


async def test_the_posting_primitive_writes_a_batch_of_transactions(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        world = await ensure_account(conn, "clearing:test:GBP", "GBP", allow_negative=True)
        alice = await ensure_account(conn, "test:alice", "GBP", allow_negative=False)
        bob = await ensure_account(conn, "test:bob", "GBP", allow_negative=False)
        first, second = uuid.uuid4(), uuid.uuid4()
        later = datetime(2026, 3, 1, 12, 5, tzinfo=UTC)
        async with conn.transaction():
            await conn.execute(
                _POST_MANY,
                [first, second],
                ["topup", "split"],
                [None, None],
                [NOW, later],
                [first, first, second, second, second],
                [world, alice, alice, bob, world],
                [-700, 700, -300, 200, 100],
            )
        assert await _balance(conn, alice) == 400
        assert await _balance(conn, bob) == 200
        assert await _balance(conn, world) == -600
        times = await conn.fetch(
            "SELECT DISTINCT transaction_id, created_at FROM ledger_postings ORDER BY created_at"
        )
        assert [(r["transaction_id"], r["created_at"]) for r in times] == [
            (first, NOW),
            (second, later),
        ]
        assert await check_ledger(conn) == []


@pytest.mark.parametrize(
    ("amounts", "sqlstate"),
    [
        ([-700, 700, -300, 200], "BRL03"),  # the second transaction does not sum to zero
        ([-700, 700, -300, 300], None),
    ],
)
async def test_the_posting_primitive_refuses_a_batch_with_one_unbalanced_transaction(
    pool: asyncpg.Pool, amounts: list[int], sqlstate: str | None
) -> None:
    async with pool.acquire() as conn:
        world = await ensure_account(conn, "clearing:test:GBP", "GBP", allow_negative=True)
        alice = await ensure_account(conn, "test:alice", "GBP", allow_negative=False)
        first, second = uuid.uuid4(), uuid.uuid4()
        arguments = (
            [first, second],
            ["topup", "split"],
            [None, None],
            [NOW, NOW],
            [first, first, second, second],
            [world, alice, alice, world],
            amounts,
        )
        if sqlstate is None:
            await conn.execute(_POST_MANY, *arguments)
            assert await _counts(conn) == (2, 4)
            return
        with pytest.raises(asyncpg.PostgresError) as raised:
            await conn.execute(_POST_MANY, *arguments)
        assert raised.value.sqlstate == sqlstate
        assert await _counts(conn) == (0, 0)
        assert await _balance(conn, alice) == 0


async def test_the_posting_primitive_refuses_a_transaction_without_postings(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        world = await ensure_account(conn, "clearing:test:GBP", "GBP", allow_negative=True)
        alice = await ensure_account(conn, "test:alice", "GBP", allow_negative=False)
        first, empty = uuid.uuid4(), uuid.uuid4()
        with pytest.raises(asyncpg.PostgresError) as raised:
            await conn.execute(
                _POST_MANY,
                [first, empty],
                ["topup", "topup"],
                [None, None],
                [NOW, NOW],
                [first, first],
                [world, alice],
                [-100, 100],
            )
        assert raised.value.sqlstate == "BRL03"
        assert await _counts(conn) == (0, 0)
