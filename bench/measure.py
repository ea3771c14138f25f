"""How one scenario is measured: its requests sent by the load generator while the CPU of
each process group is metered, the one-core verify rate measured just before and after it,
repeated runs reduced to their median, and the same scenario again in an open loop at 80 %
of the rate it reached."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from bench import profiles
from bench.baselines import verify_rate
from bench.loadgen import LoadResult, run_load
from bench.processes import CpuMeter
from bench.service import Server

LOAD_SHARE = 0.8
"""The p99 target holds at this share of a rate."""
QUIET_SECONDS = 0.3
"""A server's request log has written what it buffered once its newest entry stayed the same
this long (three times its writer's interval)."""
IDLE_LIMIT_SECONDS = 60.0
"""How long a request log may keep writing before the bench gives up waiting for it."""


@dataclass
class Options:
    """What the HTTP scenarios do, beyond the request count and concurrency."""

    seed_rows: int = 0  # growth: rerun POST and GET with this many payouts and payments
    soak_seconds: float = 0.0  # memory: mixed load this long while sampling RSS
    rss_interval: float = 5.0
    compare_wrk: bool = False  # run `wrk` on the GET scenario too, if it is installed
    verify_seconds: float = 1.0  # the verify baseline, measured again around each scenario
    repeats: int = 3  # runs of POST /v3/payouts and GET by id; the median run is reported


async def measured(
    server: Server,
    requests: list[bytes],
    concurrency: int,
    rate: float | None = None,
    *,
    settled: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """Run one scenario and add the CPU it cost each process group per request. With
    `settled`, awaited after the last answer, the CPU is metered until it returns, so that
    the work the requests left behind counts in theirs; the rate stays the answers' own, and
    `settled_per_s` counts its time too."""
    assert server.process is not None
    assert server.data_dir is not None
    meter = CpuMeter(server.process.pid, server.data_dir)
    settle = 0.0
    # Sampled by py-spy under `python -m bench.profiles`, the closed loops only.
    async with profiles.recording(server if rate is None else None):
        meter.start()
        result: LoadResult = await run_load(
            "127.0.0.1", server.port, requests, concurrency=concurrency, rate=rate
        )
        if settled is not None:
            began = time.perf_counter()
            await settled()
            settle = time.perf_counter() - began
        meter.stop()
    summary: dict[str, Any] = dict(result.summary())
    summary["settled_per_s"] = result.requests / (result.seconds + settle) if result.requests else 0
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


async def idle(server: Server) -> None:
    """Return once the server's request log has written what it buffered: its newest entry
    stayed the same for QUIET_SECONDS and no `COPY` into it was running at either look (with
    the log off, after QUIET_SECONDS, so that both settings pause alike). A loop started then
    pays for no earlier loop's entries, and a verify rate read then is not slowed by them.
    It waits for nothing else: payouts' execution is `_drained`'s, and each write's check
    waits for what its batch left behind."""
    import asyncpg

    # With several API processes, one writer's batch may still be copying while another's
    # newest entry stands still: a running COPY counts as writing.
    writing = (
        "SELECT (SELECT id FROM request_log ORDER BY id DESC LIMIT 1),"
        " EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()"
        " AND state = 'active'"
        " AND pid <> pg_backend_pid() AND query ILIKE 'copy%request_log%')"
    )
    conn = await asyncpg.connect(server.dsn())
    try:
        began = time.monotonic()
        last = tuple(await conn.fetchrow(writing))
        while time.monotonic() - began < IDLE_LIMIT_SECONDS:
            await asyncio.sleep(QUIET_SECONDS)
            now = tuple(await conn.fetchrow(writing))
            if now == last and not now[1]:
                return
            last = now
    finally:
        await conn.close()
    raise RuntimeError(f"the request log was still writing after {IDLE_LIMIT_SECONDS} s")


async def between_verify_rates(
    server: Server,
    verify_seconds: float,
    scenario: Callable[[float], Coroutine[Any, Any, dict[str, Any]]],
) -> dict[str, Any]:
    """The figures of `scenario(verify rate just measured)`, with the one-core verify rate
    measured just before and just after it under `verify_per_s_around`, each once the
    server's request log is `idle`."""
    await idle(server)
    before = verify_rate(verify_seconds)
    summary = await scenario(before)
    await idle(server)
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


Check = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""Given a run's figures, what the run left behind (every accepted write stored or executed)."""


@dataclass
class Batch:
    """Requests prepared (and signed) before any clock starts, and the check of what they
    left behind once they ran."""

    requests: list[bytes]
    check: Check | None = None


async def _run_batch(
    server: Server, batch: Batch, concurrency: int, check_key: str, rate: float | None = None
) -> dict[str, Any]:
    summary = await measured(server, batch.requests, concurrency, rate=rate)
    if batch.check is not None:
        summary[check_key] = await batch.check(summary)
    return summary


async def saturated_and_paced(
    server: Server,
    prepare: Callable[[], Awaitable[Batch]],
    concurrency: int,
    options: Options,
    *,
    check_key: str = "nothing_lost",
    repeat: bool = False,
) -> dict[str, Any]:
    """A scenario in a closed loop, between two verify rates (its share of their mean under
    `verify_share`; run `options.repeats` times and the median kept when `repeat`), then on a
    batch of its own in an open loop (twice the connections) at 80 % of the rate it reached,
    whose figures are under `at_80pct`. `prepare` makes each batch (a write needs new
    Idempotency-Keys, and sometimes a payment to act on) before the verify rate is measured;
    each batch's check runs right after it, inside the window (so that the next measurement
    does not pay for this one's background work), and each loop starts once the server's
    request log is `idle`."""

    async def run_once() -> dict[str, Any]:
        batch = await prepare()
        return await between_verify_rates(
            server,
            options.verify_seconds,
            lambda _: _run_batch(server, batch, concurrency, check_key),
        )

    if repeat:
        summary = await repeated(options, run_once, "verify_share", higher_is_better=True)
    else:
        summary = await run_once()
        summary["verify_share"] = summary["requests_per_s"] / summary["verify_per_s_around"]["mean"]
    rate = LOAD_SHARE * summary["requests_per_s"]
    batch = await prepare()
    await idle(server)
    paced = await _run_batch(server, batch, concurrency * 2, check_key, rate=rate)
    paced["target_rate"] = rate
    summary["at_80pct"] = paced
    return summary
