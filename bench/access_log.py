"""`python -m bench --access-log`: what the sandbox's access line (one line per request,
written by every API process) costs `POST /v3/payouts`.

Two `bankrail serve --workers 1`, one with the line on and one with it off, both logging at
INFO to a file, run side by side; they take turns (on, off, then off, on...), each turn a
closed loop of fresh signed payouts after the other server's payouts have all executed, so
that the machine's change of speed and the background work fall on both alike. Reported:
each setting's median requests/s and p50, and the median over the rounds of the ratio on/off
of the round's two rates."""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.http_scenarios import _drained
from bench.loadgen import run as run_loop
from bench.measure import measured
from bench.service import Merchant, Server, payout_body, seed, signed_post

__all__ = ["access_log_cost"]


async def access_log_cost(requests: int, concurrency: int, rounds: int) -> dict[str, Any]:
    """Alternate `rounds` turns of `requests` payouts on each server; the figures of each
    setting and the median of the rounds' ratios of their rates (on / off)."""
    logs = Path(tempfile.mkdtemp(prefix="bankrail-bench-access-"))
    servers = {
        name: Server(
            1,
            env={"BANKRAIL_ACCESS_LOG": name, "BANKRAIL_LOG_LEVEL": "INFO"},
            output=logs / f"serve-{name}.log",
        )
        for name in ("on", "off")
    }
    try:
        merchants: dict[str, Merchant] = {}
        for name, server in servers.items():
            server.start()
            merchants[name] = seed(server, balance=10**15)
            await _turn(server, merchants[name], min(200, requests), concurrency)  # warm-up
        turns: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
        for i in range(rounds):
            for name in ("on", "off") if i % 2 == 0 else ("off", "on"):
                turns[name].append(
                    await _turn(servers[name], merchants[name], requests, concurrency)
                )
        lines = _access_lines(servers["on"].output)
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(logs, ignore_errors=True)
    rates = {
        name: statistics.median(t["requests_per_s"] for t in runs) for name, runs in turns.items()
    }
    return {
        "requests": requests,
        "concurrency": concurrency,
        "rounds": rounds,
        "turns": turns,
        "median_requests_per_s": rates,
        "median_p50_ms": {
            name: statistics.median(t["p50_ms"] for t in runs) for name, runs in turns.items()
        },
        # Each round's two turns ran back to back: the median of their ratios discounts
        # the machine's change of speed across rounds, which moves the rates by half here.
        "ratio_on_off": statistics.median(
            on["requests_per_s"] / off["requests_per_s"]
            for on, off in zip(turns["on"], turns["off"], strict=True)
        ),
        # CPU of the API process per request: what holds on a busy machine (performance.md).
        "median_api_cpu_ms": {
            name: statistics.median(t["api_cpu_ms"] for t in runs) for name, runs in turns.items()
        },
        "access_lines_written": lines,
    }


async def _turn(
    server: Server, merchant: Merchant, requests: int, concurrency: int
) -> dict[str, float]:
    """One closed loop of `requests` fresh payouts, every one accepted, then drained."""
    batch = [
        signed_post(server, merchant, "/v3/payouts", payout_body(merchant)) for _ in range(requests)
    ]
    summary = await measured(server, batch, concurrency)
    assert summary["ok_ratio"] == 1.0, summary
    await _drained(server)
    return {**summary, "api_cpu_ms": summary["cpu_ms_per_request"]["api"]}


def _access_lines(output: Path | None) -> int:
    """How many access lines of payouts a server wrote: proof that the line was on."""
    assert output is not None
    return sum(" POST /v3/payouts 202 " in line for line in output.read_text().splitlines())


def report(figures: dict[str, Any]) -> str:
    """The comparison as a few lines of text."""
    rates, p50 = figures["median_requests_per_s"], figures["median_p50_ms"]
    cpu = figures["median_api_cpu_ms"]
    return "\n".join(
        [
            f"POST /v3/payouts, {figures['rounds']} turns of {figures['requests']} requests "
            f"at {figures['concurrency']} connections per setting (medians):",
            f"  access line on:  {rates['on']:8.1f} requests/s  p50 {p50['on']:.1f} ms"
            f"  API CPU {cpu['on']:.3f} ms/request"
            f"  ({figures['access_lines_written']} lines written)",
            f"  access line off: {rates['off']:8.1f} requests/s  p50 {p50['off']:.1f} ms"
            f"  API CPU {cpu['off']:.3f} ms/request",
            f"  ratio on/off (median over the rounds): {figures['ratio_on_off']:.3f};"
            " API CPU per request on/off: "
            + (
                f"{cpu['on'] / cpu['off']:.3f}"
                if cpu["off"] > 0
                else "n/a (each turn under the CPU meter's 10 ms)"
            ),
        ]
    )


def run(requests: int, concurrency: int, rounds: int) -> str:
    """Measure and return the report."""
    return report(run_loop(access_log_cost(requests, concurrency, rounds)))
