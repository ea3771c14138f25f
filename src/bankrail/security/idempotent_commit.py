"""Idempotent requests committed together: the requests of the moment whose effect is a
function of a connection (the payment and mandate actions, the sandbox's and the legacy
API's writes) run in one transaction per batch, each exactly once per key.

One statement takes the batch's keys' locks and reads their stored answers; each request
whose key is free runs its effect in a savepoint of its own, so that its failure (a 4xx, or
any other error) undoes only its own writes; one statement stores the answers. Every result
is handed back only after the transaction that holds it has committed (db/group_commit.py).
The rules of a key (in flight, reused, replayed, expired) are `idempotency.claim`'s, as for
every other request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from bankrail.core.problems import IDEMPOTENCY_REUSE, ProblemError, ProblemType
from bankrail.db.group_commit import GroupCommit
from bankrail.db.pool import Connection, Pool
from bankrail.security.idempotency import (
    AnswersToStore,
    Handler,
    KeyedRequest,
    ProblemRenderer,
    claim_in_batch,
    key_item,
    refusal,
)

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
_STORE = "SELECT bankrail_store_idempotent_answers($1, $2, $3, $4, $5, $6, $7)"


async def run_batch(
    conn: Connection, batch: Sequence[IdempotentWork], render_problem: ProblemRenderer
) -> list[Result]:
    """Run each request's effect at most once per key, in the caller's transaction, and
    return each request's result in order: its answer (stored under its key: the effect's,
    or its 4xx problem rendered), a stored answer replayed, or what to raise (the key in
    flight or reused, an unstored problem, the effect's error)."""
    rows = await conn.fetch(_CLAIM, [key_item(work.keyed) for work in batch])
    results: list[Result] = []
    answers = AnswersToStore()
    for work, row in zip(batch, rows, strict=True):
        keyed = work.keyed
        if keyed is not None:
            before = claim_in_batch(row, keyed, work.now, keyed.ttl, answers, work.reuse_problem)
            if before is not None:
                results.append(before)
                continue
        result = await _run(conn, work, render_problem)
        if keyed is not None and isinstance(result, tuple):
            answers.add(keyed, result, work.now)
        results.append(result)
    if answers:
        await conn.execute(_STORE, *answers.arguments(), answers.signatures())
    return results


async def _run(conn: Connection, work: IdempotentWork, render_problem: ProblemRenderer) -> Result:
    try:
        async with conn.transaction():  # a savepoint: a failure leaves no partial effect
            return await work.effect(conn)
    except ProblemError as problem:
        return refusal(problem, render_problem, work.keyed is not None and work.store_client_errors)
    except _BATCH_ERRORS:
        raise
    except Exception as error:  # the request's own failure: its savepoint is rolled back
        return error


class IdempotentCommit:
    """Group commit of idempotent requests within one process: the way `run_batch` is run."""

    def __init__(
        self,
        pool: Pool,
        render_problem: ProblemRenderer,
        max_batch: int = 64,
        in_flight: int = IN_FLIGHT,
    ) -> None:
        async def run(conn: Connection, batch: Sequence[IdempotentWork]) -> list[Result]:
            return await run_batch(conn, batch, render_problem)

        self._commits: GroupCommit[IdempotentWork, Result] = GroupCommit(
            pool, run, max_batch, in_flight
        )

    async def run(self, work: IdempotentWork) -> tuple[int, bytes]:
        """The request's answer, once committed; raises what the request is to raise."""
        result = await self._commits.submit(work)
        if isinstance(result, Exception):
            raise result
        return result
