"""Schema migrations and the database's functions, applied at start.

Migrations are numbered SQL files in `migrations/` (tables, indexes, data), applied once each,
in order, each in its own transaction together with its bookkeeping row. Functions are the
current text of every SQL function, one file per family in `functions/`, each statement a
`CREATE OR REPLACE FUNCTION`; they are applied after the migrations, all in one transaction,
whenever the files differ from the ones last applied (their SHA-256 is kept in
`schema_functions`), so that a start on an existing database with unchanged files costs one
query. Concurrent starters (several `serve --workers` processes) are serialised by one
advisory lock around both.

A function whose arguments or result change, or that goes away, is dropped by a numbered
migration (`CREATE OR REPLACE` would add an overload beside the old one).
"""

from __future__ import annotations

import hashlib
from importlib import resources

from bankrail.db.pool import Connection

_LOCK_KEY = 0x62616E6B7261696C  # "bankrail"


def available_migrations() -> list[tuple[str, str]]:
    """(version, sql) for every migration shipped with the package, in order."""
    return _sql_files("migrations")


def available_functions() -> list[tuple[str, str]]:
    """(name, sql) for every function file shipped with the package, in order."""
    return _sql_files("functions")


def functions_digest() -> str:
    """The SHA-256 of the function files, names and text, as applied."""
    digest = hashlib.sha256()
    for name, sql in available_functions():
        digest.update(name.encode() + b"\0" + sql.encode() + b"\0")
    return digest.hexdigest()


def _sql_files(folder_name: str) -> list[tuple[str, str]]:
    folder = resources.files("bankrail.db") / folder_name
    found = [
        (entry.name.removesuffix(".sql"), entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    ]
    return sorted(found)


async def pending_migrations(conn: Connection) -> list[str]:
    """Versions shipped with the package but not yet applied to this database."""
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    applied: set[str] = set()
    if exists:
        applied = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
    return [version for version, _ in available_migrations() if version not in applied]


async def migrate(conn: Connection) -> list[str]:
    """Apply every pending migration, then the function files if they changed; returns the
    versions of the migrations applied by this call."""
    applied_now: list[str] = []
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        pending = set(await pending_migrations(conn))
        for version, sql in available_migrations():
            if version not in pending:
                continue
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
            applied_now.append(version)
        await apply_functions(conn)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    return applied_now


async def apply_functions(conn: Connection) -> bool:
    """Create or replace every function of `functions/` unless the files applied last are
    these; True when they were applied. The caller holds the migrations' advisory lock."""
    digest = functions_digest()
    if await conn.fetchval("SELECT sha256 FROM schema_functions WHERE id = 1") == digest:
        return False
    async with conn.transaction():
        for _, sql in available_functions():
            await conn.execute(sql)
        await conn.execute(
            "INSERT INTO schema_functions (id, sha256) VALUES (1, $1)"
            " ON CONFLICT (id) DO UPDATE SET sha256 = EXCLUDED.sha256, applied_at = now()",
            digest,
        )
    return True
