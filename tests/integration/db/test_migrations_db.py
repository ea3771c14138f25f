"""Integration tests for bankrail.db.migrations on real PostgreSQL."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest
import pytest_asyncio

from bankrail.db.migrations import (
    RETIRED_FUNCTIONS,
    SchemaTooNew,
    apply_functions,
    available_functions,
    available_migrations,
    functions_digest,
    migrate,
    pending_migrations,
    unknown_migrations,
)
from bankrail.payouts.verification import AUTHORIZATION_WINDOW
from support.accounts import funded_account
from support.databases import drop_database, fresh_database

ALL_VERSIONS = [version for version, _ in available_migrations()]


@pytest_asyncio.fixture(loop_scope="session")
async def empty_dsn(pg_server: str) -> AsyncIterator[str]:
    dsn = await fresh_database(pg_server, migrated=False)
    yield dsn
    await drop_database(pg_server, dsn)


def test_migrations_are_shipped_in_order() -> None:
    assert ALL_VERSIONS
    assert sorted(ALL_VERSIONS) == ALL_VERSIONS
    assert ALL_VERSIONS[0] == "0001_foundation"


async def test_migrate_applies_everything_once(empty_dsn: str) -> None:
    conn = await asyncpg.connect(empty_dsn)
    try:
        assert await pending_migrations(conn) == ALL_VERSIONS
        assert await migrate(conn) == ALL_VERSIONS
        assert await pending_migrations(conn) == []
        assert await migrate(conn) == []
        recorded = [
            r["version"]
            for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
        ]
        assert recorded == ALL_VERSIONS
        # The schema is really there, seeded rows included.
        assert await conn.fetchval("SELECT offset_us FROM service_clock WHERE id = 1") == 0
        assert await conn.fetchval("SELECT to_regclass('ledger_accounts') IS NOT NULL")
        # The session advisory lock was released.
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM pg_locks"
                " WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
            )
            == 0
        )
    finally:
        await conn.close()


async def test_migrating_again_from_a_new_connection_applies_nothing(empty_dsn: str) -> None:
    first = await asyncpg.connect(empty_dsn)
    try:
        assert await migrate(first) == ALL_VERSIONS
    finally:
        await first.close()
    second = await asyncpg.connect(empty_dsn)
    try:
        assert await migrate(second) == []
    finally:
        await second.close()


async def test_concurrent_migrations_do_not_fail_and_apply_once(empty_dsn: str) -> None:
    conns = [await asyncpg.connect(empty_dsn) for _ in range(3)]
    try:
        results = await asyncio.gather(*(migrate(c) for c in conns))
        assert sorted(results, key=len) == [[], [], ALL_VERSIONS]
        rows = await conns[0].fetch("SELECT version FROM schema_migrations")
        assert sorted(r["version"] for r in rows) == ALL_VERSIONS
        assert await conns[0].fetchval("SELECT count(*) FROM service_clock") == 1
    finally:
        for conn in conns:
            await conn.close()


async def test_migrated_test_database_is_up_to_date(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        assert await pending_migrations(conn) == []
        assert await migrate(conn) == []


async def test_a_database_migrated_by_a_newer_release_is_refused(empty_dsn: str) -> None:
    conn = await asyncpg.connect(empty_dsn)
    try:
        await migrate(conn)
        await conn.execute("INSERT INTO schema_migrations (version) VALUES ('9999_future')")
        with pytest.raises(SchemaTooNew, match="9999_future"):
            await migrate(conn)
        assert await unknown_migrations(conn) == ["9999_future"]
    finally:
        await conn.close()


async def _function_names(conn: asyncpg.Connection) -> list[str]:
    """The name of every Bankrail function of the database, once per definition (an
    overload left beside its replacement appears twice)."""
    rows = await conn.fetch(
        "SELECT proname FROM pg_proc WHERE proname LIKE 'bankrail\\_%'"
        " AND pronamespace = 'public'::regnamespace ORDER BY proname"
    )
    return [r["proname"] for r in rows]


async def test_functions_are_the_current_files_applied_once(empty_dsn: str) -> None:
    conn = await asyncpg.connect(empty_dsn)
    try:
        await migrate(conn)
        defined = {
            name
            for _, sql in available_functions()
            for name in re.findall(r"CREATE OR REPLACE FUNCTION (\w+)\(", sql)
        }
        assert defined
        # Every function of the database is one of the files', defined once (no overload
        # with an older argument list is left), and the old posting function is gone; a
        # migration may have created a function the release before still calls (retired).
        retired = {signature.split("(")[0] for signature in RETIRED_FUNCTIONS}
        assert not retired & defined
        names = await _function_names(conn)
        assert [n for n in names if n not in retired] == sorted(defined)
        assert (
            await conn.fetchval("SELECT sha256 FROM schema_functions WHERE id = 1")
            == functions_digest()
        )
        # Unchanged files are not applied again; changed ones are.
        assert await apply_functions(conn) is False
        await conn.execute("UPDATE schema_functions SET sha256 = 'older files'")
        await conn.execute("ALTER FUNCTION bankrail_post_transactions RESET ALL")
        assert await apply_functions(conn) is True
        config = await conn.fetchval(
            "SELECT proconfig FROM pg_proc WHERE proname = 'bankrail_post_transactions'"
        )
        assert "plan_cache_mode=force_generic_plan" in config
        assert "enable_seqscan=off" in config
    finally:
        await conn.close()


async def test_v3_keys_become_the_merchants_keeping_the_newest_of_a_clash(empty_dsn: str) -> None:
    # Migration 0018: v3 Idempotency-Keys were each client's ('v3:<client id>'); they are
    # the merchant's now. Two clients of one merchant that stored one key keep the newest.
    conn = await asyncpg.connect(empty_dsn)
    try:
        migrations = dict(available_migrations())
        for version, sql in migrations.items():
            if version < "0018":
                await conn.execute(sql)
        merchant = uuid.uuid4()
        await conn.execute(
            "INSERT INTO merchants (id, name, created_at) VALUES ($1, 'm', now())", merchant
        )
        for client in ("c1", "c2"):
            await conn.execute(
                "INSERT INTO api_clients (client_id, merchant_id, secret_hash, scopes,"
                " created_at) VALUES ($1, $2, '', '{}', now())",
                client,
                merchant,
            )
        keys = [
            ("v3:c1", "shared", 1),
            ("v3:c2", "shared", 2),
            ("v3:c1", "own", 3),
            (f"v1:{merchant}", "tx", 4),
        ]
        for scope, key, hour in keys:
            await conn.execute(
                "INSERT INTO idempotency_keys (scope, key, fingerprint, status_code, body,"
                " created_at) VALUES ($1, $2, '', 202, $3, $4)",
                scope,
                key,
                str(hour).encode(),
                datetime(2026, 3, 1, hour, tzinfo=UTC),
            )
        await conn.execute(migrations["0018_accepted_signatures"])
        rows = await conn.fetch("SELECT scope, key, body FROM idempotency_keys ORDER BY body")
    finally:
        await conn.close()
    assert [(r["scope"], r["key"], r["body"]) for r in rows] == [
        (f"v3:{merchant}", "shared", b"2"),
        (f"v3:{merchant}", "own", b"3"),
        (f"v1:{merchant}", "tx", b"4"),
    ]


async def test_waiting_verified_payouts_of_an_older_release_get_their_expiry(
    pool: asyncpg.Pool,
) -> None:
    # Migration 0031: a verified payout accepted before its authorisation window was enforced
    # has no expiry job; the migration gives one to each payout still waiting for its payee,
    # due 7 days after its creation, and never a second one.
    created = datetime(2026, 3, 1, 12, tzinfo=UTC)
    account = await funded_account(pool, created)
    payouts = {stage: uuid.uuid4() for stage in ("authorization_required", "authorizing")}
    executed = uuid.uuid4()
    async with pool.acquire() as conn:
        for stage, payout_id in [*payouts.items(), ("executed", executed)]:
            await conn.execute(
                "INSERT INTO payouts (id, api, merchant_id, merchant_account_id,"
                " amount_in_minor, currency, beneficiary, beneficiary_name, reference,"
                " scheme_id, stage, created_at) VALUES ($1, 'v3', $2, $3, 100, 'GBP',"
                " '{\"type\": \"user_determined\"}', 'Jane Doe', 'ref', 'faster_payments_service',"
                " $4, $5)",
                payout_id,
                account.merchant_id,
                account.id,
                stage,
                created,
            )
        ids = [str(p) for p in [*payouts.values(), executed]]
        migration = dict(available_migrations())["0031_expire_waiting_verified_payouts"]
        try:
            await conn.execute(migration)
            await conn.execute(migration)
            jobs = await conn.fetch(
                "SELECT payload->>'payout_id' AS payout_id, run_at FROM jobs"
                " WHERE kind = 'payout.expire_authorization' AND payload->>'payout_id' = ANY($1)",
                ids,
            )
        finally:
            await conn.execute("DELETE FROM jobs WHERE payload->>'payout_id' = ANY($1)", ids)
            await conn.execute(
                "DELETE FROM payouts WHERE id = ANY($1)", [*payouts.values(), executed]
            )
    assert sorted((j["payout_id"], j["run_at"]) for j in jobs) == sorted(
        (str(p), created + AUTHORIZATION_WINDOW) for p in payouts.values()
    )
