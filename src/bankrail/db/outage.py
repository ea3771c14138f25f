"""Telling a database outage apart from a bug."""

from __future__ import annotations

import asyncpg

__all__ = ["is_database_outage"]

_DATABASE_DOWN = (
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.PostgresConnectionError,  # connection lost, refused, outcome unknown
    asyncpg.exceptions.InterfaceError,
    # A pooled connection that had already received the server's shutdown notice when a
    # request took it fails with "cannot switch to state ..." rather than a connection error.
    asyncpg.exceptions.InternalClientError,
)


def is_database_outage(exc: BaseException) -> bool:
    """True for errors that mean PostgreSQL cannot be reached right now.

    Socket errors count only when raised inside asyncpg (connecting to a stopped server gives
    ConnectionRefusedError, or FileNotFoundError for its Unix socket); the same exception from
    anywhere else is a bug and must be answered 500, not hidden behind a retryable 503.
    """
    if isinstance(exc, _DATABASE_DOWN):
        return True
    if isinstance(exc, OSError | TimeoutError):
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_globals.get("__name__", "").startswith("asyncpg"):
                return True
            tb = tb.tb_next
    return False
