"""How one scenario is measured: its requests sent by the load generator while the CPU of
each process group is metered, the one-core verify rate measured just before and after it,
and repeated runs reduced to their median."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from bench.baselines import verify_rate
from bench.loadgen import LoadResult, run_load
from bench.processes import CpuMeter
from bench.service import Server


@dataclass
class Options:
    """What the HTTP scenarios do, beyond the request count and concurrency."""

    seed_rows: int = 0  # growth: rerun POST and GET with this many payouts and payments
    soak_seconds: float = 0.0  # memory: mixed load this long while sampling RSS
    rss_interval: float = 5.0
    compare_wrk: bool = False  # run `wrk` on the GET scenario too, if it is installed
    verify_seconds: float = 1.0  # the verify baseline, measured again around each POST payouts
    repeats: int = 3  # runs of each POST /v3/payouts scenario; the median run is reported


async def measured(
    server: Server, requests: list[bytes], concurrency: int, rate: float | None = None
) -> dict[str, Any]:
    """Run one scenario and add the CPU it cost each process group per request."""
    assert server.process is not None
    assert server.data_dir is not None
    meter = CpuMeter(server.process.pid, server.data_dir)
    meter.start()
    result: LoadResult = await run_load(
        "127.0.0.1", server.port, requests, concurrency=concurrency, rate=rate
    )
    meter.stop()
    summary: dict[str, Any] = dict(result.summary())
    summary["cpu_ms_per_request"] = meter.per_request_ms(result.requests)
    summary["machine"] = meter.machine
    return summary


async def repeated(
    options: Options,
    run_once: Callable[[], Coroutine[Any, Any, dict[str, Any]]],
    figure: str,
    *,
    higher_is_better: bool,
) -> dict[str, Any]:
    """`run_once` (whose figures include `verify_per_s_around`) run `options.repeats` times:
    the median run by `figure`, with each run's share of the verify rate around it, and
    every run's figures under `runs`."""
    runs = []
    for _ in range(max(1, options.repeats)):
        summary = await run_once()
        summary["verify_share"] = summary["requests_per_s"] / summary["verify_per_s_around"]["mean"]
        runs.append(summary)
    chosen = median_run(runs, figure, higher_is_better=higher_is_better)
    kept = ("requests_per_s", "verify_share", "p50_ms", "p99_ms", "target_rate")
    chosen["runs"] = [{key: run[key] for key in kept if key in run} for run in runs]
    return chosen


async def between_verify_rates(
    verify_seconds: float, scenario: Callable[[float], Coroutine[Any, Any, dict[str, Any]]]
) -> dict[str, Any]:
    """The figures of `scenario(verify rate just measured)`, with the one-core verify rate
    measured just before and just after it (the server idle both times) under
    `verify_per_s_around`."""
    before = verify_rate(verify_seconds)
    summary = await scenario(before)
    after = verify_rate(verify_seconds)
    summary["verify_per_s_around"] = {
        "before": before,
        "after": after,
        "mean": (before + after) / 2,
    }
    return summary


def median_run(
    runs: list[dict[str, Any]], figure: str, *, higher_is_better: bool
) -> dict[str, Any]:
    """The run whose `figure` is the median; of an even count, the worse of the middle two."""
    ordered = sorted(runs, key=lambda run: run[figure], reverse=higher_is_better)
    return dict(ordered[len(ordered) // 2])
