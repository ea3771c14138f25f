"""Assembly of the HTTP application of an API process: routers, middleware, and the
process lifespan. Background work runs in another process (worker.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.telemetry import TelemetryConfig
from fastapi_offline import FastAPIOffline
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.routing import BaseRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from bankrail import __version__
from bankrail.config import Settings
from bankrail.core.logs import write_access_line
from bankrail.core.powers import SandboxPowers
from bankrail.core.problems import ProblemError
from bankrail.events.routes import ADMIN_ROUTES as EVENTS_ADMIN_ROUTES
from bankrail.events.routes import ROUTES as EVENTS_ROUTES
from bankrail.http.context import AppContext, Services
from bankrail.http.guarded_loop import GuardedLoop
from bankrail.http.health import ROUTES as HEALTH_ROUTES
from bankrail.http.metrics import ROUTES as METRICS_ROUTES
from bankrail.http.metrics import observe
from bankrail.http.middleware import AccessLog, ServiceMiddleware, access_line, log_access
from bankrail.http.oauth import ROUTES as AUTH_ROUTES
from bankrail.http.openapi import problem_json_openapi
from bankrail.http.pipeline import ApiRouter, openapi_routes
from bankrail.http.problems import install_problem_handlers, render_problem_bytes
from bankrail.http.request_log import RequestLog, WriterSettings
from bankrail.mandates.routes import MOCK_BANK_CONSENT_ROUTES
from bankrail.mandates.routes import ROUTES as MANDATES_ROUTES
from bankrail.merchants.admin_routes import ROUTES as MERCHANT_ADMIN_ROUTES
from bankrail.merchants.ledger_routes import ROUTES as LEDGER_ROUTES
from bankrail.merchants.request_log import ROUTES as REQUEST_LOG_ROUTES
from bankrail.merchants.routes import ROUTES as MERCHANT_ROUTES
from bankrail.pages.console.routes import router as console_router
from bankrail.pages.errors import router as pages_router
from bankrail.pages.front_door import router as front_door_router
from bankrail.pages.hpp import router as hpp_router
from bankrail.pages.hpp_mandates import router as hpp_mandates_router
from bankrail.pages.hpp_payouts import router as hpp_payouts_router
from bankrail.pages.mock_bank import router as mock_bank_pages_router
from bankrail.payments.creation import PaymentCreation
from bankrail.payments.documents import PaymentDocuments
from bankrail.payments.mandate_creation import MandatePaymentCreation
from bankrail.payments.provider_routes import ROUTES as PROVIDER_ROUTES
from bankrail.payments.routes import MOCK_BANK_ROUTES
from bankrail.payments.routes import ROUTES as PAYMENTS_ROUTES
from bankrail.payouts import service as payouts_service
from bankrail.payouts.routes import ROUTES as PAYOUTS_ROUTES
from bankrail.process import ProcessResources, open_process
from bankrail.rails.admin_routes import ROUTES as RAILS_ADMIN_ROUTES
from bankrail.refunds.acceptance import RefundAcceptance
from bankrail.refunds.routes import ROUTES as REFUNDS_ROUTES
from bankrail.sandbox.routes import ROUTES as SANDBOX_ROUTES
from bankrail.security.idempotent_commit import IdempotentCommit
from bankrail.security.keys import CREDENTIALS_CHANNEL, ActiveClients, PublicKeyCache
from bankrail.security.ratelimit import CredentialLimiter, RateLimiter
from bankrail.security.service_keys import ensure_admin_token, ensure_token_keys
from bankrail.security.tokens import TokenIssuer
from bankrail.security.verifier import VerifierProcesses

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "pages" / "static"
MOCK_PROVIDERS_WARNING = (
    "BANKRAIL_MOCK_PROVIDERS=on: the mock providers decide payments, so any merchant can "
    "create balance; staging only (docs/operations.md)"
)


def _telemetry(enabled: bool) -> TelemetryConfig:
    return {"tracing": enabled, "metrics": enabled, "logs": enabled}


def _credential_caches() -> tuple[PublicKeyCache, ActiveClients, dict[str, Callable[[], None]]]:
    """The process's caches of signing keys and clients, and the NOTIFY handler (by channel)
    that empties them when a key or client is revoked anywhere."""
    public_keys, clients = PublicKeyCache(), ActiveClients()

    def forget_credentials() -> None:
        public_keys.forget()
        clients.forget()

    return public_keys, clients, {CREDENTIALS_CHANNEL: forget_credentials}


def _fastapi(settings: Settings, **options: Any) -> FastAPI:
    """The bare application: with the API reference at /docs (Swagger UI whose scripts come
    from the fastapi-offline package, served from /docs/assets: nothing is fetched from a
    CDN) unless the settings turn it off. No ReDoc page: one reference is enough."""
    if not settings.api_docs:
        return FastAPI(docs_url=None, redoc_url=None, **options)
    return FastAPIOffline(
        docs_url="/docs",
        redoc_url=None,
        static_url="/docs/assets",
        favicon_url="/favicon.ico",
        **options,
    )


def create_app(settings: Settings, dsn: str) -> FastAPI:
    """The ASGI application for one process, connected to the database at `dsn`.

    Raises ValueError when the settings are unsafe for their mode (Settings.problems)."""
    unsafe = settings.problems()
    if unsafe:
        raise ValueError("; ".join(unsafe))

    app = _fastapi(
        settings,
        title="Bankrail",
        version=__version__,
        summary="Payments API v3 and payouts API v1, with a stateful sandbox.",
        lifespan=_lifespan(settings, dsn),
        # Bankrail reports through Prometheus (/metrics). FastAPI's native OpenTelemetry
        # looks up the global providers on every request even when none is configured,
        # which cost a quarter of a GET's CPU; it is on only when asked for.
        telemetry=_telemetry(settings.opentelemetry),
    )
    app.state.public_url = settings.public_url
    install_problem_handlers(app)
    from bankrail.events.schemas import WEBHOOKS

    app.openapi = problem_json_openapi(app, WEBHOOKS, openapi_routes)  # type: ignore[method-assign]
    _include_routers(app, settings.powers)
    if not any(getattr(route, "name", None) == "static" for route in app.routes):
        # Stylesheets and provider icons of the web pages, shipped inside the package.
        app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.build_middleware_stack = _middleware_stack(app, settings)  # type: ignore[method-assign]
    return app


def _middleware_stack(app: FastAPI, settings: Settings) -> Callable[[], ASGIApp]:
    """What the application runs each request through (built on its first request): the one
    service middleware (trace id, limits, deadline, escapes, metrics, access record), then
    the API's pipeline routes straight from the router (http/pipeline.py `ApiRouter`); only
    the other routes (the HTML pages) go through the framework's own layers (exception
    handlers, its exit stack). The framework's outermost layer, its last-resort 500, is left
    out: ServiceMiddleware answers what escapes (503 for a database outage)."""

    def build() -> ASGIApp:
        framework = type(app).build_middleware_stack(app)
        assert isinstance(framework, ServerErrorMiddleware), framework
        by_class = {k: v for k, v in app.exception_handlers.items() if not isinstance(k, int)}
        by_class.pop(Exception, None)
        by_status = {k: v for k, v in app.exception_handlers.items() if isinstance(k, int)}
        by_status.pop(500, None)
        return ServiceMiddleware(
            ApiRouter(app.router, framework.app, (by_class, by_status)),
            public_url=settings.public_url,
            max_body_bytes=settings.max_body_bytes,
            request_timeout=settings.request_timeout_seconds,
            access_log=access_log_of(settings),
            metrics=observe,
        )

    return build


def _lifespan(
    settings: Settings, dsn: str
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The process lifespan: open the pool and listener, ensure the service's keys and
    operator token, publish the AppContext on app.state; drain and close on the way out."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        public_keys, clients, channels = _credential_caches()
        async with open_process(settings, dsn, channels=channels) as process:
            async with process.pool.acquire() as conn:
                access_key, resource_key = await ensure_token_keys(conn)
                admin_hash, generated = await ensure_admin_token(
                    conn, settings.admin_token, settings.data_dir
                )
            if generated:
                log.warning(
                    "generated an operator token; it is in %s", settings.data_dir / "admin-token"
                )
            if not settings.sandbox and settings.powers.mock_providers:
                log.warning(MOCK_PROVIDERS_WARNING)
            app.state.webhook_key = process.webhook_key
            app.state.listener = process.listener
            context = _app_context(
                settings,
                process,
                TokenIssuer(access_key, resource_key),
                admin_hash,
                public_keys,
                clients,
            )
            if settings.request_log_retention > 0:
                writer = WriterSettings(
                    dsn,
                    settings.db_statement_cache_size,
                    production=not settings.sandbox,
                    host=settings.host_id,
                )
                context.request_log = RequestLog(writer, process.clock)
                context.request_log.start()
            app.state.context = context
            try:
                yield
                await _drain_connections(settings)
            finally:
                if context.request_log is not None:
                    await context.request_log.close()  # what is buffered is written
                if context.verifier is not None:
                    await context.verifier.close()

    return lifespan


def _app_context(
    settings: Settings,
    process: ProcessResources,
    tokens: TokenIssuer,
    admin_token_hash: bytes,
    public_keys: PublicKeyCache,
    clients: ActiveClients,
) -> AppContext:
    """The services, limiters and credential caches the request handlers share."""

    def render(error: ProblemError) -> bytes:
        return render_problem_bytes(error, settings.public_url)

    return AppContext(
        settings=settings,
        pool=process.pool,
        clock=process.clock,
        tokens=tokens,
        admin_token_hash=admin_token_hash,
        services=Services(
            payouts_service.PayoutAcceptance(process.pool, render),
            PaymentCreation(process.pool, render),
            MandatePaymentCreation(process.pool, render),
            RefundAcceptance(process.pool, render),
            PaymentDocuments(),
        ),
        idempotent_commit=IdempotentCommit(process.pool, render),
        public_keys=public_keys,
        clients=clients,
        rate_limits=RateLimiter(settings.rate_limit_per_second, settings.rate_limit_burst),
        token_rate_limits=RateLimiter(
            settings.token_rate_limit_per_second, settings.token_rate_limit_burst
        ),
        credential_limits=CredentialLimiter(
            settings.wrong_credential_limit,
            settings.wrong_credential_window_seconds,
            now=lambda: process.clock.now().timestamp(),  # the service clock
        ),
        verifier=(
            VerifierProcesses(settings.verify_processes) if settings.verify_processes else None
        ),
    )


def _include_routers(app: FastAPI, powers: SandboxPowers) -> None:
    """Mount every router; the sandbox's and the mock bank's only with their powers."""
    for router in (
        AUTH_ROUTES,
        MERCHANT_ROUTES,
        PROVIDER_ROUTES,
        PAYOUTS_ROUTES,
        PAYMENTS_ROUTES,
        REFUNDS_ROUTES,
        MANDATES_ROUTES,
        MERCHANT_ADMIN_ROUTES,
        EVENTS_ROUTES,
        EVENTS_ADMIN_ROUTES,
        RAILS_ADMIN_ROUTES,
        LEDGER_ROUTES,
        REQUEST_LOG_ROUTES,
        pages_router,
        front_door_router,
        HEALTH_ROUTES,
        METRICS_ROUTES,
        hpp_router,
        hpp_mandates_router,
        hpp_payouts_router,
        console_router,
    ):
        _include(app, router)
    if powers.sandbox_routes:
        _include(app, SANDBOX_ROUTES)
    if powers.mock_providers:
        _include(app, MOCK_BANK_ROUTES)
        _include(app, MOCK_BANK_CONSENT_ROUTES)
        app.include_router(mock_bank_pages_router)


def _include(app: FastAPI, routes: APIRouter | Sequence[BaseRoute]) -> None:
    """Add a FastAPI router's routes, or pipeline routes (http/pipeline.py), in order."""
    if isinstance(routes, APIRouter):
        app.include_router(routes)
    else:
        app.router.routes.extend(routes)


def access_log_of(settings: Settings) -> AccessLog | None:
    """What each request leaves in the log: in production one JSON record (always: it is
    the audit trail, with the trace id); in the sandbox one concise line unless turned off
    (`BANKRAIL_ACCESS_LOG=off`, `serve --no-access-log`)."""
    if not settings.sandbox:
        return log_access
    return access_line(write_access_line) if settings.access_log else None


async def _drain_connections(settings: Settings) -> None:
    """At shutdown, before the pool closes: answer the requests of the connections that the
    server accepted but had not handed to the application when it stopped (see
    http/connection_guard.py). Under `bankrail serve` only; other servers do their own."""
    loop = asyncio.get_running_loop()
    if isinstance(loop, GuardedLoop):
        timeout = settings.request_timeout_seconds + settings.head_timeout_seconds
        try:
            async with asyncio.timeout(timeout):
                await loop.drain()
        except TimeoutError:
            log.warning("stopped with requests still arriving after %g s", timeout)
