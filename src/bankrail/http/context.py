"""The objects every request and worker shares within one process."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

import asyncpg

from bankrail.config import Settings
from bankrail.core.clock import ServiceClock
from bankrail.security.keys import ActiveClients, PublicKeyCache
from bankrail.security.ratelimit import CredentialLimiter, RateLimiter
from bankrail.security.tokens import TokenIssuer

if TYPE_CHECKING:
    from bankrail.db.pool import Connection
    from bankrail.security.idempotent_commit import IdempotentCommit
    from bankrail.security.verifier import VerifierProcesses

Service = TypeVar("Service")


class Services:
    """The areas' services of one process (their group commits), one per class: each area
    names its own (`context.services.get(PayoutAcceptance)`), app.py wires them, and this
    context names none."""

    def __init__(self, *services: object) -> None:
        self._by_class: dict[type, object] = {type(service): service for service in services}

    def get(self, kind: type[Service]) -> Service:
        """The service of this class that the assembly wired."""
        service = self._by_class.get(kind)
        if not isinstance(service, kind):
            raise LookupError(f"no {kind.__name__} was wired in this process")
        return service


Revocation = Callable[["Connection", uuid.UUID, str, datetime], Awaitable[None]]
"""A merchant credential's revocation: merchants.service.revoke_signing_key or revoke_client
(connection, merchant id, kid or client id, service time)."""


@dataclass
class AppContext:
    """Settings, database pool, service clock and key material of a running service."""

    settings: Settings
    pool: asyncpg.Pool
    clock: ServiceClock
    tokens: TokenIssuer
    admin_token_hash: bytes | None
    services: Services
    idempotent_commit: IdempotentCommit
    public_keys: PublicKeyCache = field(default_factory=PublicKeyCache)
    clients: ActiveClients = field(default_factory=ActiveClients)
    rate_limits: RateLimiter = field(default_factory=lambda: RateLimiter(0, 1))
    token_rate_limits: RateLimiter = field(default_factory=lambda: RateLimiter(0, 1))
    credential_limits: CredentialLimiter = field(default_factory=lambda: CredentialLimiter(0, 1))
    # Request signatures are verified by these processes, or on the thread lane when None.
    verifier: VerifierProcesses | None = None

    def forget_credentials(self) -> None:
        """Forget every cached signing key and client (one was revoked, here or elsewhere)."""
        self.public_keys.forget()
        self.clients.forget()

    async def revoke_credential(
        self, revoke: Revocation, merchant_id: uuid.UUID, name: str
    ) -> None:
        """Revoke one of the merchant's credentials (the key `kid` or the client `client_id`
        `name`) in a transaction of its own, then forget this process's cached credentials at
        once; other processes forget theirs when they hear the commit's NOTIFY."""
        async with self.pool.acquire() as conn, conn.transaction():
            await revoke(conn, merchant_id, name, self.clock.now())
        self.forget_credentials()
