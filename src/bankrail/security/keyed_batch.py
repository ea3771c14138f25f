"""The one group-commit core of every keyed write: payouts, refunds, payments, payments on
mandates and every other idempotent request (`idempotent_commit.py`).

A batch of requests is read in one statement that takes their keys' locks (and whatever else
the area's rules need), each request is decided in order by `decide_keyed` (the key's claim,
then the area's rules, then the answer stored under the key), and what was decided is written
in one statement, in one transaction per batch; `KeyedAcceptor` runs batches as group commit
within one process (db/group_commit.py) and hands each request its answer once the
transaction that holds it has committed.

An area supplies only its three steps (`Steps`): its read, its rules and its write.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from bankrail.core.problems import ProblemError, ProblemType, note_problem_title
from bankrail.core.tracing import trace_id_var
from bankrail.db.group_commit import GroupCommit
from bankrail.db.pool import Connection, Pool
from bankrail.security.idempotency import (
    AnswersToStore,
    KeyIdentity,
    ProblemRenderer,
    claim_in_batch,
    refusal,
)

__all__ = [
    "Answer",
    "BatchDecider",
    "Decided",
    "KeyedAcceptor",
    "KeyedItem",
    "Steps",
    "Unstored",
    "ValidKey",
    "decide_batch",
    "decide_keyed",
]

# An answer to send: (status, body).
Answer = tuple[int, bytes]
Item = TypeVar("Item", bound="KeyedItem")
State = TypeVar("State")
Created = TypeVar("Created")
# The same, as an area's steps take and give them.
ItemIn = TypeVar("ItemIn", bound="KeyedItem", contravariant=True)
CreatedOut = TypeVar("CreatedOut", covariant=True)
# A request's outcome (its answer, or what to raise to it, unstored) and what it created.
Decided = tuple[Answer | Exception, Created | None]


class ValidKey(KeyIdentity, Protocol):
    """A request's key with how long its answer stays valid (a `KeyedRequest`)."""

    @property
    def ttl(self) -> timedelta: ...


class KeyedItem(Protocol):
    """What the core needs of a request: its key (None: no key, nothing stored), its time,
    what a reuse of its key is answered, and whether its 4xx answers are stored (False: a
    client error is raised to it, unstored)."""

    @property
    def keyed(self) -> ValidKey | None: ...

    @property
    def now(self) -> datetime: ...

    @property
    def reuse_problem(self) -> ProblemType: ...

    @property
    def store_client_errors(self) -> bool: ...


class Unstored(Exception):
    """Raised by an area's rules for a request's own failure that is neither an answer nor a
    problem (an effect's unexpected error): `error` is raised to the request, nothing is
    stored under its key."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class Steps(Protocol[ItemIn, State, CreatedOut]):
    """An area's part of a keyed batch write: its read, its rules and its write."""

    async def read(self, conn: Connection, batch: Sequence[ItemIn]) -> tuple[Sequence[Any], State]:
        """One row per request, in order, with the claim columns of `bankrail_claimed_keys`
        (its keys' locks taken), and the batch's state the rules add to."""
        ...

    async def decide(self, item: ItemIn, row: Any, state: State) -> tuple[Answer, CreatedOut]:
        """The request's answer and what it created, its rows added to `state`; raises a
        `ProblemError` (having added nothing) to refuse it, or `Unstored`."""
        ...

    async def write(self, conn: Connection, state: State, answers: AnswersToStore) -> None:
        """Write what the batch decided with the answers to store, in one statement."""
        ...


async def decide_keyed(
    steps: Steps[Item, State, Created],
    item: Item,
    row: Any,
    state: State,
    answers: AnswersToStore,
    render_problem: ProblemRenderer | None,
) -> Decided[Created]:
    """One request of a batch: the key's claim (in flight, reused, replayed:
    `idempotency.claim_in_batch`), else the area's rules; the answer is added to `answers`
    under the key, a 4xx refusal too when the request stores client errors. Returns the
    outcome (the answer, or what to raise unstored) and what the request created."""
    keyed = item.keyed
    if keyed is not None:
        before = claim_in_batch(row, keyed, item.now, keyed.ttl, answers, item.reuse_problem)
        if before is not None:
            return before, None
    created: Created | None = None
    try:
        answer, created = await steps.decide(item, row, state)
    except ProblemError as problem:
        refused = refusal(problem, render_problem, keyed is not None and item.store_client_errors)
        if isinstance(refused, ProblemError):
            return refused, None
        answer = refused
    except Unstored as unstored:
        return unstored.error, None
    if keyed is not None:
        answers.add(keyed, answer, item.now)
    return answer, created


async def decide_batch(
    conn: Connection,
    steps: Steps[Item, State, Created],
    batch: Sequence[Item],
    render_problem: ProblemRenderer | None,
    trace_ids: Sequence[str] | None = None,
) -> list[Decided[Created]]:
    """Read, decide each request in order (`decide_keyed`), write: a batch in the caller's
    transaction, a batch of one the general case. With `trace_ids`, each request is decided
    under its own trace id (`trace_id_var`: its problem documents, stored ones included, and
    its effect's logs name its request, not the one whose task runs the batch). The write
    runs only when there is something to write or store."""
    rows, state = await steps.read(conn, batch)
    answers = AnswersToStore()
    decided: list[Decided[Created]] = []
    for n, (item, row) in enumerate(zip(batch, rows, strict=True)):
        token = None if trace_ids is None else trace_id_var.set(trace_ids[n])
        try:
            decided.append(await decide_keyed(steps, item, row, state, answers, render_problem))
        finally:
            if token is not None:
                trace_id_var.reset(token)
    if answers or any(created is not None for _, created in decided):
        await steps.write(conn, state, answers)
    return decided


BatchDecider = Callable[
    [
        Connection,
        Steps[Item, State, Created],
        Sequence[Item],
        ProblemRenderer | None,
        Sequence[str] | None,
    ],
    Awaitable[list[Decided[Created]]],
]
"""What decides a batch in its transaction: `decide_batch`, or an area's way of running it."""


class KeyedAcceptor(Generic[Item, State, Created]):
    """Group commit of an area's keyed requests within one process: `decide` (by default
    `decide_batch`) in one transaction per batch of at most `max_batch`, `in_flight` batches
    at once. Every answer is handed back only after the transaction that holds it has
    committed."""

    def __init__(
        self,
        pool: Pool,
        steps: Steps[Item, State, Created],
        render_problem: ProblemRenderer,
        max_batch: int = 64,
        in_flight: int = 1,
        decide: BatchDecider[Item, State, Created] = decide_batch,
    ) -> None:
        async def run(
            conn: Connection, batch: Sequence[tuple[Item, str]]
        ) -> list[Decided[Created]]:
            items = [item for item, _ in batch]
            return await decide(conn, steps, items, render_problem, [trace for _, trace in batch])

        # Each item with the trace id of the request that submitted it.
        self._commits: GroupCommit[tuple[Item, str], Decided[Created]] = GroupCommit(
            pool, run, max_batch, in_flight
        )

    async def accept_created(self, item: Item) -> tuple[Answer, Created | None]:
        """The request's answer, once committed, with what it created (None for a replayed
        or refused one); raises what is not stored (the key in flight or reused, an
        unstored problem or error)."""
        outcome, created = await self._commits.submit((item, trace_id_var.get()))
        if isinstance(outcome, Exception):
            raise outcome
        if outcome[0] >= 400:
            # Rendered in the batch's task: the access line's title is noted here, in the
            # request's own.
            note_problem_title(outcome[1])
        return outcome, created

    async def accept(self, item: Item) -> Answer:
        """The request's answer, once committed; raises what is not stored."""
        answer, _ = await self.accept_created(item)
        return answer
