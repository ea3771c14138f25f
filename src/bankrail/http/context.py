"""The objects every request shares within one process: the context the HTTP layer, the areas'
routes and the pages read (`request.app.state.context`, `http.deps.get_context`).

It names no area and no assembly module: the settings it carries are seen through
`ServiceSettings`, the few values a request needs (config.Settings, which app.py passes, has
them all), and the areas' services are found by their class (`Services`), wired by app.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

import asyncpg

from bankrail.core.clock import ServiceClock
from bankrail.core.powers import SandboxPowers
from bankrail.security.keys import ActiveClients, PublicKeyCache
from bankrail.security.ratelimit import CredentialLimiter, RateLimiter
from bankrail.security.tokens import TokenIssuer

if TYPE_CHECKING:
    from bankrail.db.pool import Connection
    from bankrail.http.request_log import RequestLog
    from bankrail.security.idempotent_commit import IdempotentCommit
    from bankrail.security.verifier import VerifierProcesses

Service = TypeVar("Service")

__all__ = ["AppContext", "Revocation", "ServiceSettings", "Services"]


class ServiceSettings(Protocol):
    """What a request reads of the process's settings (config.Settings has these and more)."""

    @property
    def public_url(self) -> str:
        """The base URL of every link the service hands out."""

    @property
    def sandbox(self) -> bool:
        """True in sandbox mode."""

    @property
    def powers(self) -> SandboxPowers:
        """The sandbox powers of this deployment."""

    @property
    def api_docs(self) -> bool:
        """True when the API reference pages are served."""

    @property
    def host_id(self) -> str:
        """The name of this host in metrics."""

    @property
    def access_token_ttl_seconds(self) -> int:
        """How long an access token lives."""

    @property
    def idempotency_ttl_seconds(self) -> int:
        """How long an idempotency key is kept."""

    @property
    def request_timeout_seconds(self) -> float:
        """The deadline of one request (http/middleware.py)."""


class Services:
    """The areas' services of one process (their group commits, the payment documents a page
    keeps), one per class: each area names its own (`context.services.get(PayoutAcceptance)`),
    app.py assembles and wires them, and this context names none."""

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

    settings: ServiceSettings
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
    # The request log's capture and writer; None when the log is off (no cost at all).
    request_log: RequestLog | None = None

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
