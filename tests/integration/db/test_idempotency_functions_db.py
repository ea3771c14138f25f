"""The SQL side of idempotency (db/functions/idempotency.sql) on real PostgreSQL.

Promise: every batch read that claims keys (the generic claim and the acceptance reads of
payouts, payments, payments on mandates and refunds) claims them through the one function
`bankrail_claimed_keys`, in the same statement: each request learns, with its key's lock and
stored answer, whether its signature was accepted before. No read claims keys another way.
The functions that store answers still take the argument lists of the release before.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from bankrail.db.migrations import available_functions
from bankrail.security.idempotency import KeyedRequest, key_item

TTL = timedelta(hours=6)
READS = [
    "bankrail_claim_idempotency_keys",
    "bankrail_read_mandate_payment_requests",
    "bankrail_read_payment_requests",
    "bankrail_read_payout_requests",
    "bankrail_read_refund_requests",
]
USED = b"u" * 32


def _bodies() -> dict[str, str]:
    """The body of every function of db/functions/, by name."""
    return {
        name: body
        for _, sql in available_functions()
        for name, body in re.findall(
            r"CREATE OR REPLACE FUNCTION (\w+)\(.*?\$\$(.*?)\$\$", sql, re.DOTALL
        )
    }


def test_every_read_that_locks_keys_claims_them_through_the_one_function() -> None:
    bodies = _bodies()
    assert (
        sorted(n for n, body in bodies.items() if "bankrail_lock_idempotency_keys(" in body)
        == READS
    )
    assert sorted(n for n, body in bodies.items() if "bankrail_claimed_keys(" in body) == READS
    reading = [n for n, body in bodies.items() if re.search(r"JOIN\s+idempotency_keys", body)]
    assert reading == ["bankrail_claimed_keys"]


@pytest.mark.parametrize("function", READS)
async def test_each_read_tells_which_signatures_were_accepted_before(
    pool: asyncpg.Pool, function: str
) -> None:
    merchant_id = str(uuid.uuid4())
    requests = [
        KeyedRequest(f"v3:{merchant_id}", "used", b"f", TTL, USED),
        KeyedRequest(f"v3:{merchant_id}", "fresh", b"f", TTL, b"n" * 32),
        KeyedRequest(f"v3:{merchant_id}", "unsigned", b"f", TTL),
        None,
    ]
    items = [{**key_item(keyed), "merchant_id": merchant_id} for keyed in requests]
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO accepted_signatures (digest, accepted_at) VALUES ($1, now())", USED
        )
        rows = await conn.fetch(f"SELECT * FROM {function}($1::jsonb)", items)
    assert [(row["locked"], row["signature_used"]) for row in rows] == [
        (True, True),
        (True, False),
        (True, False),
        (True, False),
    ]


@pytest.mark.parametrize(
    ("function", "arguments"),
    [
        ("bankrail_store_idempotent_answers", [[]] * 6),
        ("bankrail_write_payment_creations", [[], "job", *[[]] * 6]),
        ("bankrail_write_payout_acceptances", [[], "job", *[[]] * 21]),
        ("bankrail_write_refund_acceptances", [[], "job", *[[]] * 23]),
    ],
)
async def test_the_release_before_still_stores_answers_without_signatures(
    pool: asyncpg.Pool, function: str, arguments: list[Any]
) -> None:
    # During a rolling upgrade a host of the release before calls these with the argument
    # lists it knows: the signatures come last, with a default (docs/operations.md).
    placeholders = ", ".join(f"${n}" for n in range(1, len(arguments) + 1))
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(f"SELECT {function}({placeholders})", *arguments)
