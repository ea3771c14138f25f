"""The objects every request and worker shares within one process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import asyncpg
from fastapi import Depends, Request

from bankrail.config import Settings
from bankrail.core.clock import ServiceClock
from bankrail.security.keys import PublicKeyCache
from bankrail.security.tokens import TokenIssuer


@dataclass
class AppContext:
    """Settings, database pool, service clock and key material of a running service."""

    settings: Settings
    pool: asyncpg.Pool
    clock: ServiceClock
    tokens: TokenIssuer
    admin_token_hash: bytes | None
    public_keys: PublicKeyCache = field(default_factory=PublicKeyCache)


def get_context(request: Request) -> AppContext:
    """The AppContext of the application serving this request."""
    context: AppContext = request.app.state.context
    return context


Context = Annotated[AppContext, Depends(get_context)]
