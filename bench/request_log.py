"""`python -m bench --request-log`: what the request log (on by default in the sandbox)
costs a signed `POST /v3/payouts` and a `GET /v3/payouts/{id}`.

Two `bankrail serve --workers 1` with the sandbox defaults, one with the request log on (its
default 7 days) and one with it off (`BANKRAIL_REQUEST_LOG_RETENTION_SECONDS=0`), run side by
side; they take turns (on, off, then off, on...), each turn a closed loop of fresh signed
payouts (after the other server's payouts have all executed) and then of GETs by id, so that
the machine's change of speed and the background work fall on both alike. Reported for each
request: each setting's median requests/s, p50 and CPU per request (API processes, and all
of the server's processes with PostgreSQL), and the median over the rounds of the ratio on/off
of the round's two rates; and how many entries the log wrote (proof it was on)."""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

import asyncpg

from bench.http_scenarios import _created_payout_ids, _drained
from bench.loadgen import http_request
from bench.loadgen import run as run_loop
from bench.measure import measured
from bench.service import Merchant, Server, payout_body, seed, signed_post

__all__ = ["request_log_cost"]

SETTINGS = {"on": "604800", "off": "0"}
KINDS = ("post", "get")


async def request_log_cost(requests: int, concurrency: int, rounds: int) -> dict[str, Any]:
    """Alternate `rounds` turns of `requests` payouts and `requests` GETs on each server;
    the figures of each setting and the medians of the rounds' ratios (on / off)."""
    servers = {
        name: Server(1, env={"BANKRAIL_REQUEST_LOG_RETENTION_SECONDS": value})
        for name, value in SETTINGS.items()
    }
    try:
        merchants: dict[str, Merchant] = {}
        paths: dict[str, list[str]] = {}
        for name, server in servers.items():
            server.start()
            merchants[name] = seed(server, balance=10**15)
            ids = _created_payout_ids(server, merchants[name], 50)
            paths[name] = [f"/v3/payouts/{payout_id}" for payout_id in ids]
            await _turn(server, merchants[name], paths[name], min(200, requests), concurrency)
        turns: dict[str, dict[str, list[dict[str, float]]]] = {
            kind: {"on": [], "off": []} for kind in KINDS
        }
        for i in range(rounds):
            for name in ("on", "off") if i % 2 == 0 else ("off", "on"):
                done = await _turn(
                    servers[name], merchants[name], paths[name], requests, concurrency
                )
                for kind in KINDS:
                    turns[kind][name].append(done[kind])
        await asyncio.sleep(0.5)  # the last batch of entries is written within 0.1 s
        written = {name: await _entries(server) for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    return {
        "requests": requests,
        "concurrency": concurrency,
        "rounds": rounds,
        "turns": turns,
        "entries_written": written,
        **{kind: _figures(turns[kind]) for kind in KINDS},
    }


def _figures(turns: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    def median(name: str, field: str) -> float:
        return statistics.median(t[field] for t in turns[name])

    cpu_ratios = [
        on["all_cpu_ms"] / off["all_cpu_ms"]
        for on, off in zip(turns["on"], turns["off"], strict=True)
        if off["all_cpu_ms"] > 0
    ]

    return {
        "median_requests_per_s": {name: median(name, "requests_per_s") for name in turns},
        "median_p50_ms": {name: median(name, "p50_ms") for name in turns},
        "median_api_cpu_ms": {name: median(name, "api_cpu_ms") for name in turns},
        "median_writer_cpu_ms": {name: median(name, "writer_cpu_ms") for name in turns},
        "median_postgres_cpu_ms": {name: median(name, "postgres_cpu_ms") for name in turns},
        "median_all_cpu_ms": {name: median(name, "all_cpu_ms") for name in turns},
        # Each round's two turns ran back to back: the median of their ratios discounts the
        # machine's change of speed across rounds.
        "ratio_on_off": statistics.median(
            on["requests_per_s"] / off["requests_per_s"]
            for on, off in zip(turns["on"], turns["off"], strict=True)
        ),
        # A turn too short for the CPU meter's 10 ms ticks reads 0 ms: no ratio of it.
        "cpu_ratio_on_off": statistics.median(cpu_ratios) if cpu_ratios else None,
    }


async def _turn(
    server: Server, merchant: Merchant, paths: list[str], requests: int, concurrency: int
) -> dict[str, dict[str, float]]:
    """One closed loop of `requests` fresh payouts, every one accepted, drained; then one of
    `requests` GETs by id cycling over `paths`."""
    posts = [
        signed_post(server, merchant, "/v3/payouts", payout_body(merchant)) for _ in range(requests)
    ]
    posted = await measured(server, posts, concurrency)
    assert posted["ok_ratio"] == 1.0, posted
    await _drained(server)
    host = f"127.0.0.1:{server.port}"
    auth = {"Authorization": f"Bearer {merchant.token}"}
    gets = [http_request("GET", paths[i % len(paths)], host, auth) for i in range(requests)]
    got = await measured(server, gets, concurrency)
    assert got["ok_ratio"] == 1.0, got
    return {"post": _summary(posted), "get": _summary(got)}


def _summary(measured_run: dict[str, Any]) -> dict[str, float]:
    cpu = measured_run["cpu_ms_per_request"]
    return {
        "requests_per_s": measured_run["requests_per_s"],
        "p50_ms": measured_run["p50_ms"],
        "api_cpu_ms": cpu.get("api", 0.0),
        "writer_cpu_ms": cpu.get("request_log", 0.0),
        "postgres_cpu_ms": cpu.get("postgres", 0.0),
        "all_cpu_ms": round(sum(cpu.values()), 3),
    }


async def _entries(server: Server) -> int:
    conn = await asyncpg.connect(server.dsn())
    try:
        return int(await conn.fetchval("SELECT count(*) FROM request_log"))
    finally:
        await conn.close()


def report(figures: dict[str, Any]) -> str:
    """The comparison as a few lines of text."""
    lines = [
        f"Request log on vs off, {figures['rounds']} turns of {figures['requests']} requests at "
        f"{figures['concurrency']} connections per setting (medians); entries written: "
        f"on {figures['entries_written']['on']}, off {figures['entries_written']['off']}"
    ]
    for kind, title in (("post", "signed POST /v3/payouts"), ("get", "GET /v3/payouts/{id}")):
        f = figures[kind]
        rates, p50 = f["median_requests_per_s"], f["median_p50_ms"]
        api, every = f["median_api_cpu_ms"], f["median_all_cpu_ms"]
        writer, postgres = f["median_writer_cpu_ms"], f["median_postgres_cpu_ms"]
        lines.append(f"  {title}:")
        for name in ("on", "off"):
            lines.append(
                f"    log {name:<3}: {rates[name]:8.1f} requests/s  p50 {p50[name]:.1f} ms"
                f"  CPU ms/request: API {api[name]:.3f}, log writer {writer[name]:.3f},"
                f" PostgreSQL {postgres[name]:.3f}, all {every[name]:.3f}"
            )
        lines.append(
            f"    ratio on/off of the rates (median over the rounds): {f['ratio_on_off']:.3f};"
            " of all CPU per request: "
            + (
                f"{f['cpu_ratio_on_off']:.3f}"
                if f["cpu_ratio_on_off"] is not None
                else "n/a (each turn under the CPU meter's 10 ms)"
            )
        )
    return "\n".join(lines)


def run(requests: int, concurrency: int, rounds: int) -> str:
    """Measure and return the report."""
    return report(run_loop(request_log_cost(requests, concurrency, rounds)))
