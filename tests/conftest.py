"""Fixtures: a real PostgreSQL (embedded unless DATABASE_URL is set) and a real server."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from bankrail.db.pool import create_pool
from support.api import Operator, operator_of
from support.databases import (
    drop_database,
    fresh_database,
    postgres_server,
    prepare_template,
    run,
)
from support.receiver import WebhookReceiver
from support.server import PRODUCTION, RunningServer, free_port, own_server

TESTS = Path(__file__).parent

# The slow tier (`pytest -m slow`; `./dev test` runs it after `-m "not slow"`): every test in
# these directories, so that a new test there is slow without saying so. A slow module elsewhere
# says `pytestmark = pytest.mark.slow`, a slow test `@pytest.mark.slow`.
SLOW_DIRECTORIES = ("benchmarks", "browser")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
        if where and where[0] in SLOW_DIRECTORIES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The admin DSN of the session's PostgreSQL server, with a migrated template."""
    with postgres_server() as dsn:
        run(prepare_template(dsn))
        yield dsn


@pytest_asyncio.fixture(loop_scope="session")
async def database(pg_server: str) -> AsyncIterator[str]:
    """A fresh migrated database for one test."""
    dsn = await fresh_database(pg_server)
    yield dsn
    await drop_database(pg_server, dsn)


@pytest_asyncio.fixture(loop_scope="session")
async def pool(database: str) -> AsyncIterator[asyncpg.Pool]:
    """A connection pool on the test's fresh database."""
    pool = await create_pool(database, min_size=1, max_size=60)
    yield pool
    await pool.close()


def _server_env(pg_server: str, dsn: str | None) -> dict[str, str]:
    return {"DATABASE_URL": dsn} if dsn else {}


@pytest.fixture(scope="session")
def server(pg_server: str) -> Iterator[RunningServer]:
    """One `bankrail serve` for the e2e tests (each test makes its own merchants).

    Its data directory is not under pytest's tmp_path: as root, PostgreSQL runs as a system
    user that must traverse the directory's parents, and pytest resets its own base directory
    to 0700 whenever a session starts.
    """
    import os
    import tempfile

    dsn = run(fresh_database(pg_server, migrated=False)) if os.environ.get("DATABASE_URL") else None
    base = Path(tempfile.mkdtemp(prefix="bankrail-serve-"))
    running = RunningServer(
        data_dir=base / "data",
        port=free_port(),
        admin_token="admin-" + secrets.token_urlsafe(24),
        env=_server_env(pg_server, dsn),  # type: ignore[arg-type]
    )
    running.start()
    yield running
    running.stop()
    import shutil

    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def operator(server: RunningServer) -> Iterator[Operator]:
    """The operator API of the session's server."""
    with operator_of(server) as client:
        yield client


@pytest.fixture(scope="module")
def production(pg_server: str) -> Iterator[RunningServer]:
    """A production-mode `bankrail serve` of the test module's own, without the mock
    providers. A module that needs other settings defines its own `production`."""
    with own_server(pg_server, PRODUCTION) as running:
        yield running


@pytest.fixture
def prod_operator(production: RunningServer) -> Iterator[Operator]:
    """The operator API of the module's production server."""
    with operator_of(production) as client:
        yield client


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    """A webhook receiver on loopback for one test, answering 200 unless told otherwise."""
    made = WebhookReceiver()
    yield made
    made.close()
