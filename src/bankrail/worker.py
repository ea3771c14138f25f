"""The background process (`bankrail worker`): durable jobs, rail steps, webhook delivery and
the pruning of what is kept only for a while, with no HTTP application."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from functools import partial

from bankrail.config import Settings
from bankrail.core.powers import SandboxPowers
from bankrail.events import listeners
from bankrail.events.delivery import DeliveryWorker
from bankrail.events.outbox import WEBHOOK_CHANNEL
from bankrail.events.service import delete_finished_deliveries
from bankrail.http.request_log import delete_request_log_before
from bankrail.jobs.pruning import Pruner, Retention
from bankrail.jobs.queue import JOBS_CHANNEL, JobQueue
from bankrail.jobs.runner import BackgroundLoop
from bankrail.mandates import service as mandates_service
from bankrail.merchants.sweeping import SWEEP_JOB
from bankrail.payments import service as payments_service
from bankrail.payouts import jobs as payouts_jobs
from bankrail.payouts import service as payouts_service
from bankrail.payouts import sweeps as payouts_sweeps
from bankrail.payouts import verified as payouts_verified
from bankrail.process import ProcessResources, open_process
from bankrail.refunds import service as refunds_service
from bankrail.security.idempotency import delete_expired, delete_forgotten_signatures

__all__ = ["WORKER_CHANNELS", "register_jobs", "retentions", "run_worker"]

WORKER_CHANNELS = (JOBS_CHANNEL, WEBHOOK_CHANNEL)
"""The notifications a worker follows besides the clock's: new jobs and new deliveries."""


def register_jobs(queue: JobQueue, powers: SandboxPowers) -> None:
    """Give the queue a handler for every kind of job the areas schedule; the rail steps
    honour the references' outcome tokens only with that sandbox power."""
    queue.register(payouts_service.ADVANCE_JOB, partial(payouts_jobs.advance_payout, powers=powers))
    queue.register_batch(
        payouts_service.ADVANCE_JOB, partial(payouts_jobs.advance_due_payouts, powers=powers)
    )
    queue.register(payouts_verified.EXPIRE_JOB, payouts_verified.expire_authorization)
    queue.register(payments_service.ADVANCE_JOB, payments_service.advance_payment)
    queue.register(payments_service.EXPIRE_JOB, payments_service.expire_payment)
    queue.register(
        refunds_service.ADVANCE_JOB, partial(refunds_service.advance_refund, powers=powers)
    )
    queue.register_batch(
        refunds_service.ADVANCE_JOB, partial(refunds_service.advance_due_refunds, powers=powers)
    )
    queue.register(mandates_service.EXPIRE_JOB, mandates_service.expire_mandate)
    # In sandbox mode an account sweeps to its generated IBAN until one is approved.
    queue.register(SWEEP_JOB, partial(payouts_sweeps.run_sweep, generated=powers.sandbox_routes))


def retentions(settings: Settings) -> list[Retention]:
    """What the worker deletes once it is no longer kept (docs/operations.md, "Retention").
    Finished jobs need no entry: a job is deleted in the transaction that runs it; access
    tokens are not stored."""
    return [
        Retention(
            "expired idempotency keys",
            timedelta(seconds=settings.idempotency_ttl_seconds),
            delete_expired,
        ),
        Retention(
            "accepted signatures past the replay window",
            timedelta(seconds=settings.signature_replay_window_seconds),
            delete_forgotten_signatures,
        ),
        Retention(
            "finished webhook deliveries",
            timedelta(seconds=settings.webhook_retention_seconds),
            delete_finished_deliveries,
        ),
        Retention(
            "pending deliveries of webhook listeners detached too long",
            listeners.DETACHED_AFTER,
            listeners.discard_abandoned,
        ),
        # Off (0), the log keeps nothing: what an earlier setting kept goes too.
        Retention(
            "request-log entries",
            timedelta(seconds=settings.request_log_retention),
            delete_request_log_before,
        ),
    ]


def _delivery_worker(
    settings: Settings, process: ProcessResources, *, on_settled: Callable[[], None]
) -> DeliveryWorker:
    """The webhook deliveries of the process; `on_settled` is called as each attempt ends."""
    return DeliveryWorker(
        process.pool,
        process.clock,
        process.webhook_key,
        settings.public_url,
        per_destination=settings.webhook_destination_concurrency,
        on_settled=on_settled,
        public_destinations_only=not settings.sandbox,
    )


async def run_worker(
    settings: Settings,
    dsn: str,
    stop: asyncio.Event,
    *,
    started: Callable[[ProcessResources], None] | None = None,
) -> None:
    """Run the background loops against the database at `dsn` until `stop` is set; in-flight
    work finishes first. `started` is called with the process's resources once the loops run."""
    loops: dict[str, BackgroundLoop] = {}

    def waker(name: str) -> Callable[[], None]:
        # A NOTIFY wakes only the loop whose work it announces: a payout job's would otherwise
        # cost the webhook loop a claim.
        return lambda: loops[name].wake() if name in loops else None

    def wake_all() -> None:
        for loop in loops.values():
            loop.wake()

    channels = {JOBS_CHANNEL: waker("jobs"), WEBHOOK_CHANNEL: waker("webhooks")}
    async with open_process(settings, dsn, channels=channels, on_clock=wake_all) as process:
        queue = JobQueue(process.pool, process.clock)
        register_jobs(queue, settings.powers)
        deliveries = _delivery_worker(settings, process, on_settled=waker("webhooks"))
        pruner = Pruner(
            process.pool,
            process.clock,
            retentions(settings),
            interval=settings.prune_interval_seconds,
            batch=settings.prune_batch,
        )
        loops["jobs"] = BackgroundLoop(
            "jobs",
            [queue.run_due, pruner.run],
            poll_interval=settings.worker_poll_interval,
            concurrency=2,
            gather=settings.job_gather_seconds,
        )
        # One task claims: the attempts run on their own, and each that ends wakes it.
        loops["webhooks"] = BackgroundLoop(
            "webhooks", [deliveries.start_due], poll_interval=settings.worker_poll_interval
        )
        for loop in loops.values():
            loop.start()
        if started is not None:
            started(process)
        try:
            await stop.wait()
        finally:
            for loop in loops.values():
                await loop.stop()
            await deliveries.close()
