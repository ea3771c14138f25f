"""`python -m bench --access-log` compares POST /v3/payouts with the sandbox's access line on
and off, and the line is really written by the server where it is on (and only there)."""

from __future__ import annotations

import re

from support.bench_runs import run_bench


def test_the_access_log_comparison_runs_both_settings_and_prints_the_ratio() -> None:
    stdout = run_bench(
        "bench", "--access-log", "--requests", "60", "--repeats", "2", "--concurrency", "4"
    )
    # 60 warm-up payouts, then 2 turns of 60 (enough CPU per turn for the meter's 10 ms
    # ticks to read it): one line each on the server with the line on.
    assert re.search(r"access line on: +[\d.]+ requests/s .*\(180 lines written\)", stdout)
    assert re.search(r"access line off: +[\d.]+ requests/s", stdout), stdout
    ratio = r"ratio on/off \(median over the rounds\): \d\.\d{3}; API CPU per request on/off: "
    assert re.search(ratio + r"\d\.\d{3}$", stdout, re.M), stdout
