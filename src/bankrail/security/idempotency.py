"""The rules of an Idempotency-Key (docs/api.md): in flight, replayed, reused, expired.

The stored answer is written in the same database transaction as the request's effect, and a
transaction-scoped advisory lock marks the key as in flight: a request that dies before commit
releases the key at once, and a retry then performs the request exactly once. The batch
paths (payouts, payments, refunds) and every other idempotent write
(`idempotent_commit.py`) take the keys' locks and store the answers through
db/functions/idempotency.sql, and decide each key with `claim_in_batch`.

A signed request's signature is remembered (its digest, `accepted_signatures`) with its
stored answer, for the replay window (`signature_replay_window_seconds`): a signature
accepted once never starts a second effect, not even after its key's validity ended, nor
under another client of the merchant (keys are the merchant's).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Protocol

from bankrail.core.problems import (
    CONFLICT,
    IDEMPOTENCY_CONCURRENCY,
    IDEMPOTENCY_REUSE,
    ProblemError,
    ProblemType,
)
from bankrail.db.pool import Connection

__all__ = [
    "DELETE_EXPIRED_SQL",
    "DELETE_FORGOTTEN_SIGNATURES_SQL",
    "EXPIRING_SCOPES",
    "AnswersToStore",
    "Decision",
    "Handler",
    "KeyIdentity",
    "KeyedRequest",
    "Outcome",
    "ProblemRenderer",
    "ReplayedAnswer",
    "StoredAnswer",
    "claim",
    "claim_in_batch",
    "decide",
    "delete_expired",
    "delete_forgotten_signatures",
    "fingerprint",
    "key_item",
    "lock_key",
    "refusal",
    "runs_in_batch",
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
# $1: the newest accepted_at that is forgotten; $2: the most rows to delete.
DELETE_FORGOTTEN_SIGNATURES_SQL = (
    "DELETE FROM accepted_signatures WHERE digest = ANY (ARRAY("
    " SELECT digest FROM accepted_signatures WHERE accepted_at <= $1"
    " ORDER BY accepted_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
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
    """What identifies a request under its Idempotency-Key, how long its answer stays
    valid, and the digest of its accepted signature (None: an unsigned request)."""

    scope: str
    key: str
    fingerprint: bytes
    ttl: timedelta
    signature: bytes | None = None


class ReplayedAnswer(bytes):
    """The body of an answer stored under a key, as `claim` hands it to a repeat of its
    request: the same bytes, telling the request log that the answer was a replay."""


# An answer to send (status, body), or a problem to raise, unstored.
Outcome = tuple[int, bytes] | ProblemError
# A request's effect, in the transaction that stores its answer: (status, body).
Handler = Callable[[Connection], Awaitable[tuple[int, bytes]]]
# How a problem is rendered as a stored answer's body (problem+json).
ProblemRenderer = Callable[[ProblemError], bytes]


class KeyIdentity(Protocol):
    """What names a request's key and tells its request apart (a `KeyedRequest`)."""

    @property
    def scope(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def fingerprint(self) -> bytes: ...

    @property
    def signature(self) -> bytes | None: ...


@dataclass
class AnswersToStore:
    """The answers a batch stores under its requests' keys, with the signatures they
    accepted: the jsonb group `bankrail_store_idempotent_answers` (db/functions/idempotency.sql)
    and the batch writers take."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, keyed: KeyIdentity, answer: tuple[int, bytes], now: datetime) -> None:
        """Store `answer` under the request's key, dated `now`, and remember its signature."""
        status, body = answer
        signature = keyed.signature
        self.rows.append(
            {
                "scope": keyed.scope,
                "key": keyed.key,
                "fingerprint": keyed.fingerprint.hex(),
                "status": status,
                "body": body.hex(),
                "at": now,
                "signature": signature.hex() if signature is not None else None,
            }
        )

    def __bool__(self) -> bool:
        return bool(self.rows)


def refusal(problem: ProblemError, render_problem: ProblemRenderer | None, store: bool) -> Outcome:
    """What a request refused with `problem` gets: the problem rendered as its answer, to
    store under its key, when `store` (a keyed request whose client errors are kept) and it
    is a 4xx; else the problem itself, to raise unstored."""
    if not store or problem.problem.status >= 500:
        return problem
    assert render_problem is not None, "a stored problem is stored rendered"
    return problem.problem.status, render_problem(problem)


def claim(
    locked: bool,
    stored: StoredAnswer | None,
    request_fingerprint: bytes,
    now: datetime,
    ttl: timedelta,
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE,
    signature_used: bool = False,
) -> Outcome | None:
    """What a request under a key gets before it runs, from whether its transaction holds
    the key's lock, the answer stored under the key and whether its signature was accepted
    before: 409 while the key is in flight, `reuse_problem` when the key was used with
    another request, the stored answer to replay, 409 when the answer is no longer kept but
    the signature was used, or None: run the request."""
    if not locked:
        return ProblemError(
            IDEMPOTENCY_CONCURRENCY,
            "A request with this Idempotency-Key is still in flight; retry when it completes.",
        )
    decision = decide(stored, request_fingerprint, now, ttl)
    if decision is Decision.REPLAY:
        assert stored is not None
        return stored.status_code, ReplayedAnswer(stored.body)
    if decision is Decision.REUSE:
        return ProblemError(
            reuse_problem, "This key was already used with a different request; use a new key."
        )
    if signature_used:
        return ProblemError(
            CONFLICT,
            "This request was already used: its signature was accepted before, and a signed "
            "request takes effect once. Sign a new request (with a new Idempotency-Key) to "
            "make another.",
        )
    return None


def claim_in_batch(
    row: Any,
    keyed: KeyIdentity,
    now: datetime,
    ttl: timedelta,
    answers: AnswersToStore,
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE,
) -> Outcome | None:
    """`claim`, for a row of a batch read that took the keys' locks
    (`bankrail_claimed_keys`, db/functions/idempotency.sql): its columns `locked`,
    `stored_fingerprint`, `stored_status`, `stored_body`, `stored_at` and `signature_used`.

    A replay under a signature not seen before (a client that signs its retry anew) adds that
    signature to `answers`, with the stored answer and its date unchanged: once the key's
    answer is gone, that signature too is refused rather than taking effect again."""
    stored = _stored(row)
    outcome = claim(
        row["locked"],
        stored,
        keyed.fingerprint,
        now,
        ttl,
        reuse_problem,
        signature_used=row["signature_used"],
    )
    if (
        isinstance(outcome, tuple)
        and stored is not None
        and keyed.signature is not None
        and not row["signature_used"]
    ):
        answers.add(keyed, outcome, stored.created_at)
    return outcome


def runs_in_batch(row: Any, keyed: KeyIdentity, now: datetime, ttl: timedelta) -> bool:
    """Whether `claim_in_batch` of this row will let the request run (None), without
    deciding it: for what a batch does before its requests are decided."""
    claimed = claim(
        row["locked"],
        _stored(row),
        keyed.fingerprint,
        now,
        ttl,
        signature_used=row["signature_used"],
    )
    return claimed is None


def _stored(row: Any) -> StoredAnswer | None:
    """The answer stored under a batch row's key, if any."""
    if row["stored_fingerprint"] is None:
        return None
    return StoredAnswer(
        row["stored_fingerprint"], row["stored_status"], row["stored_body"], row["stored_at"]
    )


def key_item(keyed: KeyIdentity | None) -> dict[str, Any]:
    """A request's key as a batch read takes it (db/functions/idempotency.sql): its lock,
    scope, key and signature's digest (hex), all None for a request without a key."""
    if keyed is None:
        return {"lock_key": None, "scope": None, "key": None, "signature": None}
    return {
        "lock_key": lock_key(keyed.scope, keyed.key),
        "scope": keyed.scope,
        "key": keyed.key,
        "signature": keyed.signature.hex() if keyed.signature is not None else None,
    }


def lock_key(scope: str, key: str) -> int:
    """The transaction-level advisory lock that marks (scope, key) as in flight."""
    digest = hashlib.sha256(f"{scope}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def delete_expired(conn: Connection, expired_before: datetime, limit: int) -> int:
    """Delete up to `limit` stored answers of `EXPIRING_SCOPES` created at or before
    `expired_before` (now less the validity: `decide` treats exactly those as absent), oldest
    first, and return how many were deleted.

    Rows another transaction holds are left for the next call, and a row that is stored
    again meanwhile (its key used anew) is kept.
    """
    status = await conn.execute(DELETE_EXPIRED_SQL, expired_before, limit)
    return int(status.rpartition(" ")[2])


async def delete_forgotten_signatures(
    conn: Connection, forgotten_before: datetime, limit: int
) -> int:
    """Forget up to `limit` accepted signatures accepted at or before `forgotten_before` (now
    less the replay window), oldest first, and return how many were forgotten; rows another
    transaction holds are left for the next call."""
    status = await conn.execute(DELETE_FORGOTTEN_SIGNATURES_SQL, forgotten_before, limit)
    return int(status.rpartition(" ")[2])
