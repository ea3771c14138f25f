"""Idempotent requests committed together: the requests of the moment whose effect is a
function of a connection (the payment and mandate actions, the sandbox's and the legacy
API's writes) run in one transaction per batch, each exactly once per key.

One statement takes the batch's keys' locks and reads their stored answers; one statement
per kind of row locks and reads the rows the batch's effects act on (`LockedEffect`: the
payment and mandate actions); then the effects run in order, and one statement stores the
answers. A request's failure (a 4xx, or any other error) undoes only its own writes: an
effect runs in a savepoint of its own (released by the commit, not one by one), except an
action handed its row as the batch read it (the payment and mandate actions on the rows the
batch locked), which runs without one: one statement fewer per request. When such an action
fails having used the connection, the batch goes back to a savepoint taken after its read
and is decided again with a savepoint for every effect; one that fails before using it had
written nothing and costs the batch nothing. So an effect may run more than once before its
batch commits (as when PostgreSQL rolls a batch back to break a deadlock); only the
committed run's writes and answer remain. Every result is handed back only after the
transaction that holds it has committed (db/group_commit.py).
The rules of a key (in flight, reused, replayed, expired) are `idempotency.claim`'s, as for
every other request.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, NoReturn, TypeVar, cast

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
from bankrail.security.keyed_batch import (
    Decided,
    KeyedAcceptor,
    Steps,
    Unstored,
    decide_batch,
)

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


IN_FLIGHT = 2
"""Batches committed at once: an effect that waits for a row another transaction holds (a
payment a job is advancing) holds up its own batch while the other goes on. Two, not more:
fewer batches at once are larger ones, each commit shared by more requests
(docs/performance.md, "A step of the authorisation flow")."""
_CLAIM = "SELECT * FROM bankrail_claim_idempotency_keys($1::jsonb)"
_STORE = "SELECT bankrail_store_idempotent_answers($1)"
# A request's effect runs after the first and is undone by the second (`_Steps.decide`, when
# the batch is decided again with a savepoint per effect).
_SAVEPOINT = "SAVEPOINT idempotent_effect"
_UNDO = "ROLLBACK TO SAVEPOINT idempotent_effect"
# Taken once the batch is read; the batch goes back to it to be decided again (`_decide`).
_BATCH_SAVEPOINT = "SAVEPOINT idempotent_batch"
_BATCH_UNDO = "ROLLBACK TO SAVEPOINT idempotent_batch"


class _Again(Exception):
    """An effect run without a savepoint of its own failed after using the connection: what
    it wrote can be undone only with the batch's other effects, which are then run again."""


class _Watched:
    """The batch's connection as one effect is given it, noting whether the effect used it
    (any attribute: a statement, a transaction, a prepared statement)."""

    __slots__ = ("_conn", "used")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.used = False

    def __getattr__(self, name: str) -> Any:
        self.used = True
        return getattr(self._conn, name)


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

    def hand(self, effect: Handler | LockedEffect[tuple[int, bytes]]) -> Any | None:
        """The row a `LockedEffect` acts on while that is as the batch read it, handed once
        (the effect may change it); None for any other effect, or when the row was not
        found, is another owner's, or may have changed."""
        if not isinstance(effect, LockedEffect):
            self.locked.clear()  # it may write any row
            return None
        # Another query's rows are dropped: this effect may write them.
        rows = self.locked.get(effect.query, {})
        self.locked = {effect.query: rows}
        row = rows.get(effect.row_id)
        if row is None or effect.owner not in (None, row["merchant_id"]):
            return None  # not found, or another owner's: left for its owner's request
        del rows[effect.row_id]
        return row


def _run(
    effect: Handler | LockedEffect[tuple[int, bytes]], conn: Connection, row: Any | None
) -> Awaitable[tuple[int, bytes]]:
    """The effect on `conn`, given `row` if it acts on one (`LockedEffect`)."""
    if isinstance(effect, LockedEffect):
        return effect.effect(conn, row)
    return effect(conn)


def _runs(work: IdempotentWork, claim: Any) -> bool:
    """Whether the request's effect is to run, by its key's claim (`runs_in_batch`)."""
    keyed = work.keyed
    return keyed is None or runs_in_batch(claim, keyed, work.now, keyed.ttl)


class _Steps:
    """The read, rules and write of idempotent requests (security/keyed_batch.py): the
    batch's state is its connection, on which each effect runs, and its locked rows.

    An effect runs in a savepoint of its own, undone when it fails, unless it is handed its
    row (`LockedEffect`: a payment or mandate action on a row the batch read) and the steps
    are not `savepoints`: then it runs without one, and if it fails having used the
    connection, the batch goes back to the savepoint taken after its read and is decided
    again with a savepoint for every effect (`_decide`)."""

    def __init__(self, *, savepoints: bool) -> None:
        self.savepoints = savepoints

    async def read(
        self, conn: Connection, batch: Sequence[IdempotentWork]
    ) -> tuple[list[Any], _Batch]:
        """The keys' locks and stored answers (`bankrail_claim_idempotency_keys`), then the
        rows the effects act on (`LockedEffect`), locked; and the batch's savepoint when
        some effect may run without one of its own."""
        rows = await conn.fetch(_CLAIM, [key_item(work.keyed) for work in batch])
        state = _Batch(conn)
        await state.lock(batch, rows)
        if not self.savepoints and any(state.locked.values()):
            await conn.execute(_BATCH_SAVEPOINT)
        return rows, state

    async def decide(
        self, work: IdempotentWork, row: Any, state: _Batch
    ) -> tuple[tuple[int, bytes], None]:
        """The request's effect: its failure undoes only its own writes, and is its own
        (`Unstored`) unless the batch's transaction is gone."""
        handed = state.hand(work.effect)
        if self.savepoints or handed is None:
            return await _in_savepoint(work, state.conn, handed), None
        watched = _Watched(state.conn)
        try:
            return await _run(work.effect, cast(Connection, watched), handed), None
        except Exception as error:
            if watched.used and not isinstance(error, _BATCH_ERRORS):
                raise _Again from error  # it may have written: undone with the batch
            _raise_as_its_own(error)

    async def write(self, conn: Connection, state: _Batch, answers: AnswersToStore) -> None:
        """The answers, in one statement."""
        await conn.execute(_STORE, answers.rows)


async def _in_savepoint(
    work: IdempotentWork, conn: Connection, row: Any | None
) -> tuple[int, bytes]:
    """The effect in a savepoint of its own, undone when it fails. The savepoint is not
    released: the batch's commit releases it with the others, one statement fewer per
    request (each effect's savepoint, of one name, is the latest)."""
    await conn.execute(_SAVEPOINT)
    try:
        return await _run(work.effect, conn, row)
    except BaseException as error:
        await conn.execute(_UNDO)
        _raise_as_its_own(error)


def _raise_as_its_own(error: BaseException) -> NoReturn:
    """Raise a failed effect's `error` as its request is to meet it: a problem (its 4xx), an
    error of the batch's transaction, or what is no `Exception` (a cancellation) as it is;
    any other error as `Unstored`, the request's own."""
    if isinstance(error, (ProblemError, *_BATCH_ERRORS)) or not isinstance(error, Exception):
        raise error
    raise Unstored(error) from error


STEPS = _Steps(savepoints=False)
_WITH_SAVEPOINTS = _Steps(savepoints=True)


async def _decide(
    conn: Connection,
    steps: Steps[IdempotentWork, _Batch, None],
    batch: Sequence[IdempotentWork],
    render_problem: ProblemRenderer | None,
    trace_ids: Sequence[str] | None = None,
) -> list[Decided[None]]:
    """`decide_batch` with `steps` (STEPS: no savepoint per effect); when an effect fails
    having used the connection, the batch goes back to the savepoint taken after its read
    and is decided again with a savepoint per effect."""
    try:
        return await decide_batch(conn, steps, batch, render_problem, trace_ids)
    except _Again:
        await conn.execute(_BATCH_UNDO)
        return await decide_batch(conn, _WITH_SAVEPOINTS, batch, render_problem, trace_ids)


async def run_batch(
    conn: Connection, batch: Sequence[IdempotentWork], render_problem: ProblemRenderer
) -> list[Result]:
    """Run each request's effect at most once per key, in the caller's transaction, and
    return each request's result in order: its answer (stored under its key: the effect's,
    or its 4xx problem rendered), a stored answer replayed, or what to raise (the key in
    flight or reused, an unstored problem, the effect's error)."""
    return [result for result, _ in await _decide(conn, STEPS, batch, render_problem)]


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
        super().__init__(pool, STEPS, render_problem, max_batch, in_flight, decide=_decide)
