"""What the server's processes cost: CPU seconds and resident memory, read from /proc.

CPU per request (by process group: API, background worker, PostgreSQL, load generator) is
the figure that holds on a busy machine, where requests/s depends on what else runs.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _ppid_and_cpu(pid: int) -> tuple[int, float] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MB (0 when it is gone)."""
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except OSError:
        return 0.0
    return pages * _PAGE / 1e6


def server_processes(root: int, data_dir: Path) -> dict[int, str]:
    """The processes of a `bankrail serve`: pid -> group (`api`, `verifier`, `request_log`,
    `worker`, `postgres`, and `supervisor` for the parent of `--workers N > 1`)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = _ppid_and_cpu(int(entry))
            if info is not None:
                parents[int(entry)] = info[0]
    tree = {root}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    groups: dict[int, str] = {}
    postmasters = [p for p in parents if str(data_dir) in _cmdline(p) and "postgres" in _cmdline(p)]
    for pid in parents:
        command = _cmdline(pid)
        if pid in postmasters or parents[pid] in postmasters:
            groups[pid] = "postgres"
        elif pid not in tree:
            continue
        elif "bankrail worker" in command:
            groups[pid] = "worker"
        elif "bankrail.security.verifier" in command:
            groups[pid] = "verifier"  # each serving process's signature verifiers
        elif "bankrail.http.request_log_writer" in command:
            groups[pid] = "request_log"  # each serving process's request-log writer
        elif "bankrail serve" in command or "spawn_main" in command:
            groups[pid] = "api"
    if any(g == "api" for p, g in groups.items() if p != root) and root in groups:
        groups[root] = "supervisor"  # `--workers N`: the parent only supervises
    return groups


def cpu_by_pid(groups: dict[int, str]) -> dict[int, float]:
    """CPU seconds used so far by each live process of `groups`."""
    seconds: dict[int, float] = {}
    for pid in groups:
        info = _ppid_and_cpu(pid)
        if info is not None:
            seconds[pid] = info[1]
    return seconds


def _machine_ticks() -> list[int]:
    """The first eight counters of /proc/stat's `cpu` line: user, nice, system, idle, iowait,
    irq, softirq, steal (clock ticks, all cores)."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()
    return [int(value) for value in fields[1:9]]


@dataclass
class CpuMeter:
    """CPU used by the server's process groups and this process between `start` and `stop`.

    Processes are found again at `stop`, so PostgreSQL backends started meanwhile count from
    zero; one that exited meanwhile (an autovacuum worker) is left out rather than counted
    negative.
    """

    root: int
    data_dir: Path
    before: dict[int, float] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)
    machine: dict[str, float] = field(default_factory=dict)
    """The whole machine's time meanwhile, as shares of all its cores' time: `busy` (not
    idle, not waiting for I/O) and, part of it, `steal` (taken by the hypervisor for other
    guests: time this machine's processes were ready to run and could not)."""

    def start(self) -> None:
        """Take the first reading."""
        self.before = cpu_by_pid(server_processes(self.root, self.data_dir))
        self._own = sum(os.times()[:2])
        self._machine = _machine_ticks()

    def stop(self) -> None:
        """Take the second reading."""
        groups = server_processes(self.root, self.data_dir)
        after = cpu_by_pid(groups)
        used: dict[str, float] = {}
        for pid, seconds in after.items():
            group = groups[pid]
            used[group] = used.get(group, 0.0) + seconds - self.before.get(pid, 0.0)
        used["loadgen"] = sum(os.times()[:2]) - self._own
        self.used = used
        spent = [b - a for a, b in zip(self._machine, _machine_ticks(), strict=True)]
        total = sum(spent) or 1
        idle, iowait, steal = spent[3], spent[4], spent[7]
        self.machine = {
            "busy": round((total - idle - iowait) / total, 3),
            "steal": round(steal / total, 3),
        }

    def per_request_ms(self, requests: int) -> dict[str, float]:
        """CPU milliseconds per request, by group."""
        return {k: round(v * 1000 / requests, 3) for k, v in self.used.items() if requests}


class RssSampler:
    """Samples the resident memory of the API processes every `interval` seconds."""

    def __init__(self, groups: dict[int, str], interval: float) -> None:
        self.pids = [pid for pid, group in groups.items() if group == "api"]
        self.interval = interval
        self.samples: list[tuple[float, list[float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        self.samples.append(
            (round(time.monotonic() - self._started, 1), [round(rss_mb(p), 1) for p in self.pids])
        )

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def summary(self) -> dict[str, object]:
        """Per API process: first, max and last RSS (MB), and the drift over the second half
        of the run (last minus the value at half time)."""
        if not self.samples:
            return {}
        half = self.samples[len(self.samples) // 2][1]
        first, last = self.samples[0][1], self.samples[-1][1]
        return {
            "processes": len(self.pids),
            "first_mb": first,
            "max_mb": [max(s[1][i] for s in self.samples) for i in range(len(self.pids))],
            "last_mb": last,
            "drift_second_half_mb": [round(b - a, 1) for a, b in zip(half, last, strict=True)],
            "samples": self.samples,
        }
