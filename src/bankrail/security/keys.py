"""Merchant public keys, parsed once and cached per process."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from bankrail.security.signing import load_public_key


@dataclass(frozen=True)
class RegisteredKey:
    """A merchant's signing key, parsed, and its DER form (what a verifier process gets)."""

    key: ec.EllipticCurvePublicKey
    der: bytes


class PublicKeyCache:
    """Looks up a merchant's registered signing key by kid, parsing each PEM only once.

    Keys are never changed once registered, so a cached key stays right; a miss is not
    cached, so a key registered by another process is found on its first use here.
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        self._keys: dict[tuple[uuid.UUID, str], RegisteredKey] = {}
        self._max_entries = max_entries

    async def get(
        self, pool: asyncpg.Pool, merchant_id: uuid.UUID, kid: str
    ) -> RegisteredKey | None:
        """The merchant's key with this kid, or None if none is registered."""
        cached = self._keys.get((merchant_id, kid))
        if cached is not None:
            return cached
        pem = await pool.fetchval(
            "SELECT public_key_pem FROM signing_keys WHERE merchant_id = $1 AND kid = $2",
            merchant_id,
            kid,
        )
        if pem is None:
            return None
        parsed = load_public_key(pem)
        key = RegisteredKey(
            parsed,
            parsed.public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        if len(self._keys) >= self._max_entries:
            self._keys.clear()
        self._keys[(merchant_id, kid)] = key
        return key
