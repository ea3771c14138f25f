"""`serve` starts its background-work process only once an API process has built its
application, starts it again when it fails, and reports whether it runs
(`DeferredProcess`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from bankrail.cli import DeferredProcess, published_state
from support.waiting import wait_for

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def _started(deferred: DeferredProcess, timeout: float = 10) -> None:
    wait_for(lambda: deferred.process, timeout=timeout, what="the process to start", interval=0.01)


def test_starts_the_process_once_ready_and_stops_it() -> None:
    ready = threading.Event()
    seen_before_ready: list[object] = []
    deferred: DeferredProcess

    def is_ready() -> bool:
        if not ready.is_set():
            seen_before_ready.append(deferred.process)
            if len(seen_before_ready) == 3:
                ready.set()  # ready from the next look on
            return False
        return True

    deferred = DeferredProcess(SLEEPER, is_ready)
    deferred.start()
    _started(deferred)
    assert seen_before_ready == [None, None, None]
    process = deferred.process
    assert process is not None
    deferred.stop(timeout=10)
    assert process.returncode is not None


def test_stopped_before_ready_it_never_starts() -> None:
    deferred = DeferredProcess(SLEEPER, lambda: False)
    deferred.start()
    deferred.stop(timeout=10)
    assert deferred.process is None


def test_starts_anyway_when_never_ready() -> None:
    deferred = DeferredProcess(SLEEPER, lambda: False, longest_wait=0.2)
    deferred.start()
    _started(deferred)
    deferred.stop(timeout=10)
    assert deferred.process is not None
    assert deferred.process.returncode is not None


def test_its_state_says_whether_it_runs() -> None:
    ready = threading.Event()
    deferred = DeferredProcess(SLEEPER, ready.is_set, restart_delay=60)
    assert deferred.state() == "starting"
    deferred.start()
    ready.set()
    _started(deferred)
    assert deferred.state() == "ok"
    assert deferred.process is not None
    deferred.process.kill()
    deferred.process.wait()
    assert deferred.state() == "exited with code -9; restarting"
    deferred.stop(timeout=10)
    assert deferred.state() == "exited with code -9"


def test_stopped_before_it_started_it_says_so() -> None:
    deferred = DeferredProcess(SLEEPER, lambda: False)
    deferred.start()
    deferred.stop(timeout=10)
    assert deferred.state() == "stopped"


def test_a_process_that_fails_is_started_again() -> None:
    # Fails the first time (as a worker does when the database is not reachable yet),
    # then runs.
    marker = Path(tempfile.mkdtemp()) / "failed-once"
    command = [
        sys.executable,
        "-c",
        "import pathlib, sys, time\n"
        f"m = pathlib.Path({str(marker)!r})\n"
        "if not m.exists():\n    m.touch(); sys.exit(3)\n"
        "time.sleep(60)",
    ]
    deferred = DeferredProcess(command, lambda: True, restart_delay=0.05)
    deferred.start()
    _started(deferred)
    first = deferred.process
    assert first is not None
    wait_for(
        lambda: deferred.process is not first and deferred.state() == "ok",
        timeout=20,
        what="the process to be started again",
        interval=0.01,
    )
    assert first.returncode == 3
    assert marker.exists()
    deferred.stop(timeout=10)
    assert deferred.state() == "exited with code -15"


def _stays_ended(deferred: DeferredProcess, first: subprocess.Popen[bytes]) -> None:
    """`first` has ended and no process takes its place."""
    first.wait(timeout=20)
    # Longer than the supervisor's look (0.2 s) and its restart delay together.
    until = time.monotonic() + 1.0
    while time.monotonic() < until:
        assert deferred.process is first
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("code", "state"),
    [("pass", "exited with code 0"), ("raise SystemExit(130)", "exited with code 130")],
    ids=["clean exit", "exit 130, as `bankrail worker` on Ctrl-C"],
)
def test_a_process_that_was_asked_to_stop_is_not_started_again(code: str, state: str) -> None:
    deferred = DeferredProcess([sys.executable, "-c", code], lambda: True, restart_delay=0.05)
    deferred.start()
    _started(deferred)
    first = deferred.process
    assert first is not None
    _stays_ended(deferred, first)
    assert deferred.state() == state
    deferred.stop(timeout=10)


def test_a_process_stopped_by_a_signal_from_outside_is_not_started_again() -> None:
    # Ctrl-C reaches `serve`'s worker through the process group.
    running = Path(tempfile.mkdtemp()) / "running"
    command = [
        sys.executable,
        "-c",
        f"import pathlib, time; pathlib.Path({str(running)!r}).touch(); time.sleep(60)",
    ]
    deferred = DeferredProcess(command, lambda: True, restart_delay=0.05)
    deferred.start()
    _started(deferred)
    first = deferred.process
    assert first is not None
    # Past the interpreter's start, as a running worker is.
    wait_for(running.exists, timeout=20, what="the process to run", interval=0.01)
    first.send_signal(signal.SIGINT)
    _stays_ended(deferred, first)
    assert deferred.state() == "exited with code -2"
    deferred.stop(timeout=10)


def _published(state_file: Path, expected: str) -> None:
    wait_for(
        lambda: published_state(state_file) == expected,
        timeout=20,
        what=f"{expected!r} to be published",
        interval=0.01,
    )


def test_its_state_is_published_for_other_processes() -> None:
    # The API processes of `serve --workers N` read the worker's state from this file.
    state_file = Path(tempfile.mkdtemp()) / "worker-state"
    assert published_state(state_file) == "starting"
    ready = threading.Event()
    deferred = DeferredProcess(SLEEPER, ready.is_set, restart_delay=60, state_file=state_file)
    deferred.start()
    _published(state_file, "starting")
    ready.set()
    _published(state_file, "ok")
    assert deferred.process is not None
    deferred.process.kill()
    _published(state_file, "exited with code -9; restarting")
    deferred.stop(timeout=10)
    assert published_state(state_file) == "exited with code -9"
