"""The benchmark's verdict on the two POST /v3/payouts targets of one configuration."""

from __future__ import annotations

from typing import Any

import pytest
from bench.__main__ import post_targets


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
