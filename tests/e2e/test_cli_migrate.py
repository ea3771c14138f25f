"""`bankrail migrate` applies the migrations once; `migrate`, `serve` and `worker` refuse,
with status 2 and the reason, a database that a newer release has migrated
(docs/operations.md, "Upgrades and restarts")."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from bankrail.db.migrations import available_migrations
from support.databases import drop_database, fresh_database, run
from support.server import free_port


@pytest.fixture
def empty_dsn(pg_server: str) -> Iterator[str]:
    dsn = str(run(fresh_database(pg_server, migrated=False)))
    yield dsn
    run(drop_database(pg_server, dsn))


def _bankrail(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": dsn, "BANKRAIL_PORT": str(free_port())}
    return subprocess.run(
        [sys.executable, "-m", "bankrail", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_migrate_applies_once_and_every_command_refuses_a_newer_schema(empty_dsn: str) -> None:
    first = _bankrail(empty_dsn, "migrate")
    assert first.returncode == 0, first.stderr
    versions = [version for version, _ in available_migrations()]
    assert first.stdout.strip() == f"applied {', '.join(versions)}"
    again = _bankrail(empty_dsn, "migrate")
    assert (again.returncode, again.stdout.strip()) == (0, "the schema is up to date")

    # A newer release ran `bankrail migrate`: this one must not run on its schema.
    run(_add_version(empty_dsn, "9999_from_a_newer_release"))
    for command in (["migrate"], ["worker"], ["serve", "--workers", "1"]):
        refused = _bankrail(empty_dsn, *command)
        assert refused.returncode == 2, (command, refused.stdout, refused.stderr)
        assert "9999_from_a_newer_release" in refused.stderr, refused.stderr
        assert "newer than this release" in refused.stderr, refused.stderr


async def _add_version(dsn: str, version: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
    finally:
        await conn.close()
