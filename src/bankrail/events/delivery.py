"""Webhook delivery: claim due deliveries, POST them signed, record every attempt.

Claims are leases on wall-clock time (so advancing the sandbox clock never steals a delivery
that a live worker is sending), taken with FOR UPDATE SKIP LOCKED so that several worker
processes never send the same attempt. A worker that dies mid-delivery leaves the lease to
expire and the delivery to be tried again: delivery is at-least-once, and a delivery is marked
delivered only after a 2xx answer.

Deliveries that share an ordering key (the v1 events of one payout, see events/outbox.py) go
out one at a time in their sequence: the claim skips one while a delivery of its key with a
lower place is still pending, so a later event is never attempted before the one before it
is delivered or discarded. The skipped ones take no place in the batch, and no other key or
merchant waits for them.

No destination waits for another (docs/webhooks.md, "Delivery fairness"). A destination is a
merchant's URI: the merchant and the URI together. Every attempt runs and is recorded on its
own, so a receiver that never answers holds only its own attempts, each until the timeout;
and the claim (`bankrail_claim_webhook_deliveries`, db/functions/events.sql) gives no
destination more than its share of attempts in flight on all workers, and the free slots to
the destinations with the fewest in flight first. A hanging receiver's backlog waits for its
own slots while every other destination's deliveries go out at once.

A webhook listener (`bankrail listen`, events/listeners.py) is one more destination: its
stream claims its own deliveries (this claim leaves them out), and the answers its CLI
reports are recorded by the same `record_outcomes`, on the same retry schedule.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from urllib.parse import urlsplit

import aiohttp
import asyncpg
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from bankrail.core.clock import ServiceClock
from bankrail.core.metrics import record_webhook_attempt
from bankrail.core.threadlane import CRYPTO
from bankrail.db.group_commit import GroupCommit
from bankrail.db.pool import Connection
from bankrail.events.destinations import PublicOnlyResolver, check_literal_destination
from bankrail.events.schedule import next_attempt_at
from bankrail.security import signing
from bankrail.security.service_keys import ensure_secret

log = logging.getLogger(__name__)

WEBHOOK_SIGNING_KEY = "webhook_signing"
TIMESTAMP_HEADER = "X-SVC-Webhook-Timestamp"
ATTEMPT_TIMEOUT = 10.0
LEASE = timedelta(seconds=60)


@dataclass(frozen=True)
class WebhookKey:
    """The service's ES512 key for signing webhooks, and its kid."""

    kid: str
    private_key: ec.EllipticCurvePrivateKey

    def jwk(self) -> dict[str, str]:
        """The public half as a JWK."""
        return signing.public_jwk(self.private_key.public_key(), self.kid)


async def ensure_webhook_key(conn: Connection) -> WebhookKey:
    """The webhook signing key, generated on first start and kept in the database."""
    fresh = signing.private_key_pem(signing.generate_private_key()).encode()
    kid, pem = await ensure_secret(conn, WEBHOOK_SIGNING_KEY, fresh)
    key = load_pem_private_key(pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return WebhookKey(kid, key)


def webhook_timestamp(moment: datetime) -> str:
    """The X-SVC-Webhook-Timestamp value: ISO 8601 UTC to the second, with Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def signed_headers(
    key: WebhookKey, jku: str, uri: str, body: bytes, now: datetime
) -> dict[str, str]:
    """The headers of one delivery attempt, Svc-Signature included."""
    timestamp = webhook_timestamp(now)
    covered = [(TIMESTAMP_HEADER, timestamp), ("Content-Type", "application/json")]
    signature = signing.sign_request(
        key.private_key,
        key.kid,
        method="POST",
        path=urlsplit(uri).path or "/",
        headers=covered,
        body=body,
        jku=jku,
    )
    return {**dict(covered), "Svc-Signature": signature}


@dataclass(frozen=True)
class Claimed:
    """A delivery this worker holds the lease of."""

    id: uuid.UUID
    uri: str
    payload: bytes
    attempt_count: int
    window_start: datetime
    lease_until: datetime


@dataclass(frozen=True)
class Outcome:
    """What one attempt got."""

    at: datetime
    status_code: int | None
    error: str | None
    latency_ms: float

    @property
    def delivered(self) -> bool:
        """A 2xx answer is a delivery."""
        return self.status_code is not None and 200 <= self.status_code < 300


class DeliveryWorker:
    """Sends due webhook deliveries, each attempt on its own: a slow receiver holds up only
    its own attempts, never another destination's.

    At most `max_in_flight` attempts run at once in this process, and at most
    `per_destination` at once to one destination (a merchant's URI) on all workers together.
    Each attempt is recorded as soon as it ends (the outcomes that end meanwhile share one
    transaction), which frees its slot; `on_settled` is then called, so that the caller's
    loop claims again.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        clock: ServiceClock,
        key: WebhookKey,
        public_url: str,
        *,
        max_in_flight: int = 100,
        per_destination: int,
        on_settled: Callable[[], None] | None = None,
        rng: random.Random | None = None,
        public_destinations_only: bool = False,
    ) -> None:
        self._public_only = public_destinations_only
        self._pool = pool
        self._clock = clock
        self._key = key
        self._jku = f"{public_url}/.well-known/jwks"
        self._max_in_flight = max_in_flight
        self._per_destination = per_destination
        self._on_settled = on_settled
        self._rng = rng or random.Random()
        self._session: aiohttp.ClientSession | None = None
        self._reserved = 0  # slots of claims under way, not yet tasks
        self._in_flight: set[asyncio.Task[None]] = set()
        self._recorder: GroupCommit[tuple[Claimed, Outcome], None] = GroupCommit(
            pool, self._write, max_batch=max_in_flight
        )

    async def _write(
        self, conn: Connection, results: Sequence[tuple[Claimed, Outcome]]
    ) -> list[None]:
        await record_outcomes(conn, results, self._clock.now(), self._rng)
        return [None] * len(results)

    def _client(self) -> aiohttp.ClientSession:
        # Created on first use, inside the event loop that will use it. No limit per host:
        # two merchants whose receivers share a host are two destinations, each kept to its
        # share by the claim; a limit per host would make one wait for the other's hang.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._max_in_flight,
                    limit_per_host=0,
                    resolver=PublicOnlyResolver() if self._public_only else None,
                ),
                timeout=aiohttp.ClientTimeout(total=ATTEMPT_TIMEOUT),
                headers={"User-Agent": "Bankrail-Webhooks/1"},
                auto_decompress=False,
            )
        return self._session

    async def close(self) -> None:
        """Let the attempts in flight end and be recorded, then release the connections."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def start_due(self) -> int:
        """Claim the deliveries that may be sent now and start sending them, without waiting
        for any answer; returns how many were started (0 when nothing is due or every slot
        is taken). The delivery loop's step."""
        return len(await self._dispatch())

    async def run_batch(self) -> int:
        """Claim the deliveries that may be sent now, send them and record every outcome;
        returns how many were attempted. One round, waited for."""
        started = await self._dispatch()
        await asyncio.gather(*started)
        return len(started)

    async def _dispatch(self) -> list[asyncio.Task[None]]:
        free = self._max_in_flight - len(self._in_flight) - self._reserved
        if free <= 0:
            return []
        self._reserved += free
        try:
            claimed = await self._claim(free)
        finally:
            self._reserved -= free
        started = [asyncio.create_task(self._send(delivery)) for delivery in claimed]
        self._in_flight.update(started)
        for task in started:
            task.add_done_callback(self._settled)
        return started

    def _settled(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        if self._on_settled is not None:
            self._on_settled()

    async def _send(self, delivery: Claimed) -> None:
        # A failure to record (the database unreachable) leaves the lease to run out: the
        # delivery is then sent again (at-least-once).
        try:
            await self._record([(delivery, await self._attempt(delivery))])
        except Exception:
            log.exception("webhook delivery %s: attempt not recorded", delivery.id)

    async def _claim(self, limit: int | None = None) -> list[Claimed]:
        rows = await self._pool.fetch(
            "SELECT * FROM bankrail_claim_webhook_deliveries($1, $2, $3, $4)",
            self._clock.now(),
            self._max_in_flight if limit is None else limit,
            self._per_destination,
            LEASE,
        )
        return [
            Claimed(
                r["id"],
                r["uri"],
                bytes(r["payload"]),
                r["attempt_count"],
                r["window_start"],
                r["lease_until"],
            )
            for r in rows
        ]

    async def _attempt(self, delivery: Claimed) -> Outcome:
        at = self._clock.now()
        headers = await CRYPTO.run(
            partial(signed_headers, self._key, self._jku, delivery.uri, delivery.payload, at)
        )
        started = time.perf_counter()
        try:
            if self._public_only:
                check_literal_destination(delivery.uri)  # names go through the resolver
            # A deadline for the whole attempt, not only for each read: a receiver that
            # trickles its answer must not hold its slot (and its lease) for long.
            async with (
                asyncio.timeout(ATTEMPT_TIMEOUT),
                self._client().post(
                    delivery.uri,
                    data=delivery.payload,
                    headers=headers,
                    allow_redirects=False,
                ) as response,
            ):
                status = response.status  # the body is never read: it may be huge
            return Outcome(at, status, None, (time.perf_counter() - started) * 1000)
        except TimeoutError:
            error = f"timeout after {ATTEMPT_TIMEOUT:g} s"
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:500] or type(exc).__name__
        return Outcome(at, None, error, (time.perf_counter() - started) * 1000)

    async def _record(self, results: list[tuple[Claimed, Outcome]]) -> None:
        """Record the outcomes (each in the next group commit)."""
        for _, outcome in results:
            record_webhook_attempt(outcome.status_code)
        await asyncio.gather(*(self._recorder.submit(result) for result in results))


def next_state(
    delivery: Claimed, outcome: Outcome, now: datetime, rng: random.Random | None = None
) -> tuple[str, datetime | None]:
    """The delivery's status after this attempt (`delivered` on a 2xx, else `pending` until
    the retry window ends, then `discarded`), and when it is tried again."""
    if outcome.delivered:
        return "delivered", None
    try:
        retry_at = next_attempt_at(delivery.window_start, now, delivery.attempt_count + 1, rng)
    except (OverflowError, ValueError):  # never let one delivery sink the batch
        log.exception("cannot schedule delivery %s; discarding it", delivery.id)
        retry_at = None
    return ("pending" if retry_at is not None else "discarded"), retry_at


async def record_outcomes(
    conn: Connection,
    results: Sequence[tuple[Claimed, Outcome]],
    now: datetime,
    rng: random.Random | None = None,
) -> None:
    """Record attempts of claimed deliveries, whoever made them (the HTTP delivery workers,
    or a listener's CLI reporting its local answer, events/listeners.py): each attempt is
    kept, and each delivery whose lease is still the one claimed moves to its next state
    (`next_state`)."""
    ids, statuses, next_times, counts, leases = [], [], [], [], []
    for delivery, outcome in results:
        status, retry_at = next_state(delivery, outcome, now, rng)
        ids.append(delivery.id)
        statuses.append(status)
        next_times.append(retry_at)
        counts.append(delivery.attempt_count + 1)
        leases.append(delivery.lease_until)
    # Only the lease holder moves the delivery on: a stale worker whose lease ran out
    # and was taken over only logs its attempt (which did happen: at-least-once).
    # The deliveries waiting behind an ordered one are not due before its next attempt:
    # they are moved to it, out of the claim's way (a receiver that fails for hours
    # would otherwise leave them for every claim to skip), and are due again as soon
    # as it is delivered or discarded. The claim alone keeps the order; this only
    # keeps the claim fast.
    await conn.execute(
        "WITH done AS (UPDATE webhook_deliveries d SET status = u.status,"
        " next_attempt_at = u.next_at, attempt_count = u.attempts, lease_until = NULL,"
        " updated_at = $6"
        " FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::int[],"
        " $5::timestamptz[]) AS u(id, status, next_at, attempts, lease)"
        " WHERE d.id = u.id AND d.lease_until = u.lease"
        " RETURNING d.id, d.status, d.next_attempt_at, d.ordering_key, d.ordering_seq)"
        " UPDATE webhook_deliveries s SET next_attempt_at = CASE"
        " WHEN done.status = 'pending' THEN done.next_attempt_at ELSE $6 END"
        " FROM done WHERE done.ordering_key IS NOT NULL"
        " AND s.ordering_key = done.ordering_key AND s.ordering_seq > done.ordering_seq"
        " AND s.status = 'pending' AND s.id NOT IN (SELECT id FROM done)"
        " AND CASE WHEN done.status = 'pending'"
        " THEN s.next_attempt_at < done.next_attempt_at ELSE s.next_attempt_at > $6 END",
        ids,
        statuses,
        next_times,
        counts,
        leases,
        now,
    )
    await conn.executemany(
        "INSERT INTO webhook_attempts (delivery_id, at, status_code, error, latency_ms)"
        " VALUES ($1, $2, $3, $4, $5)",
        [(d.id, o.at, o.status_code, o.error, o.latency_ms) for d, o in results],
    )
