"""The `bankrail` command: serve, worker, migrate, init, trigger, api, logs and listen.

How `serve` runs its API and worker processes is in `_serve`, the demo merchant of `init`
and `serve --demo` in `_demo`; the names they had here are re-exported."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from bankrail._demo import DEMO_CREDENTIALS, DEMO_KEY, create_demo, describe
from bankrail._serve import (
    WORKER_NICENESS,
    DeferredProcess,
    api_only_app,
    published_state,
    run_http,
    stop_on_hangup,
    tune_gc_for_serving,
)
from bankrail.config import Settings, settings_from_env
from bankrail.core.logs import configure_logging

__all__ = [
    "DEMO_CREDENTIALS",
    "DEMO_KEY",
    "WORKER_NICENESS",
    "DeferredProcess",
    "api_only_app",
    "cli",
    "main",
    "published_state",
    "tune_gc_for_serving",
]

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
    access_log: Annotated[
        bool | None,
        typer.Option(
            "--access-log/--no-access-log",
            help="In sandbox mode, one line per request (method, path, status, ms, the "
            "problem's title); on unless BANKRAIL_ACCESS_LOG=off. Production always writes "
            "its JSON line per request.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Start the HTTP API, pages and background workers (embedded PostgreSQL unless
    DATABASE_URL is set). SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal closed) stop
    the API processes, the worker, then PostgreSQL."""
    stop_on_hangup()
    settings = _checked_settings(data_dir, host=host, port=port, access_log=access_log)
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
    try:
        _migrate_or_exit(dsn)
        if demo:
            typer.echo(describe(asyncio.run(create_demo(settings, dsn, force=False))))
        from bankrail.sandbox.trigger import record_server_url

        record_server_url(settings.data_dir, settings.public_url)
        run_http(settings, dsn, workers)
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
        demo = asyncio.run(create_demo(settings, dsn, force))
    finally:
        if embedded is not None:
            embedded.stop()
    if as_json:
        typer.echo(json.dumps(demo, indent=2))
    else:
        typer.echo(describe(demo))


@cli.command()
def trigger(
    event: Annotated[
        str | None, typer.Argument(help="The event to make happen (see --list).")
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            help="The running server (default: the URL that the last `serve` on the data "
            "directory recorded, else http://127.0.0.1:8080).",
            envvar="BANKRAIL_URL",
        ),
    ] = None,
    admin_token: Annotated[
        str | None,
        typer.Option(
            help="The operator token (default: the one kept in the data directory).",
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
    from bankrail.sandbox import trigger as triggers

    if list_events:
        _list_events(as_json)
        return
    event, server, token = _trigger_options(event, url, admin_token, data_dir)
    try:
        triggers.check_reachable(server)
        merchant = merchant_id or triggers.default_merchant_id(server, token, data_dir)
        made = triggers.trigger(
            event, url=server, admin_token=token, merchant_id=merchant, timeout=timeout
        )
    except triggers.TriggerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(made.as_json(), indent=2) if as_json else made.describe())


ServerUrl = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="The server (default: the URL the last `serve` on the data directory "
        "recorded, else http://127.0.0.1:8080).",
        envvar="BANKRAIL_URL",
    ),
]
ClientId = Annotated[str | None, typer.Option("--client-id", envvar="BANKRAIL_CLIENT_ID")]
ClientSecret = Annotated[
    str | None, typer.Option("--client-secret", envvar="BANKRAIL_CLIENT_SECRET")
]
SigningKey = Annotated[
    Path | None,
    typer.Option("--key", help="The signing key's PEM file.", envvar="BANKRAIL_SIGNING_KEY"),
]
Kid = Annotated[
    str | None, typer.Option("--kid", help="The signing key's id.", envvar="BANKRAIL_KID")
]


@contextlib.contextmanager
def _exit_on_shell_error() -> Iterator[None]:
    """End a merchant shell command (api, logs tail, listen) with its reason and exit code 1
    when its credentials or its server fail it."""
    from bankrail import _shell

    try:
        yield
    except _shell.ShellError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


DemoDataDir = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        help="Whose demo merchant signs when no credentials are given.",
        envvar="BANKRAIL_DATA_DIR",
    ),
]


@cli.command()
def api(
    method: Annotated[str, typer.Argument(help="GET, POST, DELETE...")],
    path: Annotated[str, typer.Argument(help="The path, with its query: /v3/payouts/{id}.")],
    data: Annotated[
        str | None,
        typer.Option(help="The JSON body, inline ('{...}') or from a file (@payout.json)."),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="The Idempotency-Key to send (default: a new one on every non-GET)."),
    ] = None,
    url: ServerUrl = None,
    client_id: ClientId = None,
    client_secret: ClientSecret = None,
    key: SigningKey = None,
    kid: Kid = None,
    data_dir: DemoDataDir = Path(".bankrail"),
) -> None:
    """Call the API as the merchant: get a token, sign the request (every method but GET),
    add an Idempotency-Key, and print `HTTP <status>` and the answer. Exits 0 on a 2xx."""
    import sys

    from bankrail import _shell

    with _exit_on_shell_error():
        who = _shell.credentials(
            url=url,
            client_id=client_id,
            client_secret=client_secret,
            key=key,
            kid=kid,
            data_dir=data_dir,
        )
        answer = _shell.call(who, method, path, _shell.request_body(data), idempotency_key)
    typer.echo(_shell.render(answer, pretty=sys.stdout.isatty()))
    if not answer.is_success:
        raise typer.Exit(1)


logs = typer.Typer(name="logs", help="The merchant's request log.", no_args_is_help=True)
cli.add_typer(logs)


@logs.command("tail")
def logs_tail(
    status: Annotated[
        str | None, typer.Option(help="Only this status class (4xx) or code (404).")
    ] = None,
    path: Annotated[
        str | None, typer.Option(help="Only paths starting with this (/v3/payouts).")
    ] = None,
    url: ServerUrl = None,
    client_id: ClientId = None,
    client_secret: ClientSecret = None,
    key: SigningKey = None,
    kid: Kid = None,
    data_dir: DemoDataDir = Path(".bankrail"),
) -> None:
    """Follow the merchant's request log: one line per new request (time, method, path,
    status, duration, id), oldest first, until Ctrl-C, which exits 0."""
    import sys

    from bankrail import _shell

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def interrupted(signum: int, frame: object) -> None:
        # Ctrl-C reaches the whole process group, and `timeout -s INT` signals the command
        # and then its group: the first SIGINT ends the command, any other is ignored.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)

    with _exit_on_shell_error(), contextlib.suppress(KeyboardInterrupt):
        who = _shell.credentials(
            url=url,
            client_id=client_id,
            client_secret=client_secret,
            key=key,
            kid=kid,
            data_dir=data_dir,
        )
        _shell.tail(
            who,
            status=status,
            path=path,
            emit=emit,
            ready=lambda: typer.echo(
                f"following the request log of {who.client_id} at {who.url} (Ctrl-C to stop)",
                err=True,
            ),
        )


ForwardTo = Annotated[
    str,
    typer.Option(
        help="The local URL each webhook is POSTed to, e.g. http://localhost:3000/webhooks."
    ),
]
EventTypes = Annotated[
    str | None,
    typer.Option(help="Comma-separated event types to receive (default: every event)."),
]
ListenerId = Annotated[
    str | None,
    typer.Option(
        help="The listener's id, a UUID (default: the one kept in the data directory's "
        "`listener-id`, made on first use). The same id resumes its deliveries.",
        envvar="BANKRAIL_LISTENER_ID",
    ),
]
ListenerDataDir = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        help="Whose demo merchant listens when no credentials are given, and where the "
        "listener id is kept.",
        envvar="BANKRAIL_DATA_DIR",
    ),
]


@cli.command()
def listen(
    forward_to: ForwardTo,
    events: EventTypes = None,
    listener_id: ListenerId = None,
    url: ServerUrl = None,
    client_id: ClientId = None,
    client_secret: ClientSecret = None,
    key: SigningKey = None,
    kid: Kid = None,
    data_dir: ListenerDataDir = Path(".bankrail"),
) -> None:
    """Receive the merchant's webhooks through a stream to the server and forward each to
    FORWARD_TO with its original headers and body, printing one line per delivery with the
    local answer's status; a non-2xx answer is sent again later. Ctrl-C (or SIGTERM) ends
    it, with exit code 0."""
    from bankrail import _listen, _shell

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM ends it as Ctrl-C does

    signal.signal(signal.SIGTERM, stop)
    try:
        with _exit_on_shell_error():
            who = _shell.credentials(
                url=url,
                client_id=client_id,
                client_secret=client_secret,
                key=key,
                kid=kid,
                data_dir=data_dir,
            )
            listener = _listen.listener_id(listener_id, data_dir)
            forwarder = _listen.Forwarder(
                who,
                forward_to,
                _listen.parse_event_types(events),
                listener,
                out=lambda line: typer.echo(line),
                err=lambda line: typer.echo(line, err=True),
            )
            typer.echo(
                f"listening as {listener} on {who.url}; forwarding to {forward_to}", err=True
            )
            forwarder.run()
    except KeyboardInterrupt:
        typer.echo("stopped", err=True)


def _trigger_options(
    event: str | None, url: str | None, admin_token: str | None, data_dir: Path
) -> tuple[str, str, str]:
    """The event, server URL and operator token `trigger` runs with, the last two from the
    data directory when not given; exits with 2 when one is missing or the event unknown."""
    from bankrail.sandbox import trigger as triggers

    if event is None:
        typer.echo("error: name an event (bankrail trigger --list names them)", err=True)
        raise typer.Exit(2)
    try:
        triggers.known_event(event)
    except triggers.TriggerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    server = url or triggers.recorded_server_url(data_dir)
    token = admin_token or triggers.recorded_admin_token(data_dir)
    if not token:
        typer.echo(
            "error: no operator token: give --admin-token or set BANKRAIL_ADMIN_TOKEN", err=True
        )
        raise typer.Exit(2)
    return event, server, token


def _list_events(as_json: bool) -> None:
    from bankrail.sandbox.trigger import EVENTS

    if as_json:
        listed = [{"event": e.name, "api": e.api, "how": e.how} for e in EVENTS.values()]
        typer.echo(json.dumps(listed, indent=2))
    else:
        for e in EVENTS.values():
            typer.echo(f"{e.name:<22}{e.api}  {e.how}")


def main() -> None:
    """Entry point of the `bankrail` console script."""
    cli()
