"""The benchmark reports the median of repeated runs (POST /v3/payouts, GET by id), never the
best."""

from __future__ import annotations

import asyncio
from typing import Any

from bench.http_scenarios import Options, _repeated, median_run


def _runs(*values: float) -> list[dict[str, float]]:
    return [{"p99_ms": value, "verify_share": value, "order": i} for i, value in enumerate(values)]


def test_the_median_run_is_the_middle_one_whatever_the_order() -> None:
    chosen = median_run(_runs(61.0, 20.0, 35.0), "p99_ms", higher_is_better=False)
    assert chosen["p99_ms"] == 35.0
    assert chosen["order"] == 2


def test_of_two_middle_runs_the_worse_is_reported() -> None:
    runs = _runs(30.0, 40.0, 50.0, 60.0)
    assert median_run(runs, "p99_ms", higher_is_better=False)["p99_ms"] == 50.0
    assert median_run(runs, "verify_share", higher_is_better=True)["verify_share"] == 40.0


def test_a_single_run_is_its_own_median() -> None:
    assert median_run(_runs(0.7), "verify_share", higher_is_better=True)["verify_share"] == 0.7


def test_a_repeated_scenario_reports_its_median_run_by_share_of_the_verify_rate() -> None:
    # The GET runs too: one lasts about a second, so a single one is at the machine's mercy.
    rates = iter([9_000.0, 11_000.0, 10_000.0])

    async def run_once() -> dict[str, Any]:
        return {"requests_per_s": next(rates), "verify_per_s_around": {"mean": 2_000.0}}

    chosen = asyncio.run(
        _repeated(Options(repeats=3), run_once, "verify_share", higher_is_better=True)
    )
    assert chosen["requests_per_s"] == 10_000.0
    assert chosen["verify_share"] == 5.0
    assert [run["requests_per_s"] for run in chosen["runs"]] == [9_000.0, 11_000.0, 10_000.0]
