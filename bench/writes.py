"""The signed writes a merchant sends in volume, beside POST /v3/payouts (bench/http_scenarios.py):
POST /v3/payments (user-selected and preselected), POST /v3/payments/{id}/authorization-flow,
POST /v3/payments/{id}/refunds, POST /v3/payments on a mandate and POST /v1/payouts.

Each is measured by `saturated_and_paced`: a closed loop between two verify rates, then an open
loop at 80 % of the rate it reached, each on a batch of its own, signed (and, where a write
acts on a payment, the payments created) before the clock starts. After each batch its check
says what it left behind: every accepted payment stored, every flow started, every accepted
refund, payment on a mandate and v1 payout executed."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import asyncpg

from bankrail.security import signing
from bench.loadgen import http_request, run_load
from bench.measure import Batch, Options, saturated_and_paced
from bench.seed import seed_settled_payments
from bench.service import (
    Merchant,
    Server,
    authorised_mandate,
    mandate_payment_body,
    payment_body,
    signed_post,
)

PRESELECTED_PROVIDER = "mock-payments-gb-redirect"
"""A redirect provider serving GBP: the preselected payments' bank, and so their flows'."""
RETURN_URI = "https://bench.example/back"
V1_IBAN = "GB29NWBK60161331926819"
"""A GB IBAN: what a GBP payout of API v1 pays."""
REFUNDED_PAYMENTS = 50
"""Settled payments each refund batch spreads its refunds over (a refund locks its payment)."""
REFUND_AMOUNT = 1
"""Each refund is of 1 penny, so every refund of a batch fits in its payment."""
DRAIN_LIMIT_SECONDS = 300.0


def _accepted(summary: dict[str, Any]) -> int:
    """How many requests of a run the server accepted (2xx)."""
    return round(float(summary["requests"]) * float(summary["ok_ratio"]))


def tagged_payment_body(merchant: Merchant, user_id: str, *, preselected: bool) -> dict[str, Any]:
    """A GBP payment awaiting authorisation, whose payer `user_id` names its batch: the
    payer picks the bank (user-selected) or the merchant did (preselected)."""
    body = payment_body(merchant)
    body["user"] = {"id": user_id}
    if preselected:
        body["payment_method"]["provider_selection"] = {
            "type": "preselected",
            "provider_id": PRESELECTED_PROVIDER,
        }
    return body


async def payments(
    server: Server,
    merchant: Merchant,
    count: int,
    concurrency: int,
    options: Options,
    *,
    preselected: bool,
) -> dict[str, Any]:
    """Signed POST /v3/payments, each batch's payments with a payer of their own; after each
    batch, the count of those stored awaiting authorisation (under `stored`)."""

    async def prepare() -> Batch:
        user_id = f"bench-{uuid.uuid4()}"
        body = tagged_payment_body(merchant, user_id, preselected=preselected)
        requests = [signed_post(server, merchant, "/v3/payments", body) for _ in range(count)]

        async def check(summary: dict[str, Any]) -> dict[str, Any]:
            return await _payments_in(server, merchant, user_id, "authorization_required", summary)

        return Batch(requests, check)

    return await saturated_and_paced(server, prepare, concurrency, options, check_key="stored")


async def authorization_flows(
    server: Server, merchant: Merchant, count: int, concurrency: int, options: Options
) -> dict[str, Any]:
    """Signed POST /v3/payments/{id}/authorization-flow `{redirect: {return_uri}}`, one per
    preselected payment (its answer: the redirect to the mock bank's consent page). Each
    batch's payments are created through the API before the clock starts; after the batch,
    the count of them whose flow started (under `started`)."""

    async def prepare() -> Batch:
        user_id = f"bench-{uuid.uuid4()}"
        requests = await flow_starts(server, merchant, user_id, count, concurrency)

        async def check(summary: dict[str, Any]) -> dict[str, Any]:
            return await _payments_in(server, merchant, user_id, "authorizing", summary)

        return Batch(requests, check)

    return await saturated_and_paced(server, prepare, concurrency, options, check_key="started")


async def flow_starts(
    server: Server, merchant: Merchant, user_id: str, count: int, concurrency: int
) -> list[bytes]:
    """`count` signed POST /v3/payments/{id}/authorization-flow `{redirect: {return_uri}}`
    prepared, one on each of `count` preselected payments of `user_id` made through the API
    first (outside any measurement)."""
    await made_payments(server, merchant, user_id, count, concurrency, preselected=True)
    ids = await _payment_ids(server, merchant, user_id)
    assert len(ids) == count, f"{len(ids)} of {count} payments were made"
    flow = {"redirect": {"return_uri": RETURN_URI}}
    return [
        signed_post(server, merchant, f"/v3/payments/{i}/authorization-flow", flow) for i in ids
    ]


async def made_payments(
    server: Server,
    merchant: Merchant,
    user_id: str,
    count: int,
    concurrency: int,
    *,
    preselected: bool,
) -> None:
    """`count` payments awaiting authorisation paid by `user_id`, made through the API outside
    any measurement (`run_load`, not `measured`)."""
    body = tagged_payment_body(merchant, user_id, preselected=preselected)
    creations = [signed_post(server, merchant, "/v3/payments", body) for _ in range(count)]
    await run_load("127.0.0.1", server.port, creations, concurrency=concurrency)


async def _payment_ids(server: Server, merchant: Merchant, user_id: str) -> list[str]:
    conn = await asyncpg.connect(server.dsn())
    try:
        rows = await conn.fetch(
            "SELECT id FROM payments WHERE merchant_id = $1 AND user_id = $2 ORDER BY created_at",
            uuid.UUID(merchant.merchant_id),
            user_id,
        )
    finally:
        await conn.close()
    return [str(row["id"]) for row in rows]


async def _payments_in(
    server: Server, merchant: Merchant, user_id: str, status: str, accepted: dict[str, Any]
) -> dict[str, int]:
    """Every 2xx of the batch paid by `user_id` must be one of its payments now in `status`."""
    conn = await asyncpg.connect(server.dsn())
    try:
        found = await conn.fetchval(
            "SELECT count(*) FROM payments WHERE merchant_id = $1 AND user_id = $2 AND status = $3",
            uuid.UUID(merchant.merchant_id),
            user_id,
            status,
        )
    finally:
        await conn.close()
    created = _accepted(accepted)
    return {"created": created, "stored": int(found), "lost": created - int(found)}


async def refunds(
    server: Server, merchant: Merchant, count: int, concurrency: int, options: Options
) -> dict[str, Any]:
    """Signed POST /v3/payments/{id}/refunds, each with a new Idempotency-Key, over settled
    payments seeded (and the requests signed) before the clock starts, new ones for each
    batch; then the wait until every accepted refund has executed, and the count of those
    that did (under `execution`)."""

    async def prepare() -> Batch:
        payment_ids = await seed_settled_payments(
            server.dsn(),
            merchant.merchant_id,
            merchant.account_id,
            min(REFUNDED_PAYMENTS, count),
            REFUND_AMOUNT * count,
        )
        body = {"amount_in_minor": REFUND_AMOUNT, "reference": "bench refund"}
        requests = [
            signed_post(
                server, merchant, f"/v3/payments/{payment_ids[i % len(payment_ids)]}/refunds", body
            )
            for i in range(count)
        ]

        async def check(summary: dict[str, Any]) -> dict[str, Any]:
            return await _refunds_executed(server, payment_ids, summary)

        return Batch(requests, check)

    return await saturated_and_paced(server, prepare, concurrency, options, check_key="execution")


async def _refunds_executed(
    server: Server, payment_ids: list[str], accepted: dict[str, Any]
) -> dict[str, Any]:
    """Poll (bounded) until no refund of these payments is still on its way, then count:
    every 201 must be a refund that executed, and each payment's refunded amount their sum."""
    ids = [uuid.UUID(i) for i in payment_ids]
    conn = await asyncpg.connect(server.dsn())
    try:
        unfinished = (
            "SELECT count(*) FROM refunds WHERE payment_id = ANY($1::uuid[])"
            " AND stage NOT IN ('executed', 'failed')"
        )
        left_at_end, left, drain = await _drain(conn, unfinished, ids)
        counts = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE stage = 'executed') AS executed,"
            " count(*) FILTER (WHERE stage = 'failed') AS failed,"
            " coalesce(sum(amount_in_minor) FILTER (WHERE stage <> 'failed'), 0) AS amount"
            " FROM refunds WHERE payment_id = ANY($1::uuid[])",
            ids,
        )
        refunded = await conn.fetchval(
            "SELECT coalesce(sum(refunded_amount_in_minor), 0) FROM payments"
            " WHERE id = ANY($1::uuid[])",
            ids,
        )
    finally:
        await conn.close()
    assert counts is not None
    return {
        **_executed(accepted, counts, (left_at_end, left, drain)),
        "refunded_amount_matches": int(refunded) == int(counts["amount"]),
    }


def _executed(
    accepted: dict[str, Any], counts: Any, drained: tuple[int, int, float]
) -> dict[str, Any]:
    """What a batch of writes that execute in the background left: how many were accepted,
    executed and failed (`counts`), how many were still on their way when the load ended
    and after the drain, how long the drain took, and how many accepted were not executed."""
    created = _accepted(accepted)
    left_at_end, left, drain = drained
    return {
        "accepted": created,
        "executed": int(counts["executed"]),
        "failed": int(counts["failed"]),
        "unexecuted_when_load_ended": left_at_end,
        "unexecuted_after_drain": left,
        "drain_seconds": drain,
        "lost": created - int(counts["executed"]),
    }


async def _drain(conn: asyncpg.Connection, unfinished: str, *args: Any) -> tuple[int, int, float]:
    """Poll `unfinished` (a count) until it is 0 or `DRAIN_LIMIT_SECONDS` passed: (the count
    at first, the count at last, the seconds it took)."""
    left_at_end: int = await conn.fetchval(unfinished, *args)
    began = time.monotonic()
    left = left_at_end
    while left and time.monotonic() - began < DRAIN_LIMIT_SECONDS:
        await asyncio.sleep(0.05)
        left = await conn.fetchval(unfinished, *args)
    return left_at_end, left, round(time.monotonic() - began, 2)


async def mandate_payments(
    server: Server, merchant: Merchant, count: int, concurrency: int, options: Options
) -> dict[str, Any]:
    """Signed POST /v3/payments of 1 penny on one authorised mandate, whose payments are
    decided with its row locked, a batch at a time. After
    each batch, the wait until its payments settled and the count of those that did (under
    `execution`): their jobs would otherwise run during the next scenario."""
    mandate_id = authorised_mandate(server, merchant)
    body = mandate_payment_body(mandate_id)

    async def prepare() -> Batch:
        settled_before = (await _mandate_payments(server, mandate_id))["settled"]
        requests = [signed_post(server, merchant, "/v3/payments", body) for _ in range(count)]

        async def check(summary: dict[str, Any]) -> dict[str, Any]:
            figures = await _mandate_payments(server, mandate_id, summary)
            figures["settled"] -= settled_before
            figures["lost"] = figures["accepted"] - figures["settled"]
            return figures

        return Batch(requests, check)

    return await saturated_and_paced(server, prepare, concurrency, options, check_key="execution")


async def _mandate_payments(
    server: Server, mandate_id: str, accepted: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Wait (bounded) until no payment on the mandate is still on its way, then count those
    settled (all of the mandate's)."""
    conn = await asyncpg.connect(server.dsn())
    try:
        unfinished = (
            "SELECT count(*) FROM payments WHERE mandate_id = $1"
            " AND status NOT IN ('payment_settled', 'payment_failed')"
        )
        left_at_end, left, drain = await _drain(conn, unfinished, uuid.UUID(mandate_id))
        settled = await conn.fetchval(
            "SELECT count(*) FROM payments WHERE mandate_id = $1 AND status = 'payment_settled'",
            uuid.UUID(mandate_id),
        )
    finally:
        await conn.close()
    return {
        "accepted": _accepted(accepted) if accepted else 0,
        "settled": int(settled),
        "unexecuted_when_load_ended": left_at_end,
        "unexecuted_after_drain": left,
        "drain_seconds": drain,
    }


def v1_payout(server: Server, merchant: Merchant, transaction_id: str) -> bytes:
    """A prepared POST /v1/payouts of 1 penny to a GB IBAN, signed with `X-SVC-Signature`
    over no header (API v1 has no Idempotency-Key: `transaction_id` is its key)."""
    raw = json.dumps(
        {
            "transaction_id": transaction_id,
            "beneficiary_name": "Bench Payee",
            "beneficiary_iban": V1_IBAN,
            "beneficiary_reference": "bench",
            "currency": "GBP",
            "amount_in_minor": 1,
            "context_code": "withdrawal",
        }
    ).encode()
    signature = signing.sign_request(
        merchant.key, merchant.kid, method="POST", path="/v1/payouts", headers=[], body=raw
    )
    return http_request(
        "POST",
        "/v1/payouts",
        f"127.0.0.1:{server.port}",
        {
            "Authorization": f"Bearer {merchant.token}",
            "Content-Type": "application/json",
            "X-SVC-Signature": signature,
        },
        raw,
    )


async def v1_payouts(
    server: Server, merchant: Merchant, count: int, concurrency: int, options: Options
) -> dict[str, Any]:
    """Signed POST /v1/payouts, each with a new `transaction_id`; after each batch, the wait
    until every payout it got accepted executed, and the count of those that did (under
    `execution`)."""

    async def prepare() -> Batch:
        ids = [str(uuid.uuid4()) for _ in range(count)]
        requests = [v1_payout(server, merchant, i) for i in ids]

        async def check(summary: dict[str, Any]) -> dict[str, Any]:
            return await _v1_payouts_executed(server, merchant, ids, summary)

        return Batch(requests, check)

    return await saturated_and_paced(server, prepare, concurrency, options, check_key="execution")


async def _v1_payouts_executed(
    server: Server, merchant: Merchant, transaction_ids: list[str], accepted: dict[str, Any]
) -> dict[str, Any]:
    """Poll (bounded) until none of these payouts is still on its way, then count: every 202
    must be a payout that executed."""
    ids = [uuid.UUID(i) for i in transaction_ids]
    merchant_id = uuid.UUID(merchant.merchant_id)
    conn = await asyncpg.connect(server.dsn())
    try:
        unfinished = (
            "SELECT count(*) FROM payouts WHERE merchant_id = $1"
            " AND transaction_id = ANY($2::uuid[]) AND stage NOT IN ('executed', 'failed')"
        )
        left_at_end, left, drain = await _drain(conn, unfinished, merchant_id, ids)
        counts = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE stage = 'executed') AS executed,"
            " count(*) FILTER (WHERE stage = 'failed') AS failed"
            " FROM payouts WHERE merchant_id = $1 AND transaction_id = ANY($2::uuid[])",
            merchant_id,
            ids,
        )
    finally:
        await conn.close()
    assert counts is not None
    return _executed(accepted, counts, (left_at_end, left, drain))
