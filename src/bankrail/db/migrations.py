"""Schema migrations: numbered SQL files applied once each, in order, at start.

Concurrent starters (several `serve --workers` processes) are serialised by an advisory lock,
and each file is applied in its own transaction together with its bookkeeping row.
"""

from __future__ import annotations

from importlib import resources

from bankrail.db.pool import Connection

_LOCK_KEY = 0x62616E6B7261696C  # "bankrail"


def available_migrations() -> list[tuple[str, str]]:
    """(version, sql) for every migration shipped with the package, in order."""
    folder = resources.files("bankrail.db") / "migrations"
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
    """Apply every pending migration; returns the versions applied by this call."""
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
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    return applied_now
