"""The `bankrail` command: serve, worker, migrate, init and trigger."""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from bankrail.config import Settings, settings_from_env
from bankrail.logs import configure_logging

cli = typer.Typer(
    name="bankrail",
    help="Bankrail: a self-hostable payments and payouts service with a stateful sandbox.",
    no_args_is_help=True,
    add_completion=False,
)

DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Where the embedded database and local files live.",
        envvar="BANKRAIL_DATA_DIR",
    ),
]
Host = Annotated[str | None, typer.Option(help="Listen address.", envvar="BANKRAIL_HOST")]
Port = Annotated[int | None, typer.Option(help="Listen port.", envvar="BANKRAIL_PORT")]
DEMO_CREDENTIALS = "demo-credentials.json"
DEMO_KEY = "demo-signing-key.pem"


def _settings(data_dir: Path | None, **overrides: Any) -> Settings:
    return settings_from_env().with_overrides(data_dir=data_dir, **overrides)


def _checked_settings(data_dir: Path | None, **overrides: Any) -> Settings:
    """Settings for a long-running process, with logging set up; exits 2 on a setting that
    is unsafe for the mode (a weak operator token in production, say)."""
    settings = _settings(data_dir, **overrides)
    configure_logging(production=not settings.sandbox, host=settings.host_id)
    problems = settings.problems()
    if problems:
        for problem in problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)
    return settings


def _refuse_demo_in_production(settings: Settings, command: str) -> None:
    """Exit 2, before anything is created, printed or written, when `command` would make a
    demo merchant in production mode: it prints the operator token and the client secret,
    and stores them in plaintext in the data directory."""
    if not settings.sandbox:
        typer.echo(
            f"error: `bankrail {command}` is refused in production mode: it would print the "
            "operator token and a client secret and store them in the data directory. "
            "Create merchants with the operator API (`/admin/merchants`) instead.",
            err=True,
        )
        raise typer.Exit(2)


@cli.command()
def serve(
    host: Host = None,
    port: Port = None,
    data_dir: DataDir = None,
    workers: Annotated[int, typer.Option(help="API processes sharing the port.", min=1)] = 1,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo",
            help="Before serving, create the demo merchant if there is none and print it, "
            "as `bankrail init` does (what `./dev serve` runs). Sandbox mode only.",
        ),
    ] = False,
) -> None:
    """Start the HTTP API, pages and background workers (embedded PostgreSQL unless
    DATABASE_URL is set)."""
    settings = _checked_settings(data_dir, host=host, port=port)
    if demo:
        _refuse_demo_in_production(settings, "serve --demo")
    from bankrail.db.embedded import EmbeddedPostgres, EmbeddedPostgresError

    embedded: EmbeddedPostgres | None = None
    dsn = settings.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(settings.data_dir)
        try:
            dsn = embedded.start()
        except EmbeddedPostgresError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
    _survive_reraised_signals()
    try:
        _migrate_or_exit(dsn)
        if demo:
            typer.echo(_describe(asyncio.run(_create_demo(settings, dsn, force=False))))
        _run_http(settings, dsn, workers)
    finally:
        if embedded is not None:
            embedded.stop()


def _migrate_or_exit(dsn: str) -> list[str]:
    """Apply the pending migrations and return their versions; exit 2, saying why, when the
    database was migrated by a newer release (a version this one does not ship)."""
    from bankrail.db.migrations import SchemaTooNew, migrate

    async def apply() -> list[str]:
        import asyncpg

        conn = await asyncpg.connect(dsn, statement_cache_size=0)
        try:
            return await migrate(conn)
        finally:
            await conn.close()

    try:
        return asyncio.run(apply())
    except SchemaTooNew as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


@cli.command("migrate")
def migrate_command(data_dir: DataDir = None) -> None:
    """Apply the pending schema migrations, once, and exit. Processes of the release that
    runs beside it keep serving (docs/operations.md, "Upgrades"); exits 2 on a database
    migrated by a newer release."""
    logging.basicConfig(level=logging.WARNING)
    settings = _settings(data_dir)
    from bankrail.db.embedded import EmbeddedPostgres

    embedded: EmbeddedPostgres | None = None
    dsn = settings.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(settings.data_dir)
        dsn = embedded.start(join_running=True)
    try:
        applied = _migrate_or_exit(dsn)
    finally:
        if embedded is not None:
            embedded.stop()
    typer.echo(f"applied {', '.join(applied)}" if applied else "the schema is up to date")


def _survive_reraised_signals() -> None:
    """uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal to the
    handler that was installed before it. With the default handler that kills the process
    before the embedded database is stopped; this handler lets `serve` finish its cleanup
    and exit 0 instead."""

    def after_graceful_shutdown(_signum: int, _frame: object) -> None:
        return None

    signal.signal(signal.SIGTERM, after_graceful_shutdown)
    signal.signal(signal.SIGINT, after_graceful_shutdown)


def _run_http(settings: Settings, dsn: str, workers: int) -> None:
    import uvicorn

    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": "warning",
        "access_log": False,  # ServiceMiddleware writes its own, with the trace id
        "log_config": None,  # uvicorn's loggers go through configure_logging's handler
        "timeout_graceful_shutdown": 30,
        "server_header": False,
        "http": "httptools",
        "ws": "none",
        # uvloop, whose servers put http/connection_guard.py's guard in front of each
        # connection: limits on request heads and open connections, which uvicorn lacks.
        "loop": "bankrail.http.connection_guard:guarded_event_loop",
    }
    # The API processes build their settings from the environment: what the command line
    # chose must reach them there, or their links would name the default address.
    os.environ["DATABASE_URL"] = dsn
    os.environ["BANKRAIL_DATA_DIR"] = str(settings.data_dir)
    os.environ["BANKRAIL_HOST"] = settings.host
    os.environ["BANKRAIL_PORT"] = str(settings.port)
    # The processes write their counters to files here, so /metrics on any one of them
    # reports the sum (prometheus_client's multiprocess mode).
    run_dir = Path(tempfile.mkdtemp(prefix="bankrail-serve-"))
    metrics_dir = run_dir / "metrics"
    metrics_dir.mkdir()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    started = run_dir / "api-started"
    os.environ[_API_STARTED_FILE] = str(started)
    # How the API processes learn whether the worker runs (with --workers 1, the one API
    # process is this one, but it reads the state as the others do).
    worker_state = run_dir / "worker-state"
    os.environ[_WORKER_STATE_FILE] = str(worker_state)
    worker = DeferredProcess(
        [sys.executable, "-m", "bankrail", "worker", "--nice", str(WORKER_NICENESS)],
        started.exists,
        state_file=worker_state,
    )
    worker.start()
    try:
        uvicorn.run("bankrail.cli:api_only_app", factory=True, workers=workers, **common)
    finally:
        worker.stop(timeout=60)
        os.environ.pop(_WORKER_STATE_FILE, None)
        shutil.rmtree(run_dir, ignore_errors=True)


# How much lower `serve` sets its background worker's CPU priority (nice(2)). On a busy
# machine the API processes, their signature verifiers and PostgreSQL then answer requests
# first, and background work, which no request waits for, takes the time left: its
# batches grow meanwhile and cost less a payout. Nothing it does holds a lock while it
# waits for a core: a batch's rows are leased, decided, then written in one statement.
WORKER_NICENESS = 10

log = logging.getLogger(__name__)

# Set by `serve` for its API processes: each creates this file once it has built its
# application (the costly part of its start).
_API_STARTED_FILE = "BANKRAIL_API_STARTED_FILE"
# Set by `serve` for its API processes: the file where it keeps its background worker's state.
_WORKER_STATE_FILE = "BANKRAIL_WORKER_STATE_FILE"


class DeferredProcess:
    """A process started once `ready()` is true (or after `longest_wait` seconds, whichever
    comes first), started again `restart_delay` seconds after it exits, and never after
    `stop`.

    A worker that cannot reach the database as it starts (an outage, or PostgreSQL
    restarting) exits with an error; it is started again until it can, and the jobs it
    finds then are the ones it would have run. One that ends as Ctrl-C or SIGTERM ends it
    (`_ASKED_TO_STOP`) was asked to stop.

    `serve` starts its background-work process this way, once an API process has built its
    application: the API processes then start with the machine's cores to themselves, so
    that the service answers sooner, and background work, which no request waits for,
    follows them. With `state_file`, its `state()` is also kept in that file (within 0.2 s
    of a change), where `serve`'s API processes read it for /readyz.
    """

    def __init__(
        self,
        command: list[str],
        ready: Callable[[], bool],
        *,
        longest_wait: float = 10.0,
        restart_delay: float = 1.0,
        state_file: Path | None = None,
    ) -> None:
        self._command = command
        self._ready = ready
        self._longest_wait = longest_wait
        self._restart_delay = restart_delay
        self._state_file = state_file
        self._published: str | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._start_when_ready, daemon=True)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Begin waiting (in a thread of this process)."""
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Ask the process to stop (SIGTERM) and wait up to `timeout` seconds for it; if it
        has not started yet, it never will."""
        with self._lock:
            self._stopping.set()
            process = self.process
        if self._thread.is_alive():
            self._thread.join()
        if process is not None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=timeout)
        self._publish()

    def state(self) -> str:
        """`ok` while the process runs; `starting` before it is started; otherwise how it
        ended (and, until `stop`, that it is being started again)."""
        process = self.process
        if process is None:
            return "stopped" if self._stopping.is_set() else "starting"
        code = process.poll()
        if code is None:
            return "ok"
        restarting = _failed(code) and not self._stopping.is_set()
        return f"exited with code {code}" + ("; restarting" if restarting else "")

    def _start_when_ready(self) -> None:
        self._publish()
        deadline = time.monotonic() + self._longest_wait
        while not self._ready() and time.monotonic() < deadline:
            if self._stopping.wait(0.02):
                return
        while self._launch():
            self._publish()
            process = self.process
            assert process is not None
            while process.poll() is None:
                if self._stopping.wait(0.2):
                    return
            self._publish()
            if not _failed(process.returncode):
                return
            log.warning(
                "the background worker exited with code %s; starting it again",
                process.returncode,
            )
            if self._stopping.wait(self._restart_delay):
                return

    def _publish(self) -> None:
        """Write `state()` to the state file, if there is one and the state changed."""
        if self._state_file is None:
            return
        state = self.state()
        if state == self._published:
            return
        # Whole or not at all: a reader never sees a half-written state.
        written = self._state_file.with_name(self._state_file.name + ".new")
        written.write_text(state)
        written.replace(self._state_file)
        self._published = state

    def _launch(self) -> bool:
        """Start the process unless stopping; whether it was started."""
        with self._lock:
            if self._stopping.is_set():
                return False
            self.process = subprocess.Popen(self._command)  # noqa: S603 (our own argv)
            return True


# The exits of a process that was asked to stop: a clean one, 130 (128 + SIGINT: what
# `bankrail worker` exits with on Ctrl-C, which reaches it through `serve`'s process group),
# or the signal itself when it came before the process handled it.
_ASKED_TO_STOP = frozenset({0, 128 + signal.SIGINT, -signal.SIGINT, -signal.SIGTERM})


def published_state(state_file: Path) -> str:
    """The state a `DeferredProcess` last wrote to `state_file` (`starting` before its
    first)."""
    try:
        return state_file.read_text()
    except FileNotFoundError:
        return "starting"


def _failed(returncode: int) -> bool:
    """Whether a process that ended with `returncode` failed, rather than was asked to
    stop."""
    return returncode not in _ASKED_TO_STOP


def api_only_app() -> Any:
    """An API process of `serve`: HTTP only, background work runs in a process of its own,
    whose state it reports at /readyz."""
    from bankrail.app import create_app

    settings = settings_from_env()
    configure_logging(production=not settings.sandbox, host=settings.host_id)
    dsn = settings.database_url
    assert dsn is not None
    app = create_app(settings, dsn)
    state_file = os.environ.get(_WORKER_STATE_FILE)
    if state_file:
        app.state.background_process = functools.partial(published_state, Path(state_file))
    tune_gc_for_serving()
    started = os.environ.get(_API_STARTED_FILE)
    if started:
        Path(started).touch()
    return app


def tune_gc_for_serving() -> None:
    """Tune the cycle collector of a serving process, once its application is built.

    What exists by then (modules, routes, schemas, settings) lives as long as the process:
    frozen, it is not traversed again by every full collection. A request's objects are
    almost all freed by reference counting, so collecting the youngest generation every 700
    allocations (the default) mostly re-examines the objects of requests still in flight;
    every 10,000 costs less and still bounds what cyclic garbage can pile up."""
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


@cli.command()
def worker(
    data_dir: DataDir = None,
    nice: Annotated[
        int,
        typer.Option(
            min=0,
            max=19,
            help="Lower this process's CPU priority by this much, as nice(1) does (`serve` "
            f"starts its worker with {WORKER_NICENESS}).",
        ),
    ] = 0,
) -> None:
    """Run background work only (jobs, rail steps, webhook delivery); needs DATABASE_URL or a
    running `serve` on the same data directory."""
    if nice:
        os.nice(nice)
    settings = _checked_settings(data_dir)
    from bankrail.db.embedded import EmbeddedPostgres
    from bankrail.worker import run_worker

    embedded: EmbeddedPostgres | None = None
    dsn = settings.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(settings.data_dir)
        dsn = embedded.start(join_running=True)
    try:
        _migrate_or_exit(dsn)
    except typer.Exit:
        if embedded is not None:
            embedded.stop()
        raise
    tune_gc_for_serving()

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_worker(settings, dsn, stop)

    try:
        asyncio.run(run())
    finally:
        if embedded is not None:
            embedded.stop()


@cli.command()
def init(
    data_dir: DataDir = None,
    host: Host = None,
    port: Port = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    force: Annotated[
        bool, typer.Option(help="Create a new demo merchant even if one exists.")
    ] = False,
) -> None:
    """Create a demo merchant with client credentials, a signing key pair and GBP and EUR
    accounts, and print what a developer needs. Running it again prints the same demo.
    Sandbox mode only."""
    logging.basicConfig(level=logging.WARNING)
    settings = _settings(data_dir, host=host, port=port)
    _refuse_demo_in_production(settings, "init")
    from bankrail.db.embedded import EmbeddedPostgres

    embedded: EmbeddedPostgres | None = None
    dsn = settings.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(settings.data_dir)
        dsn = embedded.start(join_running=True)
    try:
        demo = asyncio.run(_create_demo(settings, dsn, force))
    finally:
        if embedded is not None:
            embedded.stop()
    if as_json:
        typer.echo(json.dumps(demo, indent=2))
    else:
        typer.echo(_describe(demo))


async def _create_demo(settings: Settings, dsn: str, force: bool) -> dict[str, Any]:
    """The demo merchant of `settings.data_dir`, created when there is none (or `force`),
    with the base URL of these settings (the port may differ from the run that created it)."""
    demo = await _stored_or_new_demo(settings, dsn, force)
    return {**demo, "base_url": settings.public_url}


async def _stored_or_new_demo(settings: Settings, dsn: str, force: bool) -> dict[str, Any]:
    from bankrail.db.migrations import migrate
    from bankrail.db.pool import create_pool
    from bankrail.merchants import service
    from bankrail.security import signing
    from bankrail.security.secret_files import write_secret_file
    from bankrail.security.service_keys import ADMIN_TOKEN_FILE, ensure_admin_token

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    saved = settings.data_dir / DEMO_CREDENTIALS
    pool = await create_pool(
        dsn, min_size=1, max_size=2, statement_cache_size=settings.db_statement_cache_size
    )
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
            _, generated = await ensure_admin_token(conn, settings.admin_token, settings.data_dir)
            if saved.exists() and not force:
                demo: dict[str, Any] = json.loads(saved.read_text())
                if await service.merchant_exists(conn, uuid.UUID(demo["merchant_id"])):
                    return demo
            from datetime import UTC, datetime

            now = datetime.now(UTC)
            async with conn.transaction():
                merchant_id = await service.create_merchant(conn, "Demo Merchant", now)
                client_id, secret = await service.create_client(
                    conn, merchant_id, ["payments"], now
                )
                key = signing.generate_private_key()
                kid = await service.register_signing_key(
                    conn, merchant_id, signing.public_key_pem(key.public_key()), None, now
                )
                accounts = [
                    await service.create_merchant_account(conn, merchant_id, c, None, now)
                    for c in ("GBP", "EUR")
                ]
    finally:
        await pool.close()
    key_path = settings.data_dir / DEMO_KEY
    write_secret_file(key_path, signing.private_key_pem(key))
    admin_file = settings.data_dir / ADMIN_TOKEN_FILE
    admin_token = settings.admin_token or (
        admin_file.read_text().strip() if admin_file.exists() else generated
    )
    demo = {
        "base_url": settings.public_url,
        "merchant_id": str(merchant_id),
        "client_id": client_id,
        "client_secret": secret,
        "signing_key_id": kid,
        "private_key_path": str(key_path.resolve()),
        "admin_token": admin_token,
        "merchant_accounts": [
            {
                "id": str(a.id),
                "currency": a.currency,
                "account_identifiers": a.identifiers.as_list(),
            }
            for a in accounts
        ],
    }
    write_secret_file(saved, json.dumps(demo, indent=2) + "\n")
    return demo


def _describe(demo: dict[str, Any]) -> str:
    accounts = "\n".join(
        f"    {a['currency']}  {a['id']}  "
        + ", ".join(
            i.get("iban") or f"{i['sort_code']} {i['account_number']}"
            for i in a["account_identifiers"]
        )
        for a in demo["merchant_accounts"]
    )
    base = demo["base_url"]
    return f"""Bankrail demo merchant
  base URL          {base}
  client_id         {demo["client_id"]}
  client_secret     {demo["client_secret"]}
  signing key id    {demo["signing_key_id"]}
  private key (PEM) {demo["private_key_path"]}
  operator token    {demo["admin_token"] or "(set by BANKRAIL_ADMIN_TOKEN or in admin-token)"}
  merchant accounts
{accounts}

Get a token and list the accounts:
  TOKEN=$(curl -s {base}/connect/token -d grant_type=client_credentials \\
      -d client_id={demo["client_id"]} -d client_secret={demo["client_secret"]} \\
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
  curl -s {base}/v3/merchant-accounts -H "Authorization: Bearer $TOKEN"
"""


@cli.command()
def trigger(
    event: Annotated[
        str | None, typer.Argument(help="The event to make happen (see --list).")
    ] = None,
    url: Annotated[
        str, typer.Option(help="The running server.", envvar="BANKRAIL_URL")
    ] = "http://127.0.0.1:8080",
    admin_token: Annotated[
        str | None,
        typer.Option(
            help="The operator token (default: <data-dir>/admin-token).",
            envvar="BANKRAIL_ADMIN_TOKEN",
        ),
    ] = None,
    merchant_id: Annotated[
        str | None,
        typer.Option(
            help="The merchant (default: the demo merchant of the data directory, else the "
            "oldest merchant)."
        ),
    ] = None,
    data_dir: Annotated[
        Path,
        typer.Option(
            "--data-dir",
            help="Where the operator token and demo merchant are read from.",
            envvar="BANKRAIL_DATA_DIR",
        ),
    ] = Path(".bankrail"),
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    list_events: Annotated[bool, typer.Option("--list", help="Name the events.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the event.", min=1)] = 30,
) -> None:
    """Make a running server send a webhook: create the real objects that lead to EVENT for
    a merchant, wait until the event is recorded, and print what was made."""
    from bankrail.sandbox.trigger import EVENTS, TriggerError, default_merchant_id
    from bankrail.sandbox.trigger import trigger as run_trigger

    if list_events:
        if as_json:
            listed = [{"event": e.name, "api": e.api, "how": e.how} for e in EVENTS.values()]
            typer.echo(json.dumps(listed, indent=2))
        else:
            for e in EVENTS.values():
                typer.echo(f"{e.name:<22}{e.api}  {e.how}")
        return
    if event is None:
        typer.echo("error: name an event (bankrail trigger --list names them)", err=True)
        raise typer.Exit(2)
    token = admin_token
    token_file = data_dir / "admin-token"
    if not token and token_file.is_file():
        token = token_file.read_text().strip()
    if not token:
        typer.echo(
            "error: no operator token: give --admin-token or set BANKRAIL_ADMIN_TOKEN", err=True
        )
        raise typer.Exit(2)
    try:
        merchant = merchant_id or default_merchant_id(url, token, data_dir)
        made = run_trigger(event, url=url, admin_token=token, merchant_id=merchant, timeout=timeout)
    except TriggerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(made.as_json(), indent=2) if as_json else made.describe())


def main() -> None:
    """Entry point of the `bankrail` console script."""
    cli()
