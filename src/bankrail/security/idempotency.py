"""The rules of an Idempotency-Key (docs/api.md): in flight, replayed, reused, expired.

The stored answer is written in the same database transaction as the request's effect, and a
transaction-scoped advisory lock marks the key as in flight: a request that dies before commit
releases the key at once, and a retry then performs the request exactly once. The batch
paths (payouts, payments, refunds) and every other idempotent write
(`idempotent_commit.py`) take the keys' locks and store the answers through
db/functions/idempotency.sql, and decide each key with `claim_in_batch`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from bankrail.core.problems import (
    IDEMPOTENCY_CONCURRENCY,
    IDEMPOTENCY_REUSE,
    ProblemError,
    ProblemType,
)
from bankrail.db.pool import Connection

__all__ = [
    "DELETE_EXPIRED_SQL",
    "EXPIRING_SCOPES",
    "Decision",
    "Handler",
    "KeyedRequest",
    "Outcome",
    "ProblemRenderer",
    "StoredAnswer",
    "claim",
    "claim_in_batch",
    "decide",
    "delete_expired",
    "fingerprint",
    "lock_key",
]

# The scopes whose keys are valid for the configured time (`idempotency_ttl_seconds`): v3
# requests, the sandbox's bank transfers and the console's. Every other scope (a v1 payout's
# transaction_id, a legacy deposit's deposit_id) keeps its key for good. The SQL is the
# predicate of the index idempotency_keys_expiring (migration 0009), character for character.
EXPIRING_SCOPES = "(scope LIKE 'v3:%' OR scope LIKE 'sandbox:%' OR scope LIKE 'console:%')"

# $1: the newest created_at that has expired; $2: the most rows to delete.
DELETE_EXPIRED_SQL = (
    "DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY("
    f" SELECT ctid FROM idempotency_keys WHERE {EXPIRING_SCOPES} AND created_at <= $1"
    " ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
    " AND created_at <= $1"
)


def fingerprint(method: str, path: str, body: bytes) -> bytes:
    """What makes two requests "the same": method, path and the SHA-256 of the body."""
    digest = hashlib.sha256()
    digest.update(method.upper().encode())
    digest.update(b" ")
    digest.update(path.rstrip("/").encode())
    digest.update(b"\n")
    digest.update(hashlib.sha256(body).digest())
    return digest.digest()


@dataclass(frozen=True)
class StoredAnswer:
    """A finished request's answer as kept for replay."""

    fingerprint: bytes
    status_code: int
    body: bytes
    created_at: datetime


class Decision(Enum):
    """What to do with a request carrying an already-seen key."""

    PROCEED = "proceed"
    REPLAY = "replay"
    REUSE = "reuse"


def decide(
    stored: StoredAnswer | None, request_fingerprint: bytes, now: datetime, ttl: timedelta
) -> Decision:
    """Replay a valid identical answer, refuse a valid different one, else proceed."""
    if stored is None or now - stored.created_at >= ttl:
        return Decision.PROCEED
    if stored.fingerprint == request_fingerprint:
        return Decision.REPLAY
    return Decision.REUSE


@dataclass(frozen=True)
class KeyedRequest:
    """What identifies a request under its Idempotency-Key, and how long its answer stays
    valid."""

    scope: str
    key: str
    fingerprint: bytes
    ttl: timedelta


# An answer to send (status, body), or a problem to raise, unstored.
Outcome = tuple[int, bytes] | ProblemError


def claim(
    locked: bool,
    stored: StoredAnswer | None,
    request_fingerprint: bytes,
    now: datetime,
    ttl: timedelta,
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE,
) -> Outcome | None:
    """What a request under a key gets before it runs, from whether its transaction holds
    the key's lock and the answer stored under the key: 409 while the key is in flight,
    `reuse_problem` when the key was used with another request, the stored answer to
    replay, or None: run the request."""
    if not locked:
        return ProblemError(
            IDEMPOTENCY_CONCURRENCY,
            "A request with this Idempotency-Key is still in flight; retry when it completes.",
        )
    decision = decide(stored, request_fingerprint, now, ttl)
    if decision is Decision.REPLAY:
        assert stored is not None
        return stored.status_code, stored.body
    if decision is Decision.REUSE:
        return ProblemError(
            reuse_problem, "This key was already used with a different request; use a new key."
        )
    return None


def claim_in_batch(
    row: Any,
    request_fingerprint: bytes,
    now: datetime,
    ttl: timedelta,
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE,
) -> Outcome | None:
    """`claim`, for a row of a batch read that took the keys' locks
    (db/functions/idempotency.sql): its columns `locked` and `stored_fingerprint`,
    `stored_status`, `stored_body`, `stored_at`."""
    stored = None
    if row["stored_fingerprint"] is not None:
        stored = StoredAnswer(
            row["stored_fingerprint"], row["stored_status"], row["stored_body"], row["stored_at"]
        )
    return claim(row["locked"], stored, request_fingerprint, now, ttl, reuse_problem)


def lock_key(scope: str, key: str) -> int:
    """The transaction-level advisory lock that marks (scope, key) as in flight."""
    digest = hashlib.sha256(f"{scope}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


Handler = Callable[[Connection], Awaitable[tuple[int, bytes]]]
ProblemRenderer = Callable[[ProblemError], bytes]


async def delete_expired(conn: Connection, expired_before: datetime, limit: int) -> int:
    """Delete up to `limit` stored answers of `EXPIRING_SCOPES` created at or before
    `expired_before` (now less the validity: `decide` treats exactly those as absent), oldest
    first, and return how many were deleted.

    Rows another transaction holds are left for the next call, and a row that is stored
    again meanwhile (its key used anew) is kept.
    """
    status = await conn.execute(DELETE_EXPIRED_SQL, expired_before, limit)
    return int(status.rpartition(" ")[2])
