"""The SQL side of idempotency (db/functions/idempotency.sql) on real PostgreSQL.

Promise: every batch read that claims keys (the generic claim and the acceptance reads of
payouts, payments, payments on mandates and refunds) claims them through the one function
`bankrail_claimed_keys`, in the same statement: each request learns, with its key's lock and
stored answer, whether its signature was accepted before. No read claims keys another way.
The answers a batch stores are one jsonb group, stored byte for byte with their signatures.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from bankrail.db.migrations import available_functions
from bankrail.security.idempotency import AnswersToStore, KeyedRequest, key_item

TTL = timedelta(hours=6)
READS = [
    "bankrail_claim_idempotency_keys",
    "bankrail_read_mandate_payment_requests",
    "bankrail_read_payment_requests",
    "bankrail_read_payout_batch",
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


async def test_a_batch_that_stores_answers_stores_them_with_their_signatures(
    pool: asyncpg.Pool,
) -> None:
    # The answers group (jsonb) as every batch writer passes it: the answer byte for byte,
    # its date, and the signature it was accepted with remembered.
    signed = KeyedRequest(f"v3:{uuid.uuid4()}", "signed", b"\x00f\xff", TTL, USED)
    unsigned = KeyedRequest(signed.scope, "unsigned", b"g", TTL)
    answers = AnswersToStore()
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    answers.add(signed, (202, b'{"id": "\xc3\xa9"}'), at)
    answers.add(unsigned, (400, b"\x00\xff"), at)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT bankrail_store_idempotent_answers($1)", answers.rows)
        stored = await conn.fetch(
            "SELECT key, fingerprint, status_code, body, created_at FROM idempotency_keys"
            " WHERE scope = $1 ORDER BY key",
            signed.scope,
        )
        digests = await conn.fetchval(
            "SELECT count(*) FROM accepted_signatures WHERE digest = $1", USED
        )
    assert [tuple(row) for row in stored] == [
        ("signed", b"\x00f\xff", 202, b'{"id": "\xc3\xa9"}', at),
        ("unsigned", b"g", 400, b"\x00\xff", at),
    ]
    assert digests == 1
