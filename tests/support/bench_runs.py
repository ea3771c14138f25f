"""Running a benchmark of `bench/` as a user does: `python -m <module> ...` from the project's
root, in a process of its own, bounded in time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def run_bench(module: str, *args: str) -> str:
    """The standard output of `python -m <module> <args>`, which must exit 0 within five
    minutes (its output and errors are the assertion's message otherwise)."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
