"""Real PostgreSQL for tests: the embedded server, or the one at DATABASE_URL."""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bankrail.db.embedded import EmbeddedPostgres
from bankrail.db.migrations import migrate

TEMPLATE = "bankrail_test_template"


def with_database(dsn: str, name: str) -> str:
    """The same server's URL, pointing at database `name`."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


@contextmanager
def postgres_server() -> Iterator[str]:
    """The admin DSN of a PostgreSQL server for the session."""
    external = os.environ.get("DATABASE_URL")
    if external:
        yield external
        return
    with tempfile.TemporaryDirectory(prefix="bankrail-test-pg-") as tmp:
        server = EmbeddedPostgres(Path(tmp))
        dsn = server.start()
        try:
            yield dsn
        finally:
            server.stop()


async def _admin(dsn: str) -> asyncpg.Connection:
    return await asyncpg.connect(with_database(dsn, "postgres"))


async def prepare_template(server_dsn: str) -> None:
    """A migrated template database that fresh test databases are copied from."""
    conn = await _admin(server_dsn)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        await conn.execute(f"CREATE DATABASE {TEMPLATE}")
    finally:
        await conn.close()
    template = await asyncpg.connect(with_database(server_dsn, TEMPLATE))
    try:
        await migrate(template)
    finally:
        await template.close()


async def fresh_database(server_dsn: str, *, migrated: bool = True) -> str:
    """Create a new, empty (optionally migrated) database and return its DSN."""
    name = f"bankrail_test_{secrets.token_hex(6)}"
    conn = await _admin(server_dsn)
    try:
        if migrated:
            await conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        else:
            await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    return with_database(server_dsn, name)


async def drop_database(server_dsn: str, dsn: str) -> None:
    """Drop a database made by `fresh_database`."""
    name = urlsplit(dsn).path.lstrip("/")
    conn = await _admin(server_dsn)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await conn.close()


async def fetch_value(dsn: str, query: str, *args: object) -> object:
    """The first value of `query`'s first row, on a connection of its own."""
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


def run(coro: object) -> object:
    """Run a coroutine to completion from sync code."""
    return asyncio.run(coro)  # type: ignore[arg-type]
