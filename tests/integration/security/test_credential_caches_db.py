"""Integration tests of what a process caches of credentials (security.keys): a revoked
signing key or client is refused at once after `forget` (what the revoking process and a
NOTIFY on `bankrail_credentials` call), and by every cache within its time to live even when
no notification arrives; a lookup that raced a revocation does not bring the credential back.
That the NOTIFY reaches another process is proven over HTTP by
tests/e2e/test_revocation_many_hosts.py."""

from __future__ import annotations

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
