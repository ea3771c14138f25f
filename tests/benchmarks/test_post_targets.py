"""The benchmark's verdict on the two POST /v3/payouts targets of one configuration."""

from __future__ import annotations

from typing import Any

import pytest
from bench.__main__ import post_targets
from bench.report import target_lines
from bench.targets import scenario_targets


def _run(rate: float, verify: float, p99_at_target: float, p99_at_reached: float) -> dict[str, Any]:
    return {
        "post_payouts": {"requests_per_s": rate, "verify_per_s_around": {"mean": verify}},
        "post_payouts_at_80pct_of_target": {"p99_ms": p99_at_target},
        "post_payouts_at_80pct": {"p99_ms": p99_at_reached},
    }


def test_both_targets_are_met_only_when_rate_and_every_p99_are() -> None:
    targets = post_targets(_run(1_200.0, 2_000.0, 50.0, 49.0))
    assert targets["verify_share"] == 0.6
    assert targets["rate_met"]
    assert targets["p99_met_at_80pct_of_target"]
    assert targets["both_met"]


@pytest.mark.parametrize(
    ("rate", "p99_at_target", "p99_at_reached", "failed"),
    [
        (1_199.0, 10.0, 10.0, "rate_met"),
        (1_500.0, 50.1, 10.0, "p99_met_at_80pct_of_target"),
        (1_500.0, 10.0, 50.1, "p99_met_at_80pct_of_reached"),
    ],
)
def test_one_missed_target_fails_the_configuration(
    rate: float, p99_at_target: float, p99_at_reached: float, failed: str
) -> None:
    targets = post_targets(_run(rate, 2_000.0, p99_at_target, p99_at_reached))
    assert not targets[failed]
    assert not targets["both_met"]


def _with_peer(create_rate: float | None) -> dict[str, Any]:
    run: dict[str, Any] = {
        "post_payouts": {"requests_per_s": 1_000.0, "verify_per_s_around": {"mean": 2_000.0}},
        "post_payouts_at_80pct": {"p99_ms": 40.0},
    }
    if create_rate is not None:
        run["localstripe_create"] = {"requests_per_s": create_rate, "version": "1.15"}
    return run


@pytest.mark.parametrize(
    ("create_rate", "multiple", "met"),
    [(200.0, 5.0, True), (201.0, 4.975, False), (None, None, None)],
)
def test_payouts_are_judged_against_five_times_localstripes_create(
    create_rate: float | None, multiple: float | None, met: bool | None
) -> None:
    figure = scenario_targets(_with_peer(create_rate))["post_payouts"]
    assert figure["localstripe_create_multiple"] == multiple
    assert figure["localstripe_create_met"] is met


def test_the_report_says_the_create_target_or_why_it_was_not_judged() -> None:
    judged = {"workers": 1, **_with_peer(250.0)}
    judged["targets"] = scenario_targets(judged)
    assert (
        "signed POST /v3/payouts, 1 process(es): 1,000 req/s, 4.00 x localstripe 1.15's create"
        " (250/s) (NOT met, >= 5 x)" in target_lines({"workers_1": judged})
    )
    skipped = {"workers": 1, **_with_peer(None), "localstripe_create": {"skipped": "not here"}}
    skipped["targets"] = scenario_targets(skipped)
    assert (
        "signed POST /v3/payouts, 1 process(es): not judged against localstripe's create,"
        " the baseline was skipped (not here)" in target_lines({"workers_1": skipped})
    )
