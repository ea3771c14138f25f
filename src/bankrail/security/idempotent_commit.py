"""Idempotent requests committed together: the requests of the moment whose effect is a
function of a connection (the payment and mandate actions, the sandbox's and the legacy
API's writes) run in one transaction per batch, each exactly once per key.

One statement takes the batch's keys' locks and reads their stored answers; one statement
per kind of row locks and reads the rows the batch's effects act on (`LockedEffect`: the
payment and mandate actions); each request whose key is free runs its effect in a savepoint
of its own, so that its failure (a 4xx, or any other error) undoes only its own writes (the
savepoints are released by the commit, not one by one); one statement stores the answers.
Every result is handed back only after the transaction that holds it has committed
(db/group_commit.py).
The rules of a key (in flight, reused, replayed, expired) are `idempotency.claim`'s, as for
every other request.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

import asyncpg

from bankrail.core.problems import IDEMPOTENCY_REUSE, ProblemError, ProblemType
from bankrail.db.pool import Connection, Pool
from bankrail.security.idempotency import (
    AnswersToStore,
    Handler,
    KeyedRequest,
    ProblemRenderer,
    key_item,
    runs_in_batch,
)
from bankrail.security.keyed_batch import KeyedAcceptor, Unstored, decide_batch

__all__ = ["IdempotentCommit", "IdempotentWork", "LockedEffect", "Result", "run_batch"]

# An answer to send (status, body), or what to raise to the request: a problem not stored,
# or the error its effect failed with.
Result = tuple[int, bytes] | Exception

# Errors that are not one request's own: the batch's transaction is gone (PostgreSQL rolled it
# back to break a deadlock, which group commit runs again; or the connection is lost).
_BATCH_ERRORS = (asyncpg.TransactionRollbackError, asyncpg.InterfaceError, OSError)


Outcome = TypeVar("Outcome")


@dataclass(frozen=True)
class LockedEffect(Generic[Outcome]):
    """An effect on one row, read and locked with the batch's other rows of the same `query`
    in one statement before any effect runs. The query takes `$1`, the rows' ids, and `$2`,
    beside each id the owner the row must have (its `merchant_id`; null: any), both
    `uuid[]`; it returns each row found with an owner that names it, locked in id order,
    with its `id` and `merchant_id`. Only the rows of requests that are to run are read: a
    request whose key is in flight, reused or answered locks nothing.

    `effect` is given the row of its id as that statement read it, or None, and then reads
    the row itself: when the row was not found or is another owner's, when an earlier
    request of the batch was handed it, or once any other effect has run before it: a plain
    one, or a `LockedEffect` of another query (either may have changed the row). An effect
    writes no row of its query but its own."""

    query: str
    row_id: uuid.UUID
    owner: uuid.UUID | None
    effect: Callable[[Connection, Any | None], Awaitable[Outcome]]


@dataclass(frozen=True)
class IdempotentWork:
    """A request's effect, under its key (None: no key, nothing stored), at `now`. A reuse
    of the key with another request is answered `reuse_problem`; with `store_client_errors`
    false, a 4xx is raised to the request and not stored."""

    keyed: KeyedRequest | None
    effect: Handler | LockedEffect[tuple[int, bytes]]
    now: datetime
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE
    store_client_errors: bool = True


IN_FLIGHT = 4
"""Batches committed at once: an effect that waits for a row another transaction holds (a
payment a job is advancing) holds up its own batch, not every idempotent write of the
process."""
_CLAIM = "SELECT * FROM bankrail_claim_idempotency_keys($1::jsonb)"
_STORE = "SELECT bankrail_store_idempotent_answers($1)"
# A request's effect runs after the first and is undone by the second (`_Steps.decide`).
_SAVEPOINT = "SAVEPOINT idempotent_effect"
_UNDO = "ROLLBACK TO SAVEPOINT idempotent_effect"


@dataclass
class _Batch:
    """A batch's connection, on which each effect runs, and the rows its `LockedEffect`s
    act on (by query, then id) while they are as the batch read them."""

    conn: Connection
    locked: dict[str, dict[uuid.UUID, Any]] = field(default_factory=dict)

    async def lock(self, batch: Sequence[IdempotentWork], claims: Sequence[Any]) -> None:
        """Read and lock the rows the batch's `LockedEffect`s that are to run act on: one
        statement per query, the queries in a fixed order (by their text)."""
        wanted: dict[str, set[tuple[uuid.UUID, uuid.UUID | None]]] = {}
        for work, claim in zip(batch, claims, strict=True):
            effect = work.effect
            if isinstance(effect, LockedEffect) and _runs(work, claim):
                wanted.setdefault(effect.query, set()).add((effect.row_id, effect.owner))
        for query in sorted(wanted):
            pairs = sorted(wanted[query], key=lambda pair: pair[0])
            rows = await self.conn.fetch(
                query, [row_id for row_id, _ in pairs], [owner for _, owner in pairs]
            )
            self.locked[query] = {row["id"]: row for row in rows}

    def run(
        self, effect: Handler | LockedEffect[tuple[int, bytes]]
    ) -> Awaitable[tuple[int, bytes]]:
        """The effect, given its row while that is as the batch read it (`LockedEffect`)."""
        if not isinstance(effect, LockedEffect):
            self.locked.clear()  # it may have written any row
            return effect(self.conn)
        # Another query's rows are dropped: this effect may write them.
        rows = self.locked.get(effect.query, {})
        self.locked = {effect.query: rows}
        row = rows.get(effect.row_id)
        if row is not None and effect.owner in (None, row["merchant_id"]):
            del rows[effect.row_id]  # handed once: the effect may change it
        else:
            row = None  # not found, or another owner's: left for its owner's request
        return effect.effect(self.conn, row)


def _runs(work: IdempotentWork, claim: Any) -> bool:
    """Whether the request's effect is to run, by its key's claim (`runs_in_batch`)."""
    keyed = work.keyed
    return keyed is None or runs_in_batch(claim, keyed, work.now, keyed.ttl)


class _Steps:
    """The read, rules and write of idempotent requests (security/keyed_batch.py): the
    batch's state is its connection, on which each effect runs, and its locked rows."""

    async def read(
        self, conn: Connection, batch: Sequence[IdempotentWork]
    ) -> tuple[list[Any], _Batch]:
        """The keys' locks and stored answers (`bankrail_claim_idempotency_keys`), then the
        rows the effects act on (`LockedEffect`), locked."""
        rows = await conn.fetch(_CLAIM, [key_item(work.keyed) for work in batch])
        state = _Batch(conn)
        await state.lock(batch, rows)
        return rows, state

    async def decide(
        self, work: IdempotentWork, row: Any, state: _Batch
    ) -> tuple[tuple[int, bytes], None]:
        """The request's effect, in a savepoint of its own: its failure undoes only its own
        writes, and is its own (`Unstored`) unless the batch's transaction is gone. The
        savepoint is not released: the batch's commit releases it with the others, one
        statement fewer per request (each effect's savepoint, of one name, is the latest)."""
        conn = state.conn
        await conn.execute(_SAVEPOINT)
        try:
            return await state.run(work.effect), None
        except BaseException as error:
            await conn.execute(_UNDO)
            if isinstance(error, (ProblemError, *_BATCH_ERRORS)) or not isinstance(
                error, Exception
            ):
                raise
            raise Unstored(error) from error

    async def write(self, conn: Connection, state: _Batch, answers: AnswersToStore) -> None:
        """The answers, in one statement."""
        await conn.execute(_STORE, answers.rows)


STEPS = _Steps()


async def run_batch(
    conn: Connection, batch: Sequence[IdempotentWork], render_problem: ProblemRenderer
) -> list[Result]:
    """Run each request's effect at most once per key, in the caller's transaction, and
    return each request's result in order: its answer (stored under its key: the effect's,
    or its 4xx problem rendered), a stored answer replayed, or what to raise (the key in
    flight or reused, an unstored problem, the effect's error)."""
    return [result for result, _ in await decide_batch(conn, STEPS, batch, render_problem)]


class IdempotentCommit(KeyedAcceptor[IdempotentWork, _Batch, None]):
    """Group commit of idempotent requests within one process (security/keyed_batch.py): the
    way `run_batch` is run. `accept` hands back the answer once committed and raises what
    the request is to raise."""

    def __init__(
        self,
        pool: Pool,
        render_problem: ProblemRenderer,
        max_batch: int = 64,
        in_flight: int = IN_FLIGHT,
    ) -> None:
        super().__init__(pool, STEPS, render_problem, max_batch, in_flight)
