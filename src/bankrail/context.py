"""The objects every request and worker shares within one process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import asyncpg

from bankrail.config import Settings
from bankrail.core.clock import ServiceClock
from bankrail.security.keys import ActiveClients, PublicKeyCache
from bankrail.security.ratelimit import CredentialLimiter, RateLimiter
from bankrail.security.tokens import TokenIssuer

if TYPE_CHECKING:
    from bankrail.payments.creation import PaymentCreation
    from bankrail.payments.mandate_creation import MandatePaymentCreation
    from bankrail.payouts.service import PayoutAcceptance
    from bankrail.refunds.acceptance import RefundAcceptance
    from bankrail.security.idempotent_commit import IdempotentCommit
    from bankrail.security.verifier import VerifierProcesses


@dataclass
class AppContext:
    """Settings, database pool, service clock and key material of a running service."""

    settings: Settings
    pool: asyncpg.Pool
    clock: ServiceClock
    tokens: TokenIssuer
    admin_token_hash: bytes | None
    payout_acceptance: PayoutAcceptance
    payment_creation: PaymentCreation
    mandate_payment_creation: MandatePaymentCreation
    refund_acceptance: RefundAcceptance
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
