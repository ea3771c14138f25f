"""The main reads: GET /v3/payouts/{id}, GET /v3/payments/{id}, GET /v3/payments?limit=50 and
GET /v3/merchant-accounts, each measured by `saturated_and_paced` (a closed loop between two
verify rates, then an open loop at 80 % of the rate it reached) on requests prepared once."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from bench.loadgen import http_request
from bench.measure import Batch, Options, saturated_and_paced
from bench.service import Merchant, Server

SAMPLE = 50
"""Resources a GET by id cycles over."""


def _gets(server: Server, merchant: Merchant, paths: list[str], count: int) -> list[bytes]:
    """`count` prepared GETs cycling over `paths`."""
    host = f"127.0.0.1:{server.port}"
    auth = {"Authorization": f"Bearer {merchant.token}"}
    return [http_request("GET", paths[i % len(paths)], host, auth) for i in range(count)]


async def read(
    server: Server,
    merchant: Merchant,
    paths: list[str],
    count: int,
    concurrency: int,
    options: Options,
    *,
    repeat: bool = False,
) -> dict[str, Any]:
    """`count` GETs cycling over `paths` (the same requests in every run: a GET changes
    nothing), run `options.repeats` times when `repeat`."""
    requests = _gets(server, merchant, paths, count)

    async def prepare() -> Batch:
        return Batch(requests)

    return await saturated_and_paced(server, prepare, concurrency, options, repeat=repeat)


async def payment_paths(server: Server, merchant: Merchant) -> list[str]:
    """GET /v3/payments/{id} of the merchant's latest payments awaiting authorisation."""
    conn = await asyncpg.connect(server.dsn())
    try:
        rows = await conn.fetch(
            "SELECT id FROM payments WHERE merchant_id = $1"
            " AND status = 'authorization_required' ORDER BY created_at DESC LIMIT $2",
            uuid.UUID(merchant.merchant_id),
            SAMPLE,
        )
    finally:
        await conn.close()
    return [f"/v3/payments/{row['id']}" for row in rows]


async def reads(
    server: Server, merchant: Merchant, count: int, concurrency: int, options: Options
) -> dict[str, Any]:
    """GET /v3/payments/{id}, GET /v3/payments?limit=50 and GET /v3/merchant-accounts (GET
    /v3/payouts/{id} runs with the payouts, since the grown database reruns it)."""
    return {
        "get_payment": await read(
            server, merchant, await payment_paths(server, merchant), count * 3, concurrency, options
        ),
        "get_payments_list": await read(
            server, merchant, ["/v3/payments?limit=50"], count, concurrency, options
        ),
        "get_merchant_accounts": await read(
            server, merchant, ["/v3/merchant-accounts"], count * 2, concurrency, options
        ),
    }
