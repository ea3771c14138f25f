"""The no-op pipeline's share by CPU, and its line of the bench's report: the share, or why
there is none."""

from __future__ import annotations

from typing import Any

import pytest
from bench.pipeline_noop import share_by_cpu
from bench.report import _run_lines


def test_a_pipeline_that_read_no_cpu_has_no_share_instead_of_a_division_by_zero() -> None:
    assert share_by_cpu(25.0, 40.0) == 0.625
    assert share_by_cpu(25.0, 0.0) is None


def _noop(pipeline_us: float, share_by_cpu: float | None) -> dict[str, Any]:
    return {
        "workers": 1,
        "ready_seconds_fresh": 1.0,
        "ready_seconds_existing": 0.5,
        "pipeline_noop": {
            "pipeline_per_s": 24_000.0,
            "bare_starlette_per_s": 36_000.0,
            "share": 24_000 / 36_000,
            "pipeline_cpu_us": pipeline_us,
            "bare_starlette_cpu_us": 25.0,
            "share_by_cpu": share_by_cpu,
            "target_share": 0.6,
            "met": True,
        },
    }


@pytest.mark.parametrize(
    ("pipeline_us", "share_by_cpu", "said"),
    [
        (40.0, 0.625, "by CPU per request 25 ÷ 40 µs = 0.62"),
        # A smoke run on a fast machine: the process used less than one 10 ms tick.
        (0.0, None, "by CPU per request 25 ÷ 0 µs (n/a: each run under the CPU meter's 10 ms)"),
    ],
)
def test_the_share_by_cpu_is_printed_or_said_to_be_unmeasured(
    pipeline_us: float, share_by_cpu: float | None, said: str
) -> None:
    (line,) = [line for line in _run_lines(_noop(pipeline_us, share_by_cpu)) if "no-op" in line]
    assert line.startswith("no-op authenticated GET through the middleware and pipeline 24,000")
    assert line.endswith(said)
