"""The asyncpg connection pool, with JSON codecs."""

from __future__ import annotations

import asyncio
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


def encode_jsonb(value: Any) -> bytes:
    """`value` in jsonb's binary format, as a connection of `connect(..., jsonb_encoded=True)`
    takes it; raises orjson.JSONEncodeError (a TypeError) for what orjson cannot encode."""
    return _JSONB_VERSION + orjson.dumps(value)


def _decode_jsonb(data: bytes) -> Any:
    return orjson.loads(memoryview(data)[1:])


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "json", encoder=orjson.dumps, decoder=orjson.loads, schema="pg_catalog", format="binary"
    )
    await conn.set_type_codec(
        "jsonb", encoder=encode_jsonb, decoder=_decode_jsonb, schema="pg_catalog", format="binary"
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Nothing to undo when a connection goes back to the pool.

    asyncpg's default reset runs `RESET ALL; UNLISTEN *; CLOSE ALL; pg_advisory_unlock_all()`
    on every release: one more round trip per request. Bankrail sets no session state on
    pooled connections (advisory locks are transaction-scoped, LISTEN has its own
    connection), and asyncpg still rolls back a transaction left open before this runs.
    """
    del conn


IDLE_SECONDS = 300.0
"""How long a pooled connection above the pool's minimum may stay unborrowed before it is
closed (asyncpg's default `max_inactive_connection_lifetime`)."""
_IDLE_SWEEPS = 10  # per IDLE_SECONDS


class _Pool(asyncpg.Pool):
    """asyncpg's pool, handing out and giving back a connection by steps that never wait,
    where nothing needs them to.

    asyncpg runs every release in `asyncio.shield`, a task of its own, so that a cancelled
    request still returns its connection; that task and the turn of the event loop it waits
    for were a tenth of a GET by id's samples in the API (docs/performance.md, "The
    pool's release"). A connection that is open, in no transaction, not being cancelled, of
    the pool's generation and under its query limit is returned by steps that never wait
    (this pool's reset is `_keep_session`): nothing can cancel them midway, so they run in
    the releasing task. Any other connection is released by asyncpg's own path, shield and
    all. Likewise a free connection that is open and of the pool's generation is handed out
    by asyncpg's own steps without the coroutines they run in (about 5 µs of a request's
    CPU, both ways); waiting for one, or reconnecting one, is asyncpg's path. And where
    asyncpg arms an idle timer on every release (2-3 µs more), a sweep (`close_idle`) finds
    the idle connections by their count of releases. Written against asyncpg 0.32's pool
    (pyproject.toml pins the minor version; tests/integration/db/test_pool_release_db.py
    checks both steps that cannot wait, each way by asyncpg's path, and the sweep)."""

    async def release(
        self,
        connection: PoolConnectionProxy[Any],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (asyncpg's signature, overridden)
    ) -> None:
        """Return `connection` to the pool (asyncpg's `Pool.release`)."""
        holder: Any = getattr(connection, "_holder", None)
        con: Any = getattr(connection, "_con", None)
        if (
            type(connection) is not PoolConnectionProxy
            or holder is None
            or con is None
            or holder._pool is not self
            or con.is_closed()
            or con.is_in_transaction()
            or con._top_xact is not None
            or con._protocol._is_cancelling()
            or con._protocol.queries_count >= holder._max_queries
            or holder._generation != self._generation
            or self._reset is not _keep_session
            or holder._max_inactive_time  # asyncpg's idle timer is on: its path arms it
            # Others wait: asyncpg's path, whose task lets the first of them run before
            # this one goes on (without it, a task borrowing in a loop took the connection
            # back every time, and a waiter starved).
            or self._queue._getters
        ):
            await super().release(connection, timeout=timeout)
            return
        self._check_init()
        con._on_release()
        # asyncpg's holder.release, less what cannot apply here: its checks are the ones
        # above; its reset (`Connection._reset`, then this pool's `_keep_session`) rolls
        # back a transaction (there is none) and forgets the borrower's listeners, as here;
        # the timeout it runs them in bounds steps that do not wait; and its idle timer is
        # `close_idle`'s sweep.
        con._listeners.clear()
        con._log_listeners.clear()
        holder._timeout = None
        holder._release()

    async def _acquire(
        self,
        timeout: float | None,  # noqa: ASYNC109 (asyncpg's signature, overridden)
    ) -> PoolConnectionProxy[Any]:
        """A connection from the pool (asyncpg's `Pool._acquire`): a free one that is open
        and of the pool's generation at once, by asyncpg's own steps less its two
        coroutines and its queue's; otherwise (none free, others waiting, one to reconnect,
        a pool not open, no time to wait) by asyncpg's own path."""
        pool: Any = self  # asyncpg's private state, which its stubs do not declare
        queue = pool._queue
        if (
            self.is_closing()
            or not pool._initialized
            or pool._initializing
            or queue.empty()
            or queue._getters  # others wait: asyncpg's path, as theirs
            or (timeout is not None and timeout <= 0)  # asyncpg's: timed out at once
        ):
            return await self._by_asyncpg(timeout)
        holder = queue.get_nowait()
        con = holder._con
        if (
            con is None
            or con.is_closed()
            or holder._generation != pool._generation
            or holder._setup is not None
            or holder._inactive_callback is not None  # asyncpg's idle timer: its path
        ):
            queue.put_nowait(holder)  # asyncpg's path takes one and reconnects it
            return await self._by_asyncpg(timeout)
        holder._proxy = proxy = PoolConnectionProxy(holder, con)
        holder._in_use = pool._loop.create_future()
        holder._timeout = timeout
        return proxy

    async def _by_asyncpg(
        self,
        timeout: float | None,  # noqa: ASYNC109 (as asyncpg's)
    ) -> PoolConnectionProxy[Any]:
        proxy: PoolConnectionProxy[Any] = await super()._acquire(timeout)  # type: ignore[misc]
        return proxy

    def close_idle(self, idle_seconds: float) -> None:
        """From now on, while the pool is open, close each connection above its minimum
        size that has not been borrowed for `idle_seconds` since it was last given back (as
        asyncpg's `max_inactive_connection_lifetime` would, within a tenth of it more),
        found by a sweep every tenth of it; 0 closes none (asyncpg's meaning of 0)."""
        previous: asyncio.TimerHandle | None = getattr(self, "_sweep", None)
        if previous is not None:
            previous.cancel()
        self._sweep: asyncio.TimerHandle | None = None
        self._idle_since: dict[Any, tuple[Any, float]] = {}
        if idle_seconds > 0:
            self._next_sweep(idle_seconds)

    def _next_sweep(self, idle_seconds: float) -> None:
        pool: Any = self
        self._sweep = pool._loop.call_later(
            idle_seconds / _IDLE_SWEEPS, self._sweep_idle, idle_seconds
        )

    def _sweep_idle(self, idle_seconds: float) -> None:
        # asyncpg arms a timer on every release and cancels it on every acquire (2-3 µs of
        # a request, docs/performance.md, "The pool's release"); the sweep costs requests
        # nothing.
        pool: Any = self
        if self.is_closing():
            self._sweep = None
            return
        try:
            self.close_idle_at(pool._loop.time(), idle_seconds)
        finally:
            self._next_sweep(idle_seconds)

    def close_idle_at(self, now: float, idle_seconds: float) -> None:
        """One sweep at the loop's time `now`: close each free connection above the pool's
        minimum that every sweep since `idle_seconds` before `now` saw free and not given
        back again (the same connection, with the same count of releases)."""
        pool: Any = self
        seen = self._idle_since
        for holder in pool._holders:
            con = holder._con
            if con is None or con.is_closed() or holder._in_use is not None:
                seen.pop(holder, None)  # gone, or borrowed: its idle time starts again
                continue
            mark = (con, con._pool_release_ctr)  # a new connection, or a release: new mark
            last = seen.get(holder)
            if last is None or last[0] != mark:
                seen[holder] = (mark, now)
            elif now - last[1] >= idle_seconds:
                del seen[holder]
                holder._deactivate_inactive_connection()  # asyncpg's: keeps the minimum


async def create_pool(
    dsn: str,
    *,
    min_size: int = 2,
    max_size: int = 20,
    statement_cache_size: int = 100,
    idle_seconds: float = IDLE_SECONDS,
) -> asyncpg.Pool:
    """Open a pool whose connections decode json/jsonb to Python values, and close those
    above `min_size` not borrowed for `idle_seconds` (0: none).

    `statement_cache_size=0` makes asyncpg use unnamed prepared statements only, each parsed
    in the round trip that runs it: what a transaction pooler that hands every transaction
    to any server connection needs (PgBouncer before 1.21)."""
    # asyncpg.create_pool, with the pool's class this module's (50,000 queries is
    # create_pool's default, which the class itself asks to be given). asyncpg's own idle
    # timers are off (0): the pool's sweep closes idle connections instead.
    pool = await _Pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        max_queries=50_000,
        max_inactive_connection_lifetime=0,
        init=_init_connection,
        reset=_keep_session,
        statement_cache_size=statement_cache_size,
        connection_class=asyncpg.Connection,
        record_class=asyncpg.Record,
        loop=None,
    )
    pool.close_idle(idle_seconds)
    return pool


async def connect(
    dsn: str, *, statement_cache_size: int = 100, jsonb_encoded: bool = False
) -> asyncpg.Connection:
    """Open one connection that decodes json/jsonb as the pool's do (for a process that
    needs no pool: the request log's writer). With `jsonb_encoded`, jsonb values go and come
    as bytes already in jsonb's binary format (`encode_jsonb`): a writer that sends the same
    document many times encodes it once."""
    conn = await asyncpg.connect(dsn, statement_cache_size=statement_cache_size)
    await _init_connection(conn)
    if jsonb_encoded:
        # Exchanged as bytea is (the bytes as they are), with no Python call per value.
        await conn.set_builtin_type_codec(
            "jsonb", schema="pg_catalog", codec_name="bytea", format="binary"
        )
    return conn
