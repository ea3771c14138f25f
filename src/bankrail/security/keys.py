"""What a process remembers of merchants' credentials between requests: signing keys (parsed
once) and whether an API client is still active. Revocation reaches these caches at once in
the process that revoked (`forget`) and through NOTIFY on `CREDENTIALS_CHANNEL` in every
other; an entry is also never trusted for longer than `ttl` (1 s), should a notification be
missed. (The verifier processes, security.verifier, key their parsed keys by the key's own
bytes and verify only with the key this process sends them, so they hold nothing to revoke.)
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import asyncpg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from bankrail.db.pool import Connection
from bankrail.security.signing import load_public_key

__all__ = [
    "CREDENTIALS_CHANNEL",
    "CREDENTIALS_TTL_SECONDS",
    "ActiveClients",
    "PublicKeyCache",
    "RegisteredKey",
    "announce_revocation",
]

CREDENTIALS_CHANNEL = "bankrail_credentials"
CREDENTIALS_TTL_SECONDS = 1.0

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class RegisteredKey:
    """A merchant's signing key, parsed, and its DER form (what a verifier process gets)."""

    key: ec.EllipticCurvePublicKey
    der: bytes
    pem: str


async def announce_revocation(conn: Connection) -> None:
    """Tell every process to forget what it cached of credentials (delivered at commit)."""
    await conn.execute(f"NOTIFY {CREDENTIALS_CHANNEL}")


class _FreshCache(Generic[K, V]):
    """Entries kept for at most `ttl` seconds; `forget` drops them all. A value read from the
    database before a `forget` is not stored after it (the generation changed), so a lookup
    that raced a revocation cannot bring the revoked credential back."""

    def __init__(self, ttl: float, max_entries: int) -> None:
        self._entries: dict[K, tuple[float, V]] = {}
        self._ttl = ttl
        self._max_entries = max_entries
        self._loading: dict[tuple[K, int], asyncio.Task[V]] = {}
        self.generation = 0

    async def load_once(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        """What `load()` reads for `key`, read once for every request that asks at the same
        time (at the same generation): when an entry goes stale under load, one query
        refreshes it rather than one per request in flight."""
        loading = (key, self.generation)
        task = self._loading.get(loading)
        if task is None or task.get_loop() is not asyncio.get_running_loop():

            async def run() -> V:
                return await load()

            task = asyncio.get_running_loop().create_task(run())
            self._loading[loading] = task
            task.add_done_callback(lambda done: self._finished(loading, done))
        # Shielded: a request cancelled while it waits does not cancel the others' read.
        return await asyncio.shield(task)

    def _finished(self, loading: tuple[K, int], task: asyncio.Task[V]) -> None:
        if self._loading.get(loading) is task:
            del self._loading[loading]
        if not task.cancelled():
            task.exception()  # retrieved: each waiter raises it, none is left unread

    def fresh(self, key: K) -> tuple[bool, V | None]:
        """(True, value) when a fresh entry is held; (False, the stale value or None)."""
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        stored_at, value = entry
        return time.monotonic() - stored_at < self._ttl, value

    def store(self, key: K, value: V, generation: int) -> None:
        """Remember `value`, read while the cache was at `generation`."""
        if generation != self.generation:
            return
        if len(self._entries) >= self._max_entries:
            self._entries.clear()
        self._entries[key] = (time.monotonic(), value)

    def forget(self) -> None:
        """Drop every entry (a credential was revoked)."""
        self.generation += 1
        self._entries.clear()


class PublicKeyCache:
    """Looks up a merchant's active signing key by kid, parsing each PEM only once."""

    def __init__(self, max_entries: int = 10_000, ttl: float = CREDENTIALS_TTL_SECONDS) -> None:
        self._cache: _FreshCache[tuple[uuid.UUID, str], RegisteredKey | None] = _FreshCache(
            ttl, max_entries
        )
        self._pem: _FreshCache[tuple[uuid.UUID, str], str | None] = _FreshCache(ttl, 0)

    async def get(
        self, pool: asyncpg.Pool, merchant_id: uuid.UUID, kid: str
    ) -> RegisteredKey | None:
        """The merchant's active key with this kid, or None if none is (or it was revoked)."""
        fresh, cached = self._cache.fresh((merchant_id, kid))
        if fresh:
            return cached
        generation = self._cache.generation

        async def read() -> str | None:
            pem: str | None = await pool.fetchval(
                "SELECT public_key_pem FROM signing_keys"
                " WHERE merchant_id = $1 AND kid = $2 AND revoked_at IS NULL",
                merchant_id,
                kid,
            )
            return pem

        pem = await self._pem.load_once((merchant_id, kid), read)
        # Parsed once: another request that shared the read may have stored the key since.
        cached = self._cache.fresh((merchant_id, kid))[1] or cached
        if pem is None:
            return None  # a miss is not kept: a key registered meanwhile is found at once
        if cached is None or cached.pem != pem:
            parsed = load_public_key(pem)
            der = parsed.public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            cached = RegisteredKey(parsed, der, pem)
        self._cache.store((merchant_id, kid), cached, generation)
        return cached

    def forget(self) -> None:
        """Forget every key (one was revoked)."""
        self._cache.forget()
        self._pem.forget()


class ActiveClients:
    """Whether an API client is active (not revoked), and its scopes, remembered briefly: an
    access token outlives nothing its client does."""

    def __init__(self, max_entries: int = 10_000, ttl: float = CREDENTIALS_TTL_SECONDS) -> None:
        self._cache: _FreshCache[str, tuple[uuid.UUID, frozenset[str]] | None] = _FreshCache(
            ttl, max_entries
        )

    def cached(self, client_id: str) -> tuple[bool, tuple[uuid.UUID, frozenset[str]] | None]:
        """(True, what `get` would answer) when a fresh entry is held (no await, no query);
        (False, None) when `get` must read the database."""
        fresh, cached = self._cache.fresh(client_id)
        return (True, cached) if fresh else (False, None)

    async def get(
        self, pool: asyncpg.Pool, client_id: str
    ) -> tuple[uuid.UUID, frozenset[str]] | None:
        """(merchant id, scopes) of the active client, or None when it is unknown or revoked."""
        fresh, cached = self._cache.fresh(client_id)
        if fresh:
            return cached
        generation = self._cache.generation

        async def read() -> tuple[uuid.UUID, frozenset[str]] | None:
            row = await pool.fetchrow(
                "SELECT merchant_id, scopes FROM api_clients"
                " WHERE client_id = $1 AND revoked_at IS NULL",
                client_id,
            )
            return (row["merchant_id"], frozenset(row["scopes"])) if row else None

        found = await self._cache.load_once(client_id, read)
        self._cache.store(client_id, found, generation)
        return found

    def forget(self) -> None:
        """Forget every client (one was revoked)."""
        self._cache.forget()
