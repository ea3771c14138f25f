"""`python -m bench.page_side_by_side` measures a page of payments, cold and hot, against a
GET by id on two trees in one run; here both sides are this tree, in a short run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_the_side_by_side_run_measures_both_trees_and_prints_the_ratios() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.page_side_by_side",
            "--python",
            sys.executable,
            "--rounds",
            "1",
            "--base",
            "20",
            "--payments",
            "1100",
            "--walk",
            "5",
            "--pages",
            "100",
            "--gets",
            "300",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert set(report) == {"before", "this tree"}
    for figures in report.values():
        for name in ("cold walk", "hot walk", "hot first page", "GET by id"):
            assert figures[name]["rate"] > 0, name
            assert len(figures["runs"][name]) == 1, name
        for name in ("cold walk", "hot walk", "hot first page"):
            assert figures[name]["page ÷ GET by rate"] > 0, name
