"""The benchmark's growth figures: the grown database against the empty one."""

from __future__ import annotations

from typing import Any

import pytest
from bench.__main__ import growth


def _scenario(rate: float, cpu: float, verify: float | None = None) -> dict[str, Any]:
    figures: dict[str, Any] = {"requests_per_s": rate, "cpu_ms_per_request": {"api": cpu}}
    if verify is not None:
        figures["verify_per_s_around"] = {"mean": verify}
    return figures


def _run(post_grown: float, verify_grown: float, get_grown: float) -> dict[str, Any]:
    return {
        "post_payouts": _scenario(1_000.0, 1.0, verify=2_000.0),
        "post_payouts_grown": _scenario(post_grown, 1.25, verify=verify_grown),
        "get_payout": _scenario(5_000.0, 0.2),
        "get_payout_grown": _scenario(get_grown, 0.25),
    }


def test_post_growth_discounts_the_machine_slowing_down_between_the_runs() -> None:
    figures = growth(_run(post_grown=800.0, verify_grown=1_600.0, get_grown=5_000.0))
    post = figures["post_payouts"]
    assert post["by_requests_per_s"] == 0.8
    assert post["by_cpu_per_request"] == 0.8
    assert post["by_verify_share"] == 1.0
    assert post["met"]


def test_post_growth_fails_when_its_share_of_the_verify_rate_falls() -> None:
    figures = growth(_run(post_grown=800.0, verify_grown=2_000.0, get_grown=5_000.0))
    assert figures["post_payouts"]["by_verify_share"] == 0.8
    assert not figures["post_payouts"]["met"]


@pytest.mark.parametrize(("get_grown", "met"), [(4_250.0, True), (4_249.0, False)])
def test_a_run_without_verify_rates_around_it_is_judged_by_requests_per_second(
    get_grown: float, met: bool
) -> None:
    get = growth(_run(post_grown=1_000.0, verify_grown=2_000.0, get_grown=get_grown))["get_payout"]
    assert get["by_verify_share"] is None
    assert get["met"] is met
