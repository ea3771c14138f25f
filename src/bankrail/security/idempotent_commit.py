"""Idempotent requests committed together: the requests of the moment whose effect is a
function of a connection (the payment and mandate actions, the sandbox's and the legacy
API's writes) run in one transaction per batch, each exactly once per key.

One statement takes the batch's keys' locks and reads their stored answers; each request
whose key is free runs its effect in a savepoint of its own, so that its failure (a 4xx, or
any other error) undoes only its own writes (the savepoints are released by the commit, not
one by one); one statement stores the answers. Every result is handed back only after the
transaction that holds it has committed (db/group_commit.py).
The rules of a key (in flight, reused, replayed, expired) are `idempotency.claim`'s, as for
every other request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from bankrail.core.problems import IDEMPOTENCY_REUSE, ProblemError, ProblemType
from bankrail.db.pool import Connection, Pool
from bankrail.security.idempotency import (
    AnswersToStore,
    Handler,
    KeyedRequest,
    ProblemRenderer,
    key_item,
)
from bankrail.security.keyed_batch import KeyedAcceptor, Unstored, decide_batch

__all__ = ["IdempotentCommit", "IdempotentWork", "Result", "run_batch"]

# An answer to send (status, body), or what to raise to the request: a problem not stored,
# or the error its effect failed with.
Result = tuple[int, bytes] | Exception

# Errors that are not one request's own: the batch's transaction is gone (PostgreSQL rolled it
# back to break a deadlock, which group commit runs again; or the connection is lost).
_BATCH_ERRORS = (asyncpg.TransactionRollbackError, asyncpg.InterfaceError, OSError)


@dataclass(frozen=True)
class IdempotentWork:
    """A request's effect, under its key (None: no key, nothing stored), at `now`. A reuse
    of the key with another request is answered `reuse_problem`; with `store_client_errors`
    false, a 4xx is raised to the request and not stored."""

    keyed: KeyedRequest | None
    effect: Handler
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


class _Steps:
    """The read, rules and write of idempotent requests (security/keyed_batch.py): the
    batch's state is its connection, on which each effect runs."""

    async def read(
        self, conn: Connection, batch: Sequence[IdempotentWork]
    ) -> tuple[list[Any], Connection]:
        """The keys' locks and stored answers (`bankrail_claim_idempotency_keys`)."""
        return await conn.fetch(_CLAIM, [key_item(work.keyed) for work in batch]), conn

    async def decide(
        self, work: IdempotentWork, row: Any, conn: Connection
    ) -> tuple[tuple[int, bytes], None]:
        """The request's effect, in a savepoint of its own: its failure undoes only its own
        writes, and is its own (`Unstored`) unless the batch's transaction is gone. The
        savepoint is not released: the batch's commit releases it with the others, one
        statement fewer per request (each effect's savepoint, of one name, is the latest)."""
        await conn.execute(_SAVEPOINT)
        try:
            return await work.effect(conn), None
        except BaseException as error:
            await conn.execute(_UNDO)
            if isinstance(error, (ProblemError, *_BATCH_ERRORS)) or not isinstance(
                error, Exception
            ):
                raise
            raise Unstored(error) from error

    async def write(self, conn: Connection, state: Connection, answers: AnswersToStore) -> None:
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


class IdempotentCommit(KeyedAcceptor[IdempotentWork, Connection, None]):
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
