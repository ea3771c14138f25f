"""Integration tests for bankrail.db.embedded.EmbeddedPostgres: ownership, crash recovery, and
who may connect (only the OS user running Bankrail).

These are synchronous tests that start real PostgreSQL servers in temporary data directories.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from bankrail.db._postmaster import bin_dir
from bankrail.db.embedded import (
    PG_PORT,
    PG_SYSTEM_USER,
    EmbeddedPostgres,
    EmbeddedPostgresError,
    PostmasterInfo,
)
from support.processes import alive

pytestmark = pytest.mark.slow  # starts and kills PostgreSQL servers


def sql(dsn: str, query: str) -> list[Any]:
    """Run one query on a new connection; returns the first column of every row."""

    async def go() -> list[Any]:
        conn = await asyncpg.connect(dsn, timeout=30)
        try:
            return [row[0] for row in await conn.fetch(query)]
        finally:
            await conn.close()

    with ThreadPoolExecutor(max_workers=1) as pool:  # no event loop of ours in this thread
        return pool.submit(asyncio.run, go()).result(timeout=60)


@pytest.fixture(scope="module")
def initialised_pgdata(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory initialised once (initdb is the slow part), copied by each test."""
    data_dir = tmp_path_factory.mktemp("embedded-template")
    server = EmbeddedPostgres(data_dir)
    server.start()
    server.stop()
    return data_dir / "pgdata"


@pytest.fixture
def data_dir(tmp_path: Path, initialised_pgdata: Path) -> Path:
    target = tmp_path / "data"
    target.mkdir()
    shutil.copytree(initialised_pgdata, target / "pgdata", symlinks=True)
    return target


@pytest.fixture
def servers() -> Iterator[Callable[[Path], EmbeddedPostgres]]:
    """Make EmbeddedPostgres instances that are all stopped at the end of the test."""
    made: list[EmbeddedPostgres] = []

    def make(path: Path) -> EmbeddedPostgres:
        server = EmbeddedPostgres(path)
        made.append(server)
        return server

    yield make
    for server in reversed(made):
        server.stop()


def _write_marker(dsn: str, value: str) -> None:
    sql(dsn, "CREATE TABLE IF NOT EXISTS marker (value text)")
    sql(dsn, f"INSERT INTO marker VALUES ('{value}')")


def _markers(dsn: str) -> list[str]:
    return sql(dsn, "SELECT value FROM marker ORDER BY value")


def test_start_initialises_an_empty_directory(
    tmp_path: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    server = servers(tmp_path / "fresh")
    dsn = server.start()
    assert server.owner
    assert (server.pgdata / "PG_VERSION").exists()
    assert sql(dsn, "SELECT 1") == [1]
    assert sql(dsn, "SHOW server_version_num")[0] >= "140000"


def test_commits_are_durable_and_new_wal_segments_are_not_zero_filled(
    data_dir: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    # Durability is never traded for speed; zero-filling each new WAL segment would stall
    # every commit while it runs (docs/performance.md, "Settings measured here").
    dsn = servers(data_dir).start()
    settings = "('fsync', 'synchronous_commit', 'full_page_writes', 'wal_init_zero')"
    rows = sql(dsn, f"SELECT name || '=' || setting FROM pg_settings WHERE name IN {settings}")
    assert sorted(rows) == [
        "fsync=on",
        "full_page_writes=on",
        "synchronous_commit=on",
        "wal_init_zero=off",
    ]


def test_start_stop_start_keeps_data(
    data_dir: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    first = servers(data_dir)
    dsn = first.start()
    _write_marker(dsn, "kept")
    first.stop()
    assert not first.owner
    assert not (first.pgdata / "postmaster.pid").exists()
    with pytest.raises(EmbeddedPostgresError):
        _ = first.dsn
    again = servers(data_dir)
    assert _markers(again.start()) == ["kept"]
    # The same object can be started again too.
    again.stop()
    assert _markers(first.start()) == ["kept"]


def test_context_manager_starts_and_stops(data_dir: Path) -> None:
    with EmbeddedPostgres(data_dir) as server:
        info = PostmasterInfo.read(server.pgdata)
        assert info is not None
        assert info.status == "ready"
        assert sql(server.dsn, "SELECT 2") == [2]
    assert not alive(info.pid)
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()


def test_a_second_owner_is_refused_while_the_first_runs(
    data_dir: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    first = servers(data_dir)
    dsn = first.start()
    second = servers(data_dir)
    with pytest.raises(EmbeddedPostgresError, match="already serving"):
        second.start()
    assert not second.owner
    assert sql(dsn, "SELECT 1") == [1]  # the first is unharmed


def test_a_guest_joins_the_running_server(
    data_dir: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    owner = servers(data_dir)
    dsn = owner.start()
    _write_marker(dsn, "shared")
    guest = servers(data_dir)
    guest_dsn = guest.start(join_running=True)
    assert not guest.owner
    assert guest_dsn == dsn
    assert _markers(guest_dsn) == ["shared"]
    guest.stop()  # a guest never stops the owner's server
    assert _markers(dsn) == ["shared"]


def test_join_running_owns_the_server_when_nobody_does(
    data_dir: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    server = servers(data_dir)
    dsn = server.start(join_running=True)
    assert server.owner
    assert sql(dsn, "SELECT 1") == [1]


def test_restart_after_the_postmaster_was_killed(
    data_dir: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    crashed = servers(data_dir)
    dsn = crashed.start()
    _write_marker(dsn, "durable")
    process = crashed._process
    assert process is not None
    os.kill(process.pid, signal.SIGKILL)
    os.waitpid(process.pid, 0)
    crashed.stop()  # the owning process goes away too, releasing its lock
    assert (data_dir / "pgdata" / "postmaster.pid").exists()  # stale

    recovered = servers(data_dir)
    new_dsn = recovered.start()
    info = PostmasterInfo.read(recovered.pgdata)
    assert info is not None
    assert info.pid != process.pid
    assert _markers(new_dsn) == ["durable"]


def test_restart_after_the_postmaster_was_killed_mid_query(
    data_dir: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    crashed = servers(data_dir)
    dsn = crashed.start()
    _write_marker(dsn, "durable")
    backend: list[int] = []

    async def busy() -> None:
        conn = await asyncpg.connect(dsn)
        backend.append(await conn.fetchval("SELECT pg_backend_pid()"))
        with contextlib.suppress(asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
            await conn.fetchval("SELECT count(*) FROM generate_series(1, 10000000000000::bigint)")
        conn.terminate()

    worker = threading.Thread(target=asyncio.run, args=(busy(),))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while not sql(
            dsn,
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE state = 'active' AND query LIKE '%generate_series%'"
            " AND pid <> pg_backend_pid()",
        )[0]:
            assert time.monotonic() < deadline, "the busy query never started"
        process = crashed._process
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        os.waitpid(process.pid, 0)
        crashed.stop()

        recovered = servers(data_dir)
        assert _markers(recovered.start()) == ["durable"]
    finally:
        for pid in backend:  # the backend we started; it outlives its postmaster otherwise
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        worker.join(timeout=60)


def test_an_orphaned_postmaster_is_recovered(
    data_dir: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    dying = servers(data_dir)
    dsn = dying.start()
    _write_marker(dsn, "orphaned")
    orphan = dying._process
    assert orphan is not None
    lock = dying._lock_file
    assert lock is not None
    # The owner dies without stopping its server: its lock goes, the postmaster stays.
    dying._process = None
    lock.close()
    dying._lock_file = None
    try:
        assert alive(orphan.pid)
        recovered = servers(data_dir)
        new_dsn = recovered.start()
        assert recovered.owner
        info = PostmasterInfo.read(recovered.pgdata)
        assert info is not None
        assert info.pid != orphan.pid
        assert orphan.poll() is not None  # the orphan was stopped
        assert not alive(orphan.pid)
        assert _markers(new_dsn) == ["orphaned"]
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()


def test_a_stale_pid_file_naming_another_process_is_removed_without_killing_it(
    data_dir: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        (data_dir / "pgdata" / "postmaster.pid").write_text(
            f"{bystander.pid}\n{data_dir / 'pgdata'}\n0\n5432\n/tmp\n\n0 0\nready\n"
        )
        server = servers(data_dir)
        dsn = server.start()
        assert sql(dsn, "SELECT 1") == [1]
        assert bystander.poll() is None  # not ours to stop
        info = PostmasterInfo.read(server.pgdata)
        assert info is not None
        assert info.pid != bystander.pid
    finally:
        bystander.kill()
        bystander.wait()


# --- who may connect -------------------------------------------------------------------------

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("runuser") is None,
    reason="connecting as another OS user (nobody) needs root and runuser to switch users",
)


@pytest.fixture
def reachable_data_dir(initialised_pgdata: Path) -> Iterator[Path]:
    """A copy of the initialised data directory that every user can reach (0755 parents in
    /tmp, not pytest's 0700 base directory), so that a refusal can only come from the
    server's own socket directory, socket and access rules."""
    with tempfile.TemporaryDirectory(prefix="bankrail-access-") as tmp:
        Path(tmp).chmod(0o755)
        target = Path(tmp) / "data"
        target.mkdir(mode=0o755)
        shutil.copytree(initialised_pgdata, target / "pgdata", symlinks=True)
        yield target


def _psql_as(user: str, socket_dir: Path) -> subprocess.CompletedProcess[str]:
    """`psql` (from the pgserver wheel) run as OS user `user`, asking for the `postgres`
    role over the server's socket."""
    return subprocess.run(
        [
            "runuser",
            "-u",
            user,
            "--",
            str(bin_dir() / "psql"),
            f"host={socket_dir} port={PG_PORT} user=postgres dbname=postgres",
            "-Atc",
            "SELECT current_user",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _socket_dir(server: EmbeddedPostgres) -> Path:
    info = PostmasterInfo.read(server.pgdata)
    assert info is not None
    return Path(info.socket_dir)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@needs_root
def test_only_the_user_running_bankrail_can_connect(
    reachable_data_dir: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    server = servers(reachable_data_dir)
    dsn = server.start()
    socket_dir = _socket_dir(server)
    assert _mode(socket_dir) == 0o700
    assert _mode(socket_dir / f".s.PGSQL.{PG_PORT}") == 0o700
    assert sql(dsn, "SHOW listen_addresses") == [""]  # no TCP listener at all
    # Bankrail's own connection, and psql as root and as the user PostgreSQL runs as.
    assert sql(dsn, "SELECT current_user") == ["postgres"]
    for user in ("root", PG_SYSTEM_USER):
        own = _psql_as(user, socket_dir)
        assert (own.returncode, own.stdout) == (0, "postgres\n"), own.stderr
    # nobody reaches the data directory, but not the socket in it.
    assert (
        subprocess.run(
            ["runuser", "-u", "nobody", "--", "test", "-x", str(reachable_data_dir)]
        ).returncode
        == 0
    )
    other = _psql_as("nobody", socket_dir)
    assert other.returncode != 0, other.stdout
    assert "Permission denied" in other.stderr, other.stderr


@needs_root
def test_another_user_who_reaches_the_socket_is_still_refused(
    reachable_data_dir: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    # As if the socket and its directory had been opened up: pg_hba.conf refuses nobody too.
    server = servers(reachable_data_dir)
    dsn = server.start()
    socket_dir = _socket_dir(server)
    socket_dir.chmod(0o711)
    (socket_dir / f".s.PGSQL.{PG_PORT}").chmod(0o777)
    other = _psql_as("nobody", socket_dir)
    assert other.returncode != 0, other.stdout
    assert 'Peer authentication failed for user "postgres"' in other.stderr, other.stderr
    rules = sql(dsn, "SELECT type || ' ' || auth_method FROM pg_hba_file_rules")
    assert rules == ["local peer"]
    assert _psql_as("root", socket_dir).returncode == 0


@needs_root
def test_a_data_directory_left_open_by_an_older_version_is_closed_on_start(
    reachable_data_dir: Path, servers: Callable[[Path], EmbeddedPostgres]
) -> None:
    # What earlier versions left: initdb's `trust` for everyone, a 0755 socket directory.
    pgdata = reachable_data_dir / "pgdata"
    (pgdata / "pg_hba.conf").write_text(
        "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n"
    )
    (pgdata / "pg_ident.conf").write_text("")
    (reachable_data_dir / "run").mkdir(mode=0o755)
    (reachable_data_dir / "run").chmod(0o755)
    server = servers(reachable_data_dir)
    dsn = server.start()
    socket_dir = _socket_dir(server)
    assert socket_dir == reachable_data_dir / "run"
    assert _mode(socket_dir) == 0o700
    assert sql(dsn, "SELECT type || ' ' || auth_method FROM pg_hba_file_rules") == ["local peer"]
    assert "Permission denied" in _psql_as("nobody", socket_dir).stderr
    socket_dir.chmod(0o711)
    (socket_dir / f".s.PGSQL.{PG_PORT}").chmod(0o777)
    assert "Peer authentication failed" in _psql_as("nobody", socket_dir).stderr
