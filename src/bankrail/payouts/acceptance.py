"""Accepting payouts: the one path of every payout created, whatever its API.

`accept_payouts` reads what the rules need for a batch of requests in one statement, decides
each with `models.decide_payout`, and writes the payouts, their first jobs, the answers under
their idempotency keys, the holds and the balance notifications in one statement, in the
caller's transaction: this module's read, rules and write (`STEPS`) run by the one keyed
batch core (security/keyed_batch.py). `PayoutAcceptance` runs it as group commit within one
process.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from bankrail.core.ids import new_id
from bankrail.core.jsonbody import dumps
from bankrail.core.problems import IDEMPOTENCY_REUSE, ProblemType
from bankrail.db.pool import Connection, Pool
from bankrail.ledger.movements import PAYOUT
from bankrail.merchants.batch_holds import BatchHolds
from bankrail.merchants.models import AccountFacts, AccountIdentifiers
from bankrail.payouts.models import (
    NewPayout,
    PayoutFacts,
    PayoutRequest,
    SourceFacts,
    decide_payout,
)
from bankrail.payouts.verification import EXPIRE_JOB, expires_at
from bankrail.rails.schemes import scheme_for
from bankrail.rails.screening import is_listed
from bankrail.security.idempotency import (
    AnswersToStore,
    KeyedRequest,
    ProblemRenderer,
    key_item,
)
from bankrail.security.keyed_batch import Answer, KeyedAcceptor, decide_batch

ADVANCE_JOB = "payout.advance"


@dataclass(frozen=True)
class Keyed:
    """A payout request under its idempotency key: what identifies it, how long its answer
    stays valid, what a reuse is answered, whether 4xx answers are stored (v1 does not
    take a transaction_id for a request it refused), and the digest of its accepted
    signature (None: unsigned)."""

    request: PayoutRequest
    scope: str
    key: str
    fingerprint: bytes
    ttl: timedelta
    answer: dict[str, Any] | None = None  # the 202 body; None: {"id": <payout id>}
    reuse_problem: ProblemType = IDEMPOTENCY_REUSE
    store_client_errors: bool = True
    signature: bytes | None = None

    @property
    def keyed(self) -> Keyed:
        """The request's key: a payout request always has one."""
        return self

    @property
    def now(self) -> datetime:
        """The service time of the request."""
        return self.request.now

    @classmethod
    def under(
        cls,
        request: PayoutRequest,
        keyed: KeyedRequest,
        *,
        answer: dict[str, Any] | None = None,
        reuse_problem: ProblemType = IDEMPOTENCY_REUSE,
        store_client_errors: bool = True,
    ) -> Keyed:
        """The payout `request` under the key, fingerprint, validity and signature of
        `keyed` (`http.idempotent.keyed_request`)."""
        return cls(
            request,
            scope=keyed.scope,
            key=keyed.key,
            fingerprint=keyed.fingerprint,
            ttl=keyed.ttl,
            answer=answer,
            reuse_problem=reuse_problem,
            store_client_errors=store_client_errors,
            signature=keyed.signature,
        )


def _read_item(keyed: Keyed) -> dict[str, Any]:
    request = keyed.request
    payee = request.payee_identifiers
    item: dict[str, Any] = {
        **key_item(keyed),
        "merchant_id": str(request.merchant_id),
        "account_id": str(request.account_id) if request.account_id else None,
        "currency": request.currency,
    }
    if request.closed_loop:
        item["source_id"] = request.beneficiary["payment_source_id"]
        item["user_id"] = request.beneficiary["user_id"]
    elif payee is not None and not request.verified:
        item["iban"] = payee.iban or None
        item["sort_code"] = payee.sort_code
        item["account_number"] = payee.account_number
    return item


def _screened_name(request: PayoutRequest, source: SourceFacts | None) -> str | None:
    """The name a payout is screened by: a verified payout's user, a closed loop's payment
    source's account holder (as the bank knows it), an open loop's beneficiary."""
    if request.verified:
        return str(request.beneficiary["user"]["name"])
    if request.closed_loop:
        return source.account_holder_name if source is not None else None
    name = request.beneficiary.get("account_holder_name")
    return str(name) if name is not None else None


def _facts(request: PayoutRequest, row: Any, listed: frozenset[str]) -> PayoutFacts:
    account = None
    if row["account_id"] is not None:
        account = AccountFacts.from_row(row)
    source = None
    if row["source_id"] is not None:
        identifiers = AccountIdentifiers(
            row["source_iban"] or "", row["source_sort_code"], row["source_account_number"]
        )
        source = SourceFacts(
            row["source_id"], row["source_user_id"], row["source_name"], identifiers
        )
    name = _screened_name(request, source)
    # The one screening decision of every payout, whatever its API or loop.
    screened = name is not None and is_listed(name, listed)
    payee = (row["payee_id"], row["payee_currency"]) if row["payee_id"] is not None else None
    return PayoutFacts(account=account, source=source, payee=payee, screened=screened)


@dataclass
class _Write:
    """The rows of one batch's write (`bankrail_write_payout_acceptances`), and the skeletons
    of the screening list as the batch's read found it."""

    listed: frozenset[str] = frozenset()
    payouts: list[dict[str, Any]] = field(default_factory=list)
    holds: BatchHolds = field(default_factory=lambda: BatchHolds(PAYOUT))


@dataclass(frozen=True)
class _KnownList:
    """The screening list's skeletons as of its version (`screening_list_version`)."""

    version: uuid.UUID | None = None
    skeletons: frozenset[str] = frozenset()


_READ = "SELECT * FROM bankrail_read_payout_batch($1::jsonb, $2)"
_WRITE = "SELECT bankrail_write_payout_acceptances($1, $2, $3, $4, $5, $6)"


class _Steps:
    """Payout acceptance's read, rules and write (security/keyed_batch.py), and the screening
    list this process read last (read again only when its version changes)."""

    def __init__(self) -> None:
        self.known_list = _KnownList()

    async def read(self, conn: Connection, batch: Sequence[Keyed]) -> tuple[list[Any], _Write]:
        """The keys' locks and stored answers, the paying accounts with their ledger rows
        locked and their balances, payment sources, payees at Bankrail, and the screening
        list's skeletons: those this process keeps, or the list's new version's."""
        known = self.known_list
        rows = await conn.fetch(_READ, [_read_item(keyed) for keyed in batch], known.version)
        first = rows[0] if rows else None
        # The skeletons come back only when the list's version is not the one kept.
        if first is not None and first["listed_skeletons"] is not None:
            known = _KnownList(first["list_version"], frozenset(first["listed_skeletons"]))
            self.known_list = known
        return rows, _Write(listed=known.skeletons)

    async def decide(self, keyed: Keyed, row: Any, write: _Write) -> tuple[Answer, uuid.UUID]:
        """`models.decide_payout`, each request seeing the holds of those before it; the
        202 answer (the request's own when it names one, as a verified payout's does) and
        the new payout's id (the one the request chose, if any)."""
        facts = _facts(keyed.request, row, write.listed)
        available = write.holds.available(facts.account) if facts.account is not None else 0
        payout = decide_payout(keyed.request, facts, available, keyed.request.payout_id or new_id())
        _add_payout(write, keyed, payout)
        return (202, dumps(keyed.answer or {"id": str(payout.id)})), payout.id

    async def write(self, conn: Connection, write: _Write, answers: AnswersToStore) -> None:
        """The payouts, their first jobs, the answers, the holds and the balance
        notifications the holds cause, in one statement."""
        holds, states, events = write.holds.groups()
        await conn.execute(_WRITE, write.payouts, ADVANCE_JOB, answers.rows, holds, states, events)


STEPS = _Steps()


async def accept_payouts(
    conn: Connection, batch: Sequence[Keyed], render_problem: ProblemRenderer
) -> list[Answer | Exception]:
    """Accept payout requests, in the caller's transaction: the one path of every payout
    created, whatever its API; a batch of one is the general case.

    One statement reads what every rule needs (the keys' locks and stored answers, the paying
    accounts with their ledger rows locked and their balances, payment sources, payees at
    Bankrail, the screening list); the rules decide each request in order, each payout
    screened by `rails.screening.is_listed` whatever its loop (`models.decide_payout`,
    each request seeing the holds of those before it); one statement writes the payouts,
    their first jobs, the answers stored under their keys, the holds, and the balance
    notifications the holds cause. Returns each request's outcome, in order: the answer
    (stored under its key: a 202, or a 4xx problem), or a problem not stored (the key in
    flight, reused with another request, or a v1 client error).
    """
    decided = await decide_batch(conn, STEPS, batch, render_problem)
    return [outcome for outcome, _ in decided]


def _add_payout(write: _Write, keyed: Keyed, payout: NewPayout) -> None:
    request = keyed.request
    account = payout.account
    now = request.now
    scheme = payout.scheme or scheme_for(
        account.currency, payout.destination_account_id is not None
    )
    iban = payout.identifiers.iban or None
    write.payouts.append(
        {
            "id": str(payout.id),
            "api": request.api,
            "merchant_id": str(account.merchant_id),
            "account_id": str(account.id),
            "transaction_id": str(request.transaction_id) if request.transaction_id else None,
            "amount": request.amount,
            "currency": account.currency,
            "beneficiary": payout.beneficiary,
            "name": payout.name,
            "iban": iban,
            "sort_code": payout.identifiers.sort_code,
            "account_number": payout.identifiers.account_number,
            "reference": request.reference,
            "context_code": request.context_code,
            "metadata": request.metadata,
            "scheme_selection": request.scheme_selection,
            "sub_merchants": request.sub_merchants,
            "scheme": scheme,
            "destination_account_id": (
                str(payout.destination_account_id) if payout.destination_account_id else None
            ),
            "pending_failure": payout.pending_failure.value if payout.pending_failure else None,
            "stage": payout.stage,
            # A verified payout's first job is its expiry, at its authorisation window's end;
            # every other payout's is its advance, due now (p_job_kind).
            "first_job": EXPIRE_JOB if request.verified else None,
            "first_job_at": expires_at(now) if request.verified else None,
            "details": {
                "api": request.api,
                "transaction_id": str(request.transaction_id or payout.id),
                "beneficiary_name": payout.name,
                "beneficiary_iban": iban,
                "reference": request.reference,
                "context_code": request.context_code,
                "scheme_id": scheme,
                "beneficiary": payout.beneficiary,
            },
            "now": now,
        }
    )
    if payout.holds_funds:
        write.holds.hold(account, request.amount, payout.id, now)


class PayoutAcceptance(KeyedAcceptor[Keyed, _Write, uuid.UUID]):
    """Group commit of payout requests within one process (security/keyed_batch.py): the
    way `accept_payouts` is run. `accept` hands back the answer once committed and raises
    the problems that are not stored."""

    def __init__(self, pool: Pool, render_problem: ProblemRenderer, max_batch: int = 64) -> None:
        super().__init__(pool, STEPS, render_problem, max_batch)
