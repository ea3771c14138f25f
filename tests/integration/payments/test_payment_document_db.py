"""The payment resource read in one statement (`payments._store.get_payment_document`, the
same statement and `render_row` as each item of `GET /v3/payments`) on real PostgreSQL.

Promise: `status_history` is the stored history, entry for entry, through every status a
payment takes; the timestamps read as `iso_utc` writes them; another merchant's payment is
not found.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import asyncpg
import orjson
import pytest

from bankrail.core.clock import ServiceClock
from bankrail.core.problems import NotFound
from bankrail.core.timefmt import iso_utc
from bankrail.payments._store import get_payment_document, lock_payment, save, state_of
from support.payments import new_payment


async def _stored_history(pool: asyncpg.Pool, payment_id: uuid.UUID) -> bytes:
    async with pool.acquire() as conn:
        history = await conn.fetchval("SELECT history FROM payments WHERE id = $1", payment_id)
    return orjson.dumps(history)


async def test_the_status_history_is_the_stored_one_through_every_status(
    pool: asyncpg.Pool,
) -> None:
    now = ServiceClock().now()
    payment_id, merchant_id = await new_payment(pool, now)
    steps = ("start_authorization", "authorize", "execute", "settle")
    for number, step in enumerate((None, *steps)):
        async with pool.acquire() as conn, conn.transaction():
            if step is not None:
                row = await lock_payment(conn, payment_id)
                moment = now + timedelta(seconds=number)
                state = state_of(row)
                changed = (
                    state.start_authorization() if number == 1 else getattr(state, step)(moment)
                )
                await save(conn, row, changed, moment)
            document = await get_payment_document(conn, payment_id, merchant_id)
        encoded = orjson.dumps(document)
        assert b'"status_history":' + await _stored_history(pool, payment_id) in encoded
        assert len(orjson.loads(encoded)["status_history"]) == number + 1
    assert document["created_at"] == iso_utc(now)
    assert document["settled_at"] == iso_utc(now + timedelta(seconds=4))
    assert document["metadata"] == {"order": "A, 1: first"}


async def test_another_merchants_payment_is_not_found(pool: asyncpg.Pool) -> None:
    now = ServiceClock().now()
    payment_id, _merchant_id = await new_payment(pool, now)
    async with pool.acquire() as conn:
        with pytest.raises(NotFound):
            await get_payment_document(conn, payment_id, uuid.uuid4())
