"""Schema migrations and the database's functions, applied at start.

Migrations are numbered SQL files in `migrations/` (tables, indexes, data), applied once each,
in order. Functions are the current text of every SQL function, one file per family in
`functions/`, each statement a `CREATE OR REPLACE FUNCTION`; they are applied after the
migrations whenever the files differ from the ones last applied (their SHA-256 is kept in
`schema_functions`), so that a start on an existing database with unchanged files costs one
query. A function whose arguments or result change, or that goes away, is dropped by a
numbered migration (`CREATE OR REPLACE` would add an overload beside the old one).

`bankrail migrate` applies both, and so does every process as it starts. Concurrent
starters are serialised by a transaction-scoped advisory lock, taken in the one transaction
that applies every pending file with its bookkeeping row and then the functions: it holds
no session state, so it works through a transaction pooler (PgBouncer
`pool_mode = transaction`), and a starter that waited finds everything applied. A database
that has a version this release does not ship (a newer release migrated it) is refused with
`SchemaTooNew`: the process must not start on it.
"""

from __future__ import annotations

import hashlib
from importlib import resources

from bankrail.db.pool import Connection

__all__ = [
    "RETIRED_FUNCTIONS",
    "SchemaTooNew",
    "applied_migrations",
    "available_migrations",
    "migrate",
    "pending_migrations",
    "unknown_migrations",
]

_LOCK_KEY = 0x62616E6B7261696C  # "bankrail"

# Functions this release no longer calls or defines but the release before does, by their
# argument lists: left on the database (as that release defined them) for its hosts during a
# rolling upgrade (docs/operations.md, "Upgrading"); the next release's migration drops them
# and this list.
RETIRED_FUNCTIONS = (
    "bankrail_lease_payout_jobs(timestamptz, integer, text, interval)",  # lease_transfer_jobs
    "bankrail_lease_refund_jobs(timestamptz, integer, text, interval)",  # lease_transfer_jobs
    "bankrail_read_payout_requests(jsonb)",  # bankrail_read_payout_batch
)


class SchemaTooNew(Exception):
    """The database has migrations this release does not know: a newer release applied
    them."""

    def __init__(self, unknown: list[str]) -> None:
        self.unknown = unknown
        super().__init__(
            "the database schema is newer than this release of Bankrail: it has migration"
            f"{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}, which this release does "
            "not ship. Run the release that applied them (or a newer one)."
        )


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


async def applied_migrations(conn: Connection) -> set[str]:
    """Versions applied to this database (none before the first migration)."""
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return set()
    return {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}


async def pending_migrations(conn: Connection) -> list[str]:
    """Versions shipped with the package but not yet applied to this database."""
    applied = await applied_migrations(conn)
    return [version for version, _ in available_migrations() if version not in applied]


async def unknown_migrations(conn: Connection) -> list[str]:
    """Versions applied to this database that this release does not ship, in order."""
    shipped = {version for version, _ in available_migrations()}
    return sorted(await applied_migrations(conn) - shipped)


async def migrate(conn: Connection) -> list[str]:
    """Apply every pending migration and then the function files if they changed, in one
    transaction; returns the versions of the migrations applied by this call. Raises
    `SchemaTooNew`, applying nothing, on a database migrated by a newer release."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        unknown = await unknown_migrations(conn)
        if unknown:
            raise SchemaTooNew(unknown)
        pending = set(await pending_migrations(conn))
        applied_now: list[str] = []
        for version, sql in available_migrations():
            if version not in pending:
                continue
            await conn.execute(sql)
            await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
            applied_now.append(version)
        await apply_functions(conn)
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
