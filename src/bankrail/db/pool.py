"""The asyncpg connection pool, with JSON codecs."""

from __future__ import annotations

from typing import Any, TypeAlias

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy

Pool = asyncpg.Pool
# What repository functions accept: a plain connection or one borrowed from the pool.
Connection: TypeAlias = asyncpg.Connection | PoolConnectionProxy


# Both types travel in PostgreSQL's binary format: orjson's bytes go to the wire as they are
# and come back as bytes orjson reads, with no text decoding and re-encoding in between; and
# binary codecs let `copy_records_to_table` write them (the request log's writer).
_JSONB_VERSION = b"\x01"  # jsonb's binary format: a version byte, then the JSON text


def _encode_jsonb(value: Any) -> bytes:
    return _JSONB_VERSION + orjson.dumps(value)


def _decode_jsonb(data: bytes) -> Any:
    return orjson.loads(memoryview(data)[1:])


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "json", encoder=orjson.dumps, decoder=orjson.loads, schema="pg_catalog", format="binary"
    )
    await conn.set_type_codec(
        "jsonb", encoder=_encode_jsonb, decoder=_decode_jsonb, schema="pg_catalog", format="binary"
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Nothing to undo when a connection goes back to the pool.

    asyncpg's default reset runs `RESET ALL; UNLISTEN *; CLOSE ALL; pg_advisory_unlock_all()`
    on every release: one more round trip per request. Bankrail sets no session state on
    pooled connections (advisory locks are transaction-scoped, LISTEN has its own
    connection), and asyncpg still rolls back a transaction left open before this runs.
    """
    del conn


async def create_pool(
    dsn: str, *, min_size: int = 2, max_size: int = 20, statement_cache_size: int = 100
) -> asyncpg.Pool:
    """Open a pool whose connections decode json/jsonb to Python values.

    `statement_cache_size=0` makes asyncpg use unnamed prepared statements only, each parsed
    in the round trip that runs it: what a transaction pooler that hands every transaction
    to any server connection needs (PgBouncer before 1.21)."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        reset=_keep_session,
        statement_cache_size=statement_cache_size,
    )
    assert pool is not None
    return pool


async def connect(dsn: str, *, statement_cache_size: int = 100) -> asyncpg.Connection:
    """Open one connection that decodes json/jsonb as the pool's do (for a process that
    needs no pool: the request log's writer)."""
    conn = await asyncpg.connect(dsn, statement_cache_size=statement_cache_size)
    await _init_connection(conn)
    return conn
