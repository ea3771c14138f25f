"""Webhook delivery throughput: signed deliveries per second to a receiver answering 200."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import asyncpg

from bankrail.core.clock import ServiceClock
from bankrail.db.pool import create_pool
from bankrail.events.delivery import DeliveryWorker, ensure_webhook_key
from bankrail.events.outbox import record_event
from bankrail.merchants import service as merchants
from bench.receiver import CountingReceiver


async def delivery_rate(dsn: str, events: int, workers: int = 2) -> dict[str, float]:
    """Queue `events` events, then deliver them with `workers` concurrent delivery loops in
    this process; returns deliveries/s and how many arrived."""
    receiver = CountingReceiver()
    url = await receiver.start()
    pool = await create_pool(dsn, min_size=2, max_size=8)
    try:
        clock = ServiceClock()
        async with pool.acquire() as conn:
            await clock.refresh(conn)
            key = await ensure_webhook_key(conn)
            now = datetime.now(UTC)
            merchant_id = await merchants.create_merchant(conn, "Bench Webhooks", now)
            await merchants.set_webhooks(conn, merchant_id, None, url + "/hooks")
            for start in range(0, events, 1000):
                async with conn.transaction():
                    for i in range(start, min(events, start + 1000)):
                        await record_event(
                            conn,
                            merchant_id=merchant_id,
                            family="payouts",
                            event_type="bench",
                            body={"n": i},
                            now=now,
                        )
        # One destination: its share is the whole of each worker's capacity, so that the
        # figure is the sender's rate rather than the share of one receiver.
        senders = [
            DeliveryWorker(
                pool, clock, key, "http://127.0.0.1", max_in_flight=200, per_destination=400
            )
            for _ in range(workers)
        ]

        async def drain(worker: DeliveryWorker) -> None:
            while await worker.run_batch():
                pass

        started = time.perf_counter()
        await asyncio.gather(*(drain(w) for w in senders))
        elapsed = time.perf_counter() - started
        for worker in senders:
            await worker.close()
        delivered = await _delivered(pool, merchant_id)
        return {
            "deliveries_per_s": delivered / elapsed,
            "delivered": float(delivered),
            "received": float(receiver.count),
            "seconds": elapsed,
        }
    finally:
        await pool.close()
        await receiver.stop()


async def _delivered(pool: asyncpg.Pool, merchant_id: object) -> int:
    count = await pool.fetchval(
        "SELECT count(*) FROM webhook_deliveries WHERE merchant_id = $1 AND status = 'delivered'",
        merchant_id,
    )
    return int(count)
