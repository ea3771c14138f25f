"""Assembly of the Bankrail application: routers, error handling, and the process lifespan."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig
from starlette.staticfiles import StaticFiles

from bankrail import __version__
from bankrail.config import Settings
from bankrail.context import AppContext
from bankrail.core.clock import CLOCK_CHANNEL, ServiceClock
from bankrail.db.migrations import migrate
from bankrail.db.pool import create_pool
from bankrail.events.delivery import DeliveryWorker, ensure_webhook_key
from bankrail.events.outbox import WEBHOOK_CHANNEL
from bankrail.events.routes import admin as events_admin_router
from bankrail.events.routes import router as events_router
from bankrail.jobs.queue import JOBS_CHANNEL, JobQueue
from bankrail.jobs.runner import BackgroundLoop, Listener
from bankrail.ledger.routes import router as ledger_router
from bankrail.merchants.admin_routes import router as merchant_admin_router
from bankrail.merchants.routes import router as merchant_router
from bankrail.payments import service as payments_service
from bankrail.payments.provider_routes import router as provider_router
from bankrail.payments.routes import router as payments_router
from bankrail.payments.routes import sandbox_router as mock_bank_router
from bankrail.payouts import jobs as payouts_jobs
from bankrail.payouts import service as payouts_service
from bankrail.payouts.routes import router as payouts_router
from bankrail.rails.admin_routes import router as rails_admin_router
from bankrail.sandbox.routes import router as sandbox_router
from bankrail.security.pruning import ExpiredKeyPruner
from bankrail.security.ratelimit import RateLimiter
from bankrail.security.routes import router as auth_router
from bankrail.security.service_keys import ensure_admin_token, ensure_token_keys
from bankrail.security.tokens import TokenIssuer
from bankrail.security.verifier import VerifierProcesses
from bankrail.web.console import router as console_router
from bankrail.web.health import router as health_router
from bankrail.web.hpp import router as hpp_router
from bankrail.web.metrics import MetricsMiddleware
from bankrail.web.metrics import router as metrics_router
from bankrail.web.middleware import ServiceMiddleware
from bankrail.web.mock_bank_pages import router as mock_bank_pages_router
from bankrail.web.openapi import problem_json_openapi
from bankrail.web.pages import router as pages_router
from bankrail.web.problems import install_problem_handlers, render_problem_bytes

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "web" / "static"


def register_jobs(queue: JobQueue, context: AppContext) -> None:
    """Give the queue a handler for every kind of job the areas schedule."""
    queue.register(payouts_service.ADVANCE_JOB, payouts_jobs.advance_payout)
    queue.register_batch(payouts_service.ADVANCE_JOB, payouts_jobs.advance_due_payouts)
    queue.register(payments_service.ADVANCE_JOB, payments_service.advance_payment)
    queue.register(payments_service.EXPIRE_JOB, payments_service.expire_payment)
    del context


def _telemetry(enabled: bool) -> TelemetryConfig:
    return {"tracing": enabled, "metrics": enabled, "logs": enabled}


def create_app(settings: Settings, dsn: str) -> FastAPI:
    """The ASGI application for one process, connected to the database at `dsn`.

    Raises ValueError when the settings are unsafe for their mode (Settings.problems)."""
    unsafe = settings.problems()
    if unsafe:
        raise ValueError("; ".join(unsafe))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await create_pool(
            dsn, min_size=settings.pool_min_size, max_size=settings.pool_max_size
        )
        clock = ServiceClock()
        async with pool.acquire() as conn:
            await migrate(conn)
            access_key, resource_key = await ensure_token_keys(conn)
            admin_hash, generated = await ensure_admin_token(
                conn, settings.admin_token, settings.data_dir
            )
            await clock.refresh(conn)
            webhook_key = await ensure_webhook_key(conn)
        app.state.webhook_key = webhook_key
        if generated:
            log.warning(
                "generated an operator token; it is in %s", settings.data_dir / "admin-token"
            )
        context = AppContext(
            settings=settings,
            pool=pool,
            clock=clock,
            tokens=TokenIssuer(access_key, resource_key),
            admin_token_hash=admin_hash,
            payout_acceptance=payouts_service.PayoutAcceptance(
                pool, lambda error: render_problem_bytes(error, settings.public_url)
            ),
            rate_limits=RateLimiter(settings.rate_limit_per_second, settings.rate_limit_burst),
            token_rate_limits=RateLimiter(
                settings.token_rate_limit_per_second, settings.token_rate_limit_burst
            ),
            verifier=(
                VerifierProcesses(settings.verify_processes) if settings.verify_processes else None
            ),
        )
        app.state.context = context
        queue = JobQueue(pool, clock)
        register_jobs(queue, context)
        app.state.jobs = queue
        loops: list[BackgroundLoop] = []
        deliveries = DeliveryWorker(
            pool,
            clock,
            webhook_key,
            settings.public_url,
            public_destinations_only=not settings.sandbox,
        )
        if settings.run_workers:
            pruner = ExpiredKeyPruner(
                pool,
                clock,
                ttl=timedelta(seconds=settings.idempotency_ttl_seconds),
                interval=settings.idempotency_prune_interval_seconds,
            )
            loops.append(
                BackgroundLoop(
                    "jobs",
                    [queue.run_due, pruner.run],
                    poll_interval=settings.worker_poll_interval,
                    concurrency=2,
                    gather=settings.job_gather_seconds,
                )
            )
            webhook_loop = BackgroundLoop(
                "webhooks",
                [deliveries.run_batch],
                poll_interval=settings.worker_poll_interval,
                concurrency=2,
            )
            loops.append(webhook_loop)
        app.state.loops = loops

        def wake_all() -> None:
            for loop in loops:
                loop.wake()

        def waker(name: str) -> Callable[[], None]:
            """Wakes the loop called `name`: a NOTIFY wakes only the loop whose work it
            announces (a payout job's would otherwise cost the webhook loop a claim)."""

            def wake() -> None:
                for loop in loops:
                    if loop.name == name:
                        loop.wake()

            return wake

        async def on_clock() -> None:
            async with pool.acquire() as conn:
                await clock.refresh(conn)
            wake_all()

        pending: set[asyncio.Task[None]] = set()

        def on_clock_notify() -> None:
            task = asyncio.create_task(on_clock())
            pending.add(task)
            task.add_done_callback(pending.discard)

        channels: dict[str, Callable[[], None]] = {CLOCK_CHANNEL: on_clock_notify}
        if loops:
            # Only a process that runs the loops listens for their work: every commit that
            # queues a job or a delivery notifies each listener, and an API-only process
            # (any of `serve`'s) would wake for nothing several hundred times a second.
            channels[JOBS_CHANNEL] = waker("jobs")
            channels[WEBHOOK_CHANNEL] = waker("webhooks")
        listener = Listener(dsn, channels)
        app.state.listener = listener
        listener.start()
        for loop in loops:
            loop.start()
        try:
            yield
        finally:
            for loop in loops:
                await loop.stop()
            await listener.stop()
            await deliveries.close()
            if context.verifier is not None:
                await context.verifier.close()
            await pool.close()

    app = FastAPI(
        title="Bankrail",
        version=__version__,
        summary="Payments API v3 and payouts API v1, with a stateful sandbox.",
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        # Bankrail reports through Prometheus (/metrics). FastAPI's native OpenTelemetry
        # looks up the global providers on every request even when none is configured,
        # which cost a quarter of a GET's CPU; it is on only when asked for.
        telemetry=_telemetry(settings.opentelemetry),
    )
    app.state.public_url = settings.public_url
    install_problem_handlers(app)
    app.openapi = problem_json_openapi(app)  # type: ignore[method-assign]
    for router in (
        auth_router,
        merchant_router,
        provider_router,
        payouts_router,
        payments_router,
        merchant_admin_router,
        events_router,
        events_admin_router,
        rails_admin_router,
        ledger_router,
        pages_router,
        health_router,
        metrics_router,
        hpp_router,
        console_router,
    ):
        app.include_router(router)
    if settings.sandbox:
        app.include_router(sandbox_router)
        app.include_router(mock_bank_router)
        app.include_router(mock_bank_pages_router)
    if not any(getattr(route, "name", None) == "static" for route in app.routes):
        # Stylesheets and provider icons of the web pages, shipped inside the package.
        app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(
        ServiceMiddleware,
        public_url=settings.public_url,
        max_body_bytes=settings.max_body_bytes,
        request_timeout=settings.request_timeout_seconds,
        access_log=not settings.sandbox,
    )
    app.add_middleware(MetricsMiddleware)  # outermost: it also sees ServiceMiddleware's answers
    return app
