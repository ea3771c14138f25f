"""The benchmark reports the median of repeated POST /v3/payouts runs, never the best."""

from __future__ import annotations

from bench.http_scenarios import median_run


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
