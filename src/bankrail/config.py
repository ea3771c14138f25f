"""Runtime configuration read from the environment and CLI flags."""

from __future__ import annotations

import itertools
import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from bankrail.core.powers import SandboxPowers

Mode = Literal["sandbox", "production"]

# A production operator token must be long and not trivially patterned (>= ~190 bits when
# drawn from the URL-safe alphabet).
MIN_ADMIN_TOKEN_LENGTH = 32
MIN_ADMIN_TOKEN_DISTINCT = 12


def admin_token_is_strong(token: str) -> bool:
    """Whether `token` may be the operator token in production mode.

    It must have at least 32 characters, at least 12 different ones, and no pattern: at
    least three quarters of its 3-character substrings differ (so no unit repeated, whole
    or not: `'0123456789ab' * 3` has 12 different ones out of 34), and at most half of its
    neighbouring characters are the same or next to each other (`aaaa`, `abcd`, `9876`).
    Random tokens of the URL-safe alphabet (`secrets.token_urlsafe(24)` and longer) or of 64
    hex digits pass; 32 hex digits have too few different characters about once in 60.
    """
    if len(token) < MIN_ADMIN_TOKEN_LENGTH or len(set(token)) < MIN_ADMIN_TOKEN_DISTINCT:
        return False
    triples = [token[i : i + 3] for i in range(len(token) - 2)]
    if len(set(triples)) * 4 < len(triples) * 3:
        return False
    steps = sum(abs(ord(b) - ord(a)) <= 1 for a, b in itertools.pairwise(token))
    return steps * 2 <= len(token) - 1


REQUEST_LOG_SANDBOX_RETENTION = 7 * 86400
"""The request log's retention in the sandbox unless the operator sets one (seconds)."""

NO_LISTEN = "none"
"""The value of BANKRAIL_DIRECT_DATABASE_URL that turns LISTEN off (processes poll)."""


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


def _env_positive_int(name: str, default: int) -> int:
    value = _env_int(name, default)
    if value <= 0:
        raise ValueError(f"{name} must be a positive whole number, not {value}")
    return value


def _env_switch(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in ("on", "1", "true", "yes"):
        return True
    if value in ("off", "0", "false", "no"):
        return False
    raise ValueError(f"{name} must be on or off, not {value!r}")


def _env_positive_float(name: str, default: float) -> float:
    value = _env_float(name, default)
    if not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value}")
    return value


def _env_retention(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    value = int(raw)
    if value < 0:
        raise ValueError(f"{name} must be 0 (off) or a positive number of seconds, not {value}")
    return value


@dataclass(frozen=True)
class Settings:
    """Everything a Bankrail process needs to know about its surroundings."""

    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: Path = Path(".bankrail")
    database_url: str | None = None
    # Where the connection that LISTENs for notifications goes, when DATABASE_URL is a
    # transaction pooler (docs/operations.md, "Connection poolers"); None: DATABASE_URL.
    # NO_LISTEN: no such connection, every process polls instead.
    direct_database_url: str | None = None
    # asyncpg's cache of prepared statements per connection; 0 behind a transaction pooler
    # that does not track prepared statements (PgBouncer before 1.21).
    db_statement_cache_size: int = 100
    public_url_override: str | None = None
    admin_token: str | None = None
    mode: Mode = "sandbox"
    # Production only (a sandbox always has them): the mock providers and their payer
    # decisions, for a staging deployment (BANKRAIL_MOCK_PROVIDERS=on; docs/operations.md).
    mock_providers: bool = False
    pool_min_size: int = 2
    pool_max_size: int = 20
    idempotency_ttl_seconds: int = 6 * 3600
    # How long the signature of an accepted request is remembered, in service time: within
    # it the same signed request never takes effect again, even once its key has expired.
    signature_replay_window_seconds: int = 30 * 86400
    # How long a finished webhook delivery (delivered, discarded or skipped), its attempts
    # and its event are kept after its last change, in service time.
    webhook_retention_seconds: int = 30 * 86400
    # Webhook attempts in flight to one destination (a merchant's URI) at once, on all
    # workers together: a receiver that never answers holds no more (docs/webhooks.md).
    webhook_destination_concurrency: int = 8
    # How often what is kept only for a while (expired idempotency answers, accepted
    # signatures past the replay window, finished webhook deliveries) is deleted, and the
    # most rows one statement deletes (jobs/pruning.py).
    prune_interval_seconds: float = 60.0
    prune_batch: int = 1000
    access_token_ttl_seconds: int = 3600
    max_body_bytes: int = 1024 * 1024
    worker_poll_interval: float = 0.2
    # Under load, the pause between two rounds of due jobs that found work: the jobs queued
    # meanwhile then run as one batch (see BackgroundLoop). Idle, a new job runs at once.
    job_gather_seconds: float = 0.02
    rate_limit_per_second: float = 1000.0
    rate_limit_burst: int = 2000
    token_rate_limit_per_second: float = 50.0
    token_rate_limit_burst: int = 200
    # Wrong credentials per client address and per claimed identity within the window, past
    # which both are refused for a window (security.ratelimit.CredentialLimiter); 0: off.
    wrong_credential_limit: int = 100
    wrong_credential_window_seconds: float = 60.0
    request_timeout_seconds: float = 30.0
    # The request line and headers of a request, up to and including the blank line after
    # them: a longer head is answered 431 (http/connection_guard.py).
    max_head_bytes: int = 16 * 1024
    # The time a client has to send a request's head once it began it (or its first request,
    # once connected): past it the request is answered 408 and the connection closed.
    head_timeout_seconds: float = 10.0
    # Open connections per API process; the next one is answered 503.
    max_connections: int = 1000
    opentelemetry: bool = False
    # Which host this process runs on, in every log line and as the `host` label of every
    # metric (BANKRAIL_HOST_ID; the machine's name by default).
    host_id: str = field(default_factory=socket.gethostname)
    # Worker processes that verify request signatures (security.verifier); 0 verifies on
    # threads of the serving process instead.
    verify_processes: int = 2
    # The offline API reference at /docs (Swagger UI from the fastapi-offline package),
    # in production too unless BANKRAIL_API_DOCS=off.
    api_docs: bool = True
    # In sandbox mode, one line per request on stderr (BANKRAIL_ACCESS_LOG=off, or
    # `serve --no-access-log`, turns it off); production writes its JSON line per request
    # whatever this says.
    access_log: bool = True
    # How long the request log keeps a merchant's API requests, in service time; 0: the log
    # is off (nothing captured, what was kept is pruned). None: the mode's default, 7 days in
    # the sandbox, off in production (BANKRAIL_REQUEST_LOG_RETENTION_SECONDS).
    request_log_retention_seconds: int | None = None

    @property
    def public_url(self) -> str:
        """The base URL used in every link the service hands out."""
        if self.public_url_override:
            return self.public_url_override.rstrip("/")
        return f"http://{self.host}:{self.port}"

    def listen_url(self, dsn: str) -> str | None:
        """Where to LISTEN for notifications when the pool connects to `dsn`; None to poll."""
        if self.direct_database_url == NO_LISTEN:
            return None
        return self.direct_database_url or dsn

    @property
    def request_log_retention(self) -> int:
        """Seconds the request log keeps an entry; 0 when the log is off."""
        if self.request_log_retention_seconds is not None:
            return self.request_log_retention_seconds
        return REQUEST_LOG_SANDBOX_RETENTION if self.sandbox else 0

    @property
    def sandbox(self) -> bool:
        """True in sandbox mode (what that mode allows is `powers`)."""
        return self.mode == "sandbox"

    @property
    def powers(self) -> SandboxPowers:
        """Which sandbox powers this service has: the one place that decides them."""
        return SandboxPowers.for_deployment(self.sandbox, self.mock_providers)

    def problems(self) -> list[str]:
        """What makes these settings unsafe to run with (empty when they are fine)."""
        found: list[str] = []
        if not self.sandbox and not admin_token_is_strong(self.admin_token or ""):
            found.append(
                "production mode needs a strong BANKRAIL_ADMIN_TOKEN: at least "
                f"{MIN_ADMIN_TOKEN_LENGTH} random characters, with no repeated pattern or "
                "run, e.g. the output of "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        return found

    def with_overrides(self, **changes: object) -> Settings:
        """Return a copy with the given fields replaced (None values are ignored)."""
        kept = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **kept)  # type: ignore[arg-type]


def settings_from_env() -> Settings:
    """Build settings from `BANKRAIL_*` variables and `DATABASE_URL`."""
    verify_processes = _env_int("BANKRAIL_VERIFY_PROCESSES", 2)
    if verify_processes < 0:
        raise ValueError("BANKRAIL_VERIFY_PROCESSES must be 0 (verify on threads) or more")
    mode = os.environ.get("BANKRAIL_MODE", "sandbox")
    if mode not in ("sandbox", "production"):
        raise ValueError(f"BANKRAIL_MODE must be sandbox or production, not {mode!r}")
    mock_providers = os.environ.get("BANKRAIL_MOCK_PROVIDERS", "off").lower() or "off"
    if mock_providers not in ("on", "off"):
        raise ValueError(f"BANKRAIL_MOCK_PROVIDERS must be on or off, not {mock_providers!r}")
    return Settings(
        host=os.environ.get("BANKRAIL_HOST", "127.0.0.1"),
        port=_env_int("BANKRAIL_PORT", 8080),
        data_dir=Path(os.environ.get("BANKRAIL_DATA_DIR", ".bankrail")),
        database_url=os.environ.get("DATABASE_URL") or None,
        direct_database_url=os.environ.get("BANKRAIL_DIRECT_DATABASE_URL") or None,
        db_statement_cache_size=_env_int("BANKRAIL_DB_STATEMENT_CACHE_SIZE", 100),
        public_url_override=os.environ.get("BANKRAIL_PUBLIC_URL") or None,
        admin_token=os.environ.get("BANKRAIL_ADMIN_TOKEN") or None,
        mode=mode,  # type: ignore[arg-type]
        mock_providers=mock_providers == "on",
        pool_max_size=_env_int("BANKRAIL_DB_POOL_SIZE", 20),
        idempotency_ttl_seconds=_env_int("BANKRAIL_IDEMPOTENCY_TTL_SECONDS", 6 * 3600),
        webhook_retention_seconds=_env_int("BANKRAIL_WEBHOOK_RETENTION_SECONDS", 30 * 86400),
        signature_replay_window_seconds=_env_positive_int(
            "BANKRAIL_SIGNATURE_REPLAY_WINDOW_SECONDS", 30 * 86400
        ),
        webhook_destination_concurrency=_env_positive_int(
            "BANKRAIL_WEBHOOK_DESTINATION_CONCURRENCY", 8
        ),
        # BANKRAIL_IDEMPOTENCY_PRUNE_INTERVAL_SECONDS is the name this setting had when it
        # pruned idempotency answers alone.
        prune_interval_seconds=_env_float(
            "BANKRAIL_PRUNE_INTERVAL_SECONDS",
            _env_float("BANKRAIL_IDEMPOTENCY_PRUNE_INTERVAL_SECONDS", 60.0),
        ),
        prune_batch=_env_int("BANKRAIL_PRUNE_BATCH", 1000),
        rate_limit_per_second=_env_float("BANKRAIL_RATE_LIMIT_PER_SECOND", 1000.0),
        rate_limit_burst=_env_int("BANKRAIL_RATE_LIMIT_BURST", 2000),
        token_rate_limit_per_second=_env_float("BANKRAIL_TOKEN_RATE_LIMIT_PER_SECOND", 50.0),
        token_rate_limit_burst=_env_int("BANKRAIL_TOKEN_RATE_LIMIT_BURST", 200),
        wrong_credential_limit=_env_int("BANKRAIL_WRONG_CREDENTIAL_LIMIT", 100),
        wrong_credential_window_seconds=_env_positive_float(
            "BANKRAIL_WRONG_CREDENTIAL_WINDOW_SECONDS", 60.0
        ),
        request_timeout_seconds=_env_float("BANKRAIL_REQUEST_TIMEOUT_SECONDS", 30.0),
        max_head_bytes=_env_positive_int("BANKRAIL_MAX_HEAD_BYTES", 16 * 1024),
        head_timeout_seconds=_env_positive_float("BANKRAIL_HEAD_TIMEOUT_SECONDS", 10.0),
        max_connections=_env_positive_int("BANKRAIL_MAX_CONNECTIONS", 1000),
        opentelemetry=os.environ.get("BANKRAIL_OPENTELEMETRY", "").lower() in ("1", "true"),
        job_gather_seconds=_env_float("BANKRAIL_JOB_GATHER_SECONDS", 0.02),
        verify_processes=verify_processes,
        api_docs=_env_switch("BANKRAIL_API_DOCS", True),
        access_log=_env_switch("BANKRAIL_ACCESS_LOG", True),
        request_log_retention_seconds=_env_retention("BANKRAIL_REQUEST_LOG_RETENTION_SECONDS"),
        host_id=os.environ.get("BANKRAIL_HOST_ID") or socket.gethostname(),
    )
