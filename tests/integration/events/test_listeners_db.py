"""Webhook listeners against real PostgreSQL (events/listeners.py, docs/webhooks.md
"Listeners"): a listener is one more destination of the delivery core: its own delivery per
event while attached, claimed by its stream, answered through the same attempt recording and
retry schedule, never taken by the HTTP claim nor holding back the URI's deliveries;
detached listeners stop getting (and retrying) deliveries; a reset purges them."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import asyncpg
import pytest
import pytest_asyncio

from bankrail.core.clock import ServiceClock
from bankrail.core.problems import Conflict, NotFound
from bankrail.events import listeners
from bankrail.events.delivery import Outcome
from bankrail.events.outbox import Ordering, record_event
from bankrail.events.service import replay_delivery
from bankrail.merchants import closing
from bankrail.merchants import service as merchants

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(loop_scope="session")
async def clock(pool: asyncpg.Pool) -> ServiceClock:
    clock = ServiceClock()
    async with pool.acquire() as conn:
        await clock.refresh(conn)
    return clock


async def new_merchant(pool: asyncpg.Pool, now: datetime, uri: str | None) -> uuid.UUID:
    async with pool.acquire() as conn, conn.transaction():
        merchant_id = await merchants.create_merchant(conn, "Listener Ltd", now)
        await merchants.create_merchant_account(conn, merchant_id, "GBP", None, now)
        if uri is not None:
            await merchants.set_webhooks(conn, merchant_id, None, uri)
    return merchant_id


async def attach(
    pool: asyncpg.Pool,
    merchant_id: uuid.UUID,
    now: datetime,
    listener_id: uuid.UUID | None = None,
    event_types: list[str] | None = None,
) -> uuid.UUID:
    made = listener_id or uuid.uuid4()
    async with pool.acquire() as conn:
        await listeners.attach(
            conn,
            merchant_id=merchant_id,
            listener_id=made,
            event_types=event_types,
            forward_path="/local/hooks",
            now=now,
        )
    return made


async def event(
    pool: asyncpg.Pool,
    merchant_id: uuid.UUID,
    now: datetime,
    event_type: str = "topup_received",
    ordering: Ordering | None = None,
) -> uuid.UUID:
    async with pool.acquire() as conn, conn.transaction():
        return await record_event(
            conn,
            merchant_id=merchant_id,
            family="payouts",
            event_type=event_type,
            body={"n": 1},
            now=now,
            ordering=ordering,
        )


async def deliveries(pool: asyncpg.Pool, event_id: uuid.UUID) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT * FROM webhook_deliveries WHERE event_id = $1 ORDER BY listener_id NULLS FIRST",
        event_id,
    )


async def answer(
    pool: asyncpg.Pool,
    merchant_id: uuid.UUID,
    listener_id: uuid.UUID,
    delivery_id: uuid.UUID,
    status: int | None,
    now: datetime,
) -> dict[str, object]:
    async with pool.acquire() as conn, conn.transaction():
        return await listeners.record_answer(
            conn,
            merchant_id=merchant_id,
            listener_id=listener_id,
            delivery_id=delivery_id,
            outcome=Outcome(now, status, None if status else "refused", 1.0),
            now=now,
        )


async def test_each_attached_listener_gets_its_own_delivery_beside_the_uris(
    pool: asyncpg.Pool, clock: ServiceClock
) -> None:
    now = clock.now()
    merchant_id = await new_merchant(pool, now, "http://127.0.0.1:1/hooks/v1")
    first = await attach(pool, merchant_id, now)
    second = await attach(pool, merchant_id, now)
    only_payouts = await attach(pool, merchant_id, now, event_types=["payout_settled"])

    event_id = await event(pool, merchant_id, now)

    found = await deliveries(pool, event_id)
    assert found[0]["listener_id"] is None  # the URI's
    assert {r["listener_id"] for r in found[1:]} == {first, second}
    assert only_payouts not in {r["listener_id"] for r in found}
    assert all(r["status"] == "pending" for r in found)
    # The HTTP claim takes the URI's delivery only.
    claimed = await pool.fetch(
        "SELECT id FROM bankrail_claim_webhook_deliveries($1, 1000, 1000, $2)",
        now + timedelta(seconds=1),
        timedelta(seconds=60),
    )
    ours = {r["id"] for r in found}
    assert {r["id"] for r in claimed} & ours == {found[0]["id"]}


async def test_a_listener_answer_delivers_or_schedules_the_next_attempt(
    pool: asyncpg.Pool, clock: ServiceClock
) -> None:
    now = clock.now()
    merchant_id = await new_merchant(pool, now, None)
    listener_id = await attach(pool, merchant_id, now)
    event_id = await event(pool, merchant_id, now)

    [sent] = await listeners.claim(pool, listener_id, now)
    assert sent.event_id == event_id
    assert sent.signed_path == "/local/hooks"  # no URI registered: the forward path
    assert await listeners.claim(pool, listener_id, now) == []  # leased

    failed = await answer(pool, merchant_id, listener_id, sent.claimed.id, 500, now)
    assert (failed["status"], failed["attempt_count"]) == ("pending", 1)
    assert await listeners.claim(pool, listener_id, now) == []  # not due before 1 s
    [again] = await listeners.claim(pool, listener_id, now + timedelta(seconds=1))
    assert again.claimed.id == sent.claimed.id
    done = await answer(pool, merchant_id, listener_id, sent.claimed.id, 204, now)
    assert (done["status"], done["attempt_count"]) == ("delivered", 2)
    with pytest.raises(Conflict):
        await answer(pool, merchant_id, listener_id, sent.claimed.id, 200, now)
    recorded = await pool.fetch(
        "SELECT status_code FROM webhook_attempts WHERE delivery_id = $1 ORDER BY id",
        sent.claimed.id,
    )
    assert [r["status_code"] for r in recorded] == [500, 204]

    # A replay sends it to the listener again (not to a URI: there is none).
    async with pool.acquire() as conn, conn.transaction():
        replayed = await replay_delivery(conn, sent.claimed.id, now)
    assert (replayed["status"], replayed["listener_id"]) == ("pending", str(listener_id))


async def test_the_uri_of_the_event_family_is_what_is_signed_when_registered(
    pool: asyncpg.Pool, clock: ServiceClock
) -> None:
    now = clock.now()
    merchant_id = await new_merchant(pool, now, "https://shop.example/hooks/v1?x=1")
    listener_id = await attach(pool, merchant_id, now)
    await event(pool, merchant_id, now)
    [sent] = await listeners.claim(pool, listener_id, now)
    assert sent.signed_path == "/hooks/v1"


async def test_attaching_again_takes_back_what_was_sent_but_not_answered(
    pool: asyncpg.Pool, clock: ServiceClock
) -> None:
    now = clock.now()
    merchant_id = await new_merchant(pool, now, None)
    listener_id = await attach(pool, merchant_id, now)
    await event(pool, merchant_id, now)
    [sent] = await listeners.claim(pool, listener_id, now)

    await attach(pool, merchant_id, now, listener_id)

    [again] = await listeners.claim(pool, listener_id, now)
    assert again.claimed.id == sent.claimed.id
    # The answer to the first send is refused: the delivery was taken back and sent again.
    await attach(pool, merchant_id, now, listener_id)
    with pytest.raises(Conflict):
        await answer(pool, merchant_id, listener_id, sent.claimed.id, 200, now)


async def test_another_merchants_listener_is_not_found(
    pool: asyncpg.Pool, clock: ServiceClock
) -> None:
    now = clock.now()
    owner = await new_merchant(pool, now, None)
    other = await new_merchant(pool, now, None)
    listener_id = await attach(pool, owner, now)
    await event(pool, owner, now)
    [sent] = await listeners.claim(pool, listener_id, now)

    with pytest.raises(NotFound):
        await attach(pool, other, now, listener_id)
    with pytest.raises(NotFound):
        await answer(pool, other, listener_id, sent.claimed.id, 200, now)


async def test_a_detached_listener_gets_nothing_new_and_its_pending_deliveries_are_discarded(
    pool: asyncpg.Pool, clock: ServiceClock
) -> None:
    now = clock.now()
    merchant_id = await new_merchant(pool, now, None)
    await attach(pool, merchant_id, now)
    waiting = await event(pool, merchant_id, now + timedelta(hours=1))

    later = now + listeners.DETACHED_AFTER + timedelta(seconds=1)
    after_detach = await event(pool, merchant_id, later)
    assert [r["listener_id"] for r in await deliveries(pool, after_detach)] == [None]

    async with pool.acquire() as conn:
        discarded = await listeners.discard_abandoned(conn, later - listeners.DETACHED_AFTER, 100)
    assert discarded == 1
    [_, mine] = await deliveries(pool, waiting)
    assert mine["status"] == "discarded"

    # Once the webhook retention has deleted its finished deliveries, the listener goes too.
    listener_id = mine["listener_id"]
    async with pool.acquire() as conn:
        await listeners.discard_abandoned(conn, later - listeners.DETACHED_AFTER, 100)
        assert await conn.fetchval(
            "SELECT count(*) FROM webhook_listeners WHERE id = $1", listener_id
        )
        await conn.execute("DELETE FROM webhook_deliveries WHERE listener_id = $1", listener_id)
        assert await listeners.discard_abandoned(conn, later - listeners.DETACHED_AFTER, 100) >= 1
        assert not await conn.fetchval(
            "SELECT count(*) FROM webhook_listeners WHERE id = $1", listener_id
        )


async def test_the_listeners_order_is_its_own_and_never_holds_back_the_uri(
    pool: asyncpg.Pool, clock: ServiceClock
) -> None:
    now = clock.now()
    merchant_id = await new_merchant(pool, now, "http://127.0.0.1:1/hooks")
    listener_id = await attach(pool, merchant_id, now)
    key = uuid.uuid4()
    first = await event(pool, merchant_id, now, "payout_authorised", Ordering(key, 1))
    second = await event(pool, merchant_id, now, "payout_submitted", Ordering(key, 2))

    # The listener gets the first only, until it is answered.
    [sent] = await listeners.claim(pool, listener_id, now)
    assert sent.event_id == first
    assert await listeners.claim(pool, listener_id, now) == []
    # The URI's deliveries wait only for each other: the listener's pending first event holds
    # back none of them (the URI's first is claimable, its second waits for it alone).
    claimed = await pool.fetch(
        "SELECT id FROM bankrail_claim_webhook_deliveries($1, 1000, 1000, $2)",
        now,
        timedelta(seconds=60),
    )
    uri_first = (await deliveries(pool, first))[0]["id"]
    assert uri_first in {r["id"] for r in claimed}
    await answer(pool, merchant_id, listener_id, sent.claimed.id, 200, now)
    [then] = await listeners.claim(pool, listener_id, now)
    assert then.event_id == second


async def test_a_reset_purges_the_listeners_deliveries_and_keeps_the_listener(
    pool: asyncpg.Pool, clock: ServiceClock
) -> None:
    now = clock.now()
    merchant_id = await new_merchant(pool, now, None)
    listener_id = await attach(pool, merchant_id, now)
    await event(pool, merchant_id, now)

    async with pool.acquire() as conn:
        await closing.reset_merchant(conn, merchant_id, now)

    left = await pool.fetchval(
        "SELECT count(*) FROM webhook_deliveries WHERE listener_id = $1", listener_id
    )
    assert left == 0
    assert await pool.fetchval("SELECT count(*) FROM webhook_listeners WHERE id = $1", listener_id)
    # Still attached: the next event reaches it.
    await event(pool, merchant_id, now)
    assert len(await listeners.claim(pool, listener_id, now)) == 1


async def test_a_stream_sends_the_next_batch_once_the_one_before_is_answered(
    pool: asyncpg.Pool, clock: ServiceClock
) -> None:
    now = clock.now()
    merchant_id = await new_merchant(pool, now, None)
    listener_id = await attach(pool, merchant_id, now)
    first = await event(pool, merchant_id, now)
    second = await event(pool, merchant_id, now + timedelta(milliseconds=1))
    later = now + timedelta(seconds=1)

    [sent] = await listeners.claim(pool, listener_id, later, limit=1)
    assert sent.event_id == first
    assert await listeners.claim(pool, listener_id, later) == []  # the first awaits its answer
    await answer(pool, merchant_id, listener_id, sent.claimed.id, 200, later)
    [then] = await listeners.claim(pool, listener_id, later)
    assert then.event_id == second
