"""Looking at processes from a test, through /proc."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Iterator
from pathlib import Path


def pids() -> Iterator[int]:
    """The ids of the processes /proc lists now (some may be gone by the time they are read)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            yield int(entry.name)


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name: the state first ("Z" for a
    zombie), then the parent's pid, the process group, the session. OSError when the process
    is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def command_line(pid: int) -> str:
    """The process's arguments, joined by spaces. OSError when the process is gone."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def alive(pid: int) -> bool:
    """Whether the process runs; a zombie (exited, not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = stat_fields(pid)[0]
    except OSError:
        return False
    return state != "Z"


def children(parents: Collection[int]) -> list[int]:
    """The live processes whose parent is one of `parents`."""
    return _processes_where(lambda fields: int(fields[1]) in parents)


def session_pids(session: int) -> list[int]:
    """The live processes of session `session` (a server started with `start_new_session`:
    its pid), zombies excepted."""
    return _processes_where(lambda fields: fields[0] != "Z" and int(fields[3]) == session)


def _processes_where(test: Callable[[list[str]], bool]) -> list[int]:
    """The processes whose `stat_fields` pass `test` (those gone meanwhile left out)."""
    found = []
    for pid in pids():
        try:
            if test(stat_fields(pid)):
                found.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    return found


def session_commands(session: int) -> list[str]:
    """The command lines of the live processes of session `session`, zombies excepted."""
    found = []
    for pid in session_pids(session):
        with contextlib.suppress(OSError):
            found.append(command_line(pid))
    return found


def niceness(pid: int) -> int:
    """The process's nice value (0 unless lowered). OSError when the process is gone."""
    return int(stat_fields(pid)[16])  # /proc/<pid>/stat field 19
