"""Integration tests of what a process caches of credentials (security.keys): a revoked
signing key or client is refused at once after `forget` (what the revoking process and a
NOTIFY on `bankrail_credentials` call), and by every cache within its time to live even when
no notification arrives; a lookup that raced a revocation does not bring the credential back.
That the NOTIFY reaches another process is proven over HTTP by
tests/e2e/test_revocation_many_hosts.py."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

import asyncpg

from bankrail.merchants import service
from bankrail.security import signing
from bankrail.security.keys import ActiveClients, PublicKeyCache

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def _merchant_with_key_and_client(pool: asyncpg.Pool) -> tuple[uuid.UUID, str, str]:
    pem = signing.public_key_pem(signing.generate_private_key().public_key())
    async with pool.acquire() as conn:
        merchant_id = await service.create_merchant(conn, "Cache Ltd", NOW)
        kid = await service.register_signing_key(conn, merchant_id, pem, "k1", NOW)
        client_id, _ = await service.create_client(conn, merchant_id, ["payments"], NOW)
    return merchant_id, kid, client_id


async def test_forget_refuses_revoked_credentials_at_once(pool: asyncpg.Pool) -> None:
    merchant_id, kid, client_id = await _merchant_with_key_and_client(pool)
    keys, clients = PublicKeyCache(ttl=3600), ActiveClients(ttl=3600)
    assert await keys.get(pool, merchant_id, kid) is not None
    assert await clients.get(pool, client_id) == (merchant_id, frozenset({"payments"}))
    async with pool.acquire() as conn, conn.transaction():
        await service.revoke_signing_key(conn, merchant_id, kid, NOW)
        await service.revoke_client(conn, merchant_id, client_id, NOW)
    # An hour-long time to live: only `forget` can make the caches see the revocation.
    assert await keys.get(pool, merchant_id, kid) is not None
    keys.forget()
    clients.forget()
    assert await keys.get(pool, merchant_id, kid) is None
    assert await clients.get(pool, client_id) is None


async def test_without_a_notification_the_time_to_live_bounds_a_revoked_entry(
    pool: asyncpg.Pool,
) -> None:
    merchant_id, kid, client_id = await _merchant_with_key_and_client(pool)
    keys, clients = PublicKeyCache(ttl=0.2), ActiveClients(ttl=0.2)
    assert await keys.get(pool, merchant_id, kid) is not None
    assert await clients.get(pool, client_id) is not None
    async with pool.acquire() as conn, conn.transaction():
        await service.revoke_signing_key(conn, merchant_id, kid, NOW)
        await service.revoke_client(conn, merchant_id, client_id, NOW)
    revoked_at = time.monotonic()
    while await keys.get(pool, merchant_id, kid) is not None:
        assert time.monotonic() - revoked_at < 0.2 + 0.5, "the key outlived its time to live"
    while await clients.get(pool, client_id) is not None:
        assert time.monotonic() - revoked_at < 0.2 + 0.5, "the client outlived its time to live"


async def test_a_lookup_that_raced_a_revocation_is_not_kept(pool: asyncpg.Pool) -> None:
    merchant_id, kid, _client_id = await _merchant_with_key_and_client(pool)
    keys = PublicKeyCache(ttl=3600)

    class ForgetDuringRead:
        """A pool whose read is overtaken by a revocation's `forget`, as a request in flight
        on another task can be."""

        async def fetchval(self, query: str, *args: object) -> object:
            value = await pool.fetchval(query, *args)
            keys.forget()
            return value

    assert await keys.get(ForgetDuringRead(), merchant_id, kid) is not None  # type: ignore[arg-type]
    async with pool.acquire() as conn, conn.transaction():
        await service.revoke_signing_key(conn, merchant_id, kid, NOW)
    assert await keys.get(pool, merchant_id, kid) is None


class _CountingPool:
    """A pool that counts the reads it is asked for."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.reads = 0

    async def fetchrow(self, query: str, *args: object) -> object:
        self.reads += 1
        return await self.pool.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: object) -> object:
        self.reads += 1
        return await self.pool.fetchval(query, *args)


async def test_requests_that_find_an_entry_stale_together_share_one_read(
    pool: asyncpg.Pool,
) -> None:
    merchant_id, kid, client_id = await _merchant_with_key_and_client(pool)
    keys, clients = PublicKeyCache(ttl=3600), ActiveClients(ttl=3600)
    counting = _CountingPool(pool)
    found = await asyncio.gather(
        *(clients.get(counting, client_id) for _ in range(20)),  # type: ignore[arg-type]
        *(keys.get(counting, merchant_id, kid) for _ in range(20)),  # type: ignore[arg-type]
    )
    assert found[:20] == [(merchant_id, frozenset({"payments"}))] * 20
    assert all(key is not None and key is found[20] for key in found[20:])
    assert counting.reads == 2  # one per cache, not one per request


async def test_a_request_after_a_revocation_does_not_join_a_read_begun_before_it(
    pool: asyncpg.Pool,
) -> None:
    merchant_id, _kid, client_id = await _merchant_with_key_and_client(pool)
    clients = ActiveClients(ttl=3600)
    release = asyncio.Event()
    read = asyncio.Event()

    class SlowBeforeRevocation:
        """A read that began before the client was revoked, and answers after."""

        async def fetchrow(self, query: str, *args: object) -> object:
            row = await pool.fetchrow(query, *args)
            read.set()
            await release.wait()
            return row

    early = asyncio.ensure_future(clients.get(SlowBeforeRevocation(), client_id))  # type: ignore[arg-type]
    # The early read has its row (the task in `_loading` alone may not have reached the
    # database yet: the revocation would then commit first and it would read None).
    await read.wait()
    assert clients._cache._loading  # and is still in flight
    async with pool.acquire() as conn, conn.transaction():
        await service.revoke_client(conn, merchant_id, client_id, NOW)
    clients.forget()
    assert await clients.get(pool, client_id) is None  # read anew, not the early read's answer
    release.set()
    assert await early is not None  # the early request read it before the revocation
    assert await clients.get(pool, client_id) is None  # and did not bring it back
