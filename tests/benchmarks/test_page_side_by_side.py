"""`python -m bench.page_side_by_side` measures a page of payments, read for the first time
and again, against a GET by id on two trees in one run; here both sides are this tree, in a
short run."""

from __future__ import annotations

import json
import sys

from support.bench_runs import run_bench


def test_the_side_by_side_run_measures_both_trees_and_prints_the_ratios() -> None:
    stdout = run_bench(
        "bench.page_side_by_side",
        *("--python", sys.executable, "--rounds", "1", "--base", "20", "--payments", "1100"),
        *("--walk", "5", "--pages", "100", "--gets", "300"),
    )
    report = json.loads(stdout)
    assert set(report) == {"before", "this tree"}
    for figures in report.values():
        for name in ("first walk", "second walk", "first page read again", "GET by id"):
            assert figures[name]["rate"] > 0, name
            assert len(figures["runs"][name]) == 1, name
        for name in ("first walk", "second walk", "first page read again"):
            assert figures[name]["page ÷ GET by rate"] > 0, name
