"""A PgBouncer of a test's own, in transaction pooling mode, in front of the local PostgreSQL
server (docs/operations.md, "Connection poolers")."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from support.server import free_port

PGBOUNCER = "/usr/sbin/pgbouncer"


def _through(dsn: str, port: int) -> str:
    """`dsn` with its address replaced by the pooler's."""
    parts = urlsplit(dsn)
    user = parts.username or "postgres"
    return urlunsplit((parts.scheme, f"{user}@127.0.0.1:{port}", parts.path, "", ""))


@contextlib.contextmanager
def pgbouncer(dsn: str, *, pool_size: int = 10) -> Iterator[str]:
    """A started PgBouncer (`pool_mode = transaction`, at most `pool_size` server connections
    per database) forwarding to the server of `dsn`; yields `dsn` through it. Skips the test
    when PgBouncer is not installed (`./dev test` installs it when it can)."""
    if not os.access(PGBOUNCER, os.X_OK):
        pytest.skip(f"{PGBOUNCER} is missing: install the Debian package pgbouncer")
    server = urlsplit(dsn)
    port = free_port()
    home = Path(tempfile.mkdtemp(prefix="bankrail-pgbouncer-"))
    home.chmod(0o755)  # run as root, PgBouncer drops to `nobody` and reads its files after
    (home / "users.txt").write_text(f'"{server.username or "postgres"}" ""\n')
    lines = [
        "[databases]",
        f"* = host={server.hostname} port={server.port or 5432}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {home / 'users.txt'}",
        "pool_mode = transaction",
        f"default_pool_size = {pool_size}",
        "max_client_conn = 1000",
        "ignore_startup_parameters = extra_float_digits",
        "log_connections = 0",
        "log_disconnections = 0",
    ]
    if os.geteuid() == 0:
        lines.append("user = nobody")
    config = home / "pgbouncer.ini"
    config.write_text("\n".join(lines) + "\n")
    for path in home.iterdir():
        path.chmod(0o644)
    log = (home / "pgbouncer.log").open("wb")
    process = subprocess.Popen(
        [PGBOUNCER, str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited:\n{(home / 'pgbouncer.log').read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield _through(dsn, port)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(home, ignore_errors=True)
