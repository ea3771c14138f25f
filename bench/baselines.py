"""Baselines measured in the same run as the service figures: what one core can sign and
verify with ES512, and how many single-row durable INSERT commits PostgreSQL takes."""

from __future__ import annotations

import time
import uuid

import asyncpg

from bankrail.security import signing


def es512_rates(seconds: float) -> tuple[float, float]:
    """(signatures/s, verifications/s) on one core, for a typical request signature."""
    key = signing.generate_private_key()
    body, headers = _typical_request()
    signed = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        signing.sign_request(
            key, "kid", method="POST", path="/v3/payouts", headers=headers, body=body
        )
        signed += 1
    return signed / (time.perf_counter() - started), verify_rate(seconds)


def verify_rate(seconds: float) -> float:
    """ES512 verifications/s on one core, for a typical request signature (the figure the
    POST /v3/payouts target is a fraction of; measured again next to that scenario, since
    this machine's speed moves during a run)."""
    key = signing.generate_private_key()
    body, headers = _typical_request()
    signature = signing.sign_request(
        key, "kid", method="POST", path="/v3/payouts", headers=headers, body=body
    )
    public = key.public_key()
    parsed = signing.parse_signature(signature)
    lowered = {k.lower(): v for k, v in headers}
    verified = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        signing.verify_request(
            public, parsed, method="POST", path="/v3/payouts", headers=lowered, body=body
        )
        verified += 1
    return verified / (time.perf_counter() - started)


def verify_control(around_seconds: float, seconds: float) -> float:
    """A loop that only verifies, read as the bench reads a write: its rate (`seconds`
    long) as a share of the verify rate read just before and just after it (each
    `around_seconds` long). On a machine whose speed holds it is 1; how far it strays says
    how far any share of the verify rate measured there may stray by the machine alone."""
    before = verify_rate(around_seconds)
    during = verify_rate(seconds)
    after = verify_rate(around_seconds)
    return during / ((before + after) / 2)


def _typical_request() -> tuple[bytes, list[tuple[str, str]]]:
    body = b'{"merchant_account_id":"' + str(uuid.uuid4()).encode() + b'","amount_in_minor":100}'
    return body, [("Idempotency-Key", str(uuid.uuid4()))]


async def insert_commit_rate(dsn: str, count: int) -> float:
    """Single-row INSERTs, each its own durable commit, on one connection.

    A regular table: a temporary one is not WAL-logged, so its commits never wait for a
    flush and would overstate what a durable commit costs.
    """
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS bench_commit (id bigint, at timestamptz)")
        await conn.execute("SET synchronous_commit = on")
        started = time.perf_counter()
        for i in range(count):
            await conn.execute("INSERT INTO bench_commit VALUES ($1, now())", i)
        return count / (time.perf_counter() - started)
    finally:
        await conn.close()
