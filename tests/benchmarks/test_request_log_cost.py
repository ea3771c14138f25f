"""`python -m bench --request-log` compares POST /v3/payouts and GET /v3/payouts/{id} with
the request log on and off, and the log is really written by the server where it is on (and
only there)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_the_request_log_comparison_runs_both_settings_and_prints_the_ratios() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--request-log",
            "--requests",
            "100",
            "--repeats",
            "2",
            "--concurrency",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    written = re.search(r"entries written: on (\d+), off (\d+)", done.stdout)
    assert written, done.stdout
    # At least the 50 payouts made for the GETs, the warm-up's 100 + 100 and 2 turns of 100 +
    # 100 (enough CPU per turn for the meter's 10 ms ticks to read it).
    assert int(written[1]) >= 50 + 200 + 400, done.stdout
    assert int(written[2]) == 0, done.stdout
    for title in (r"signed POST /v3/payouts:", r"GET /v3/payouts/\{id\}:"):
        assert re.search(title, done.stdout), done.stdout
    assert re.search(r"log on : +[\d.]+ requests/s", done.stdout), done.stdout
    assert re.search(r"log off: +[\d.]+ requests/s", done.stdout), done.stdout
    ratios = re.findall(
        r"ratio on/off of the rates .*: \d\.\d{3}; of all CPU .*: \d\.\d{3}$", done.stdout, re.M
    )
    assert len(ratios) == 2, done.stdout
