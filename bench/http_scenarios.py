"""The service scenarios against `bankrail serve --workers N`: signed POST /v3/payouts (the
headline, here), the other signed writes (bench/writes.py), the main reads (bench/reads.py)
and, beside them, the GET rate of localstripe (bench/localstripe_baseline.py). After each write
batch the run checks that nothing was lost (every accepted payout, refund and payment on a
mandate executed, every accepted payment stored, every flow started) and, at its end, that
`GET /admin/ledger/check` is clean."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

from bench.loadgen import http_request, run, run_load
from bench.localstripe_baseline import localstripe_rates
from bench.measure import (
    LOAD_SHARE,
    Options,
    between_verify_rates,
    measured,
    median_run,
    repeated,
)
from bench.pipeline_noop import pipeline_noop
from bench.processes import CpuMeter, RssSampler
from bench.reads import read, reads
from bench.seed import seed_rows
from bench.service import Merchant, Server, payout_body, seed, signed_post
from bench.writes import authorization_flows, mandate_payments, payments, refunds, v1_payouts

__all__ = ["Options", "_repeated", "median_run", "scenarios"]
_repeated = repeated  # the name the bench's tests import it by

TARGET_VERIFY_SHARE = 0.6
"""Every signed write must reach this share of the one-core ES512 verify rate (POST
/v3/payouts: 0.75 since, `targets.PAYOUTS_VERIFY_SHARE`; its first targets, `post_targets`,
and its run at 80 % of the target rate keep 0.6)."""
TARGET_P99_MS = 50.0


async def scenarios(
    workers: int, requests: int, concurrency: int, options: Options | None = None
) -> dict[str, Any]:
    """Every HTTP scenario against one server with `workers` API processes."""
    options = options or Options()
    server = Server(workers)
    server.start()
    try:
        results: dict[str, Any] = {
            "workers": workers,
            "concurrency": concurrency,
            "ready_seconds_fresh": server.ready_seconds,
        }
        merchant = seed(server, balance=10**15)
        warm = [
            signed_post(server, merchant, "/v3/payouts", payout_body(merchant))
            for _ in range(min(200, requests))
        ]
        await run_load("127.0.0.1", server.port, warm, concurrency=concurrency)
        await _drained(server)
        if workers == 1:
            results["pipeline_noop"] = await pipeline_noop(
                server, merchant, requests * 3, concurrency
            )
        with RssSampler(server.processes(), options.rss_interval) as rss:
            await _core(server, merchant, requests, concurrency, results, options, suffix="")
            reached = results["post_payouts"]["requests_per_s"]
            results["post_payouts_at_80pct"] = await _paced_payouts(
                server, merchant, requests, concurrency, options, LOAD_SHARE * reached
            )
            # The issue's own reading of the latency target: 80 % of the throughput target
            # (0.6 of the verify rate), a load that does not depend on what this server
            # reached, so that one configuration can be judged on both POST targets. Each
            # run's rate is taken from the verify rate measured just before it: this
            # machine's speed moves by half within minutes, and a rate fixed from an earlier
            # measurement loaded one run at 0.42 of the verify rate around it, another at 0.65.
            results["post_payouts_at_80pct_of_target"] = await _paced_payouts(
                server,
                merchant,
                requests,
                concurrency,
                options,
                verify_share=LOAD_SHARE * TARGET_VERIFY_SHARE,
            )
            await _writes(server, merchant, requests, concurrency, options, results)
            page = server.call("GET", "/v3/payments?limit=50", token=merchant.token)
            results.update(await reads(server, merchant, requests, concurrency, options))
            results["get_payments_list"]["items_per_page"] = len(page["items"])
            # The peer's baselines, just after the reads: the same machine, at the same moment.
            peer = await localstripe_rates(
                requests * 3, requests, concurrency, options.verify_seconds
            )
            results["localstripe_get"], results["localstripe_create"] = peer["get"], peer["create"]
            if options.soak_seconds:
                results["soak"] = await _soak(server, merchant, concurrency, options.soak_seconds)
        results["rss"] = rss.summary()
        if options.compare_wrk:
            results["wrk_get_payout"] = await asyncio.to_thread(_wrk, server, merchant, concurrency)
        if options.seed_rows:
            results["seeded"] = await seed_rows(
                server.dsn(), merchant.merchant_id, merchant.account_id, options.seed_rows
            )
            await _core(server, merchant, requests, concurrency, results, options, suffix="_grown")
        results["ledger_check"] = server.call("GET", "/admin/ledger/check")
        results["ready_seconds_existing"] = server.restart()
        return results
    finally:
        server.stop()
        if server.data_dir is not None:
            shutil.rmtree(server.data_dir, ignore_errors=True)


async def _core(
    server: Server,
    merchant: Merchant,
    requests: int,
    concurrency: int,
    results: dict[str, Any],
    options: Options,
    suffix: str,
) -> None:
    """The headline POST and the GET by id (run again on the grown database)."""
    results["post_payouts" + suffix] = await _payouts_measured(
        server, _payouts(server, merchant, requests), concurrency, options
    )
    sample = [f"/v3/payouts/{i}" for i in _created_payout_ids(server, merchant, 50)]
    # The verify rate around each run too, so that growth can discount the machine's speed;
    # repeated as the POST is: one GET run lasts about a second, and on this machine the same
    # server's runs a minute apart differed by a sixth.
    results["get_payout" + suffix] = await read(
        server, merchant, sample, requests * 3, concurrency, options, repeat=True
    )


async def _writes(
    server: Server,
    merchant: Merchant,
    requests: int,
    concurrency: int,
    options: Options,
    results: dict[str, Any],
) -> None:
    """The signed writes beside POST /v3/payouts (bench/writes.py), each checked for what
    it left behind."""
    args = (server, merchant, requests, concurrency, options)
    results["post_payments"] = await payments(*args, preselected=False)
    results["post_payments_preselected"] = await payments(*args, preselected=True)
    results["post_authorization_flow"] = await authorization_flows(*args)
    results["post_refunds"] = await refunds(*args)
    results["post_payments_mandate"] = await mandate_payments(*args)
    results["post_v1_payouts"] = await v1_payouts(*args)


async def _paced_payouts(
    server: Server,
    merchant: Merchant,
    requests: int,
    concurrency: int,
    options: Options,
    rate: float | None = None,
    *,
    verify_share: float | None = None,
) -> dict[str, Any]:
    """Signed POST /v3/payouts in an open loop (twice the connections): at `rate` per
    second, or at `verify_share` of the verify rate measured just before each run."""
    return await _payouts_measured(
        server,
        _payouts(server, merchant, requests),
        concurrency * 2,
        options,
        rate=rate,
        verify_share=verify_share,
    )


def _payouts(server: Server, merchant: Merchant, count: int) -> Callable[[], list[bytes]]:
    """Prepares `count` signed POST /v3/payouts, each with a new Idempotency-Key."""

    def prepare() -> list[bytes]:
        body = payout_body(merchant)
        return [signed_post(server, merchant, "/v3/payouts", body) for _ in range(count)]

    return prepare


async def _payouts_measured(
    server: Server,
    prepare: Callable[[], list[bytes]],
    concurrency: int,
    options: Options,
    rate: float | None = None,
    verify_share: float | None = None,
) -> dict[str, Any]:
    """A POST /v3/payouts scenario, run `options.repeats` times, each until every payout
    executed, with the one-core verify rate measured just before and just after each run
    (the server idle both times): the machine's speed moves by a quarter within a run, so
    the ratio to a rate measured minutes earlier says more about the machine than about
    Bankrail. An open loop runs at `rate`, or at `verify_share` of the verify rate measured
    just before each run (`target_rate` of each run). Returns the median run (by share of
    the verify rate in a closed loop, by p99 in an open one) with every run's figures under
    `runs`: on a machine shared with others a single run's p99 is decided by its worst 30
    requests, so one stall of the machine moves it."""
    open_loop = rate is not None or verify_share is not None

    async def run_once() -> dict[str, Any]:
        requests = prepare()  # signed before the verify rate is measured, not in between

        async def scenario(verify_before: float) -> dict[str, Any]:
            paced = rate if verify_share is None else verify_share * verify_before
            summary = await _executed(server, requests, concurrency, paced)
            if paced is not None:
                summary["target_rate"] = paced
            return summary

        return await between_verify_rates(server, options.verify_seconds, scenario)

    if open_loop:
        return await repeated(options, run_once, "p99_ms", higher_is_better=False)
    return await repeated(options, run_once, "verify_share", higher_is_better=True)


async def _executed(
    server: Server, requests: list[bytes], concurrency: int, rate: float | None
) -> dict[str, Any]:
    """One POST /v3/payouts run, then the wait until every payout it got accepted executed."""
    summary = await measured(server, requests, concurrency, rate=rate)
    summary["execution"] = await _drained(server, summary)
    return summary


async def _drained(
    server: Server, accepted: dict[str, Any] | None = None, limit_seconds: float = 300.0
) -> dict[str, Any]:
    """Wait (bounded) until every accepted payout has executed, so that the next scenario
    does not pay for this one's background work, and report the end-to-end figures: a 202
    means the payout is committed, and its execution (authorise, submit, execute, ledger,
    webhook event) is a job that runs after it."""
    import asyncpg

    assert server.process is not None
    assert server.data_dir is not None
    conn = await asyncpg.connect(server.dsn())
    try:
        unfinished = "SELECT count(*) FROM payouts WHERE stage NOT IN ('executed', 'failed')"
        left_at_end: int = await conn.fetchval(unfinished)
        meter = CpuMeter(server.process.pid, server.data_dir)
        meter.start()
        began = time.monotonic()
        left = left_at_end
        while left and time.monotonic() - began < limit_seconds:
            await asyncio.sleep(0.05)
            left = await conn.fetchval(unfinished)
        drain = time.monotonic() - began
        meter.stop()
    finally:
        await conn.close()
    if accepted is None:
        return {}
    requests = int(accepted["requests"])
    load_seconds = requests / accepted["requests_per_s"]
    drain_cpu = meter.per_request_ms(requests)
    load_cpu = accepted["cpu_ms_per_request"]
    return {
        "unexecuted_when_load_ended": left_at_end,
        "unexecuted_after_drain": left,
        "drain_seconds": round(drain, 2),
        "executed_per_s": requests / (load_seconds + drain),
        "cpu_ms_per_payout": {
            group: round(load_cpu.get(group, 0.0) + drain_cpu.get(group, 0.0), 3)
            for group in {*load_cpu, *drain_cpu}
        },
    }


async def _soak(
    server: Server, merchant: Merchant, concurrency: int, seconds: float
) -> dict[str, Any]:
    """Mixed load (1 signed POST to 4 GETs) for `seconds`, in bounded rounds."""
    host = f"127.0.0.1:{server.port}"
    auth = {"Authorization": f"Bearer {merchant.token}"}
    sample = _created_payout_ids(server, merchant, 20)
    gets = [
        http_request("GET", f"/v3/payouts/{sample[i % len(sample)]}", host, auth)
        for i in range(4000)
    ]
    deadline = time.monotonic() + seconds
    done = rounds = 0
    while time.monotonic() < deadline and rounds < 100_000:
        posts = [
            signed_post(server, merchant, "/v3/payouts", payout_body(merchant)) for _ in range(1000)
        ]
        mixed = [r for i, post in enumerate(posts) for r in (post, *gets[4 * i : 4 * i + 4])]
        result = await run_load("127.0.0.1", server.port, mixed, concurrency=concurrency)
        done += result.requests
        rounds += 1
    return {"seconds": seconds, "requests": done}


def _wrk(server: Server, merchant: Merchant, concurrency: int) -> dict[str, Any]:
    """`wrk` (if installed) on GET /v3/payouts/{id}, 5 s, same connections, one thread:
    a C load generator to show that the asyncio one is not the bottleneck."""
    if shutil.which("wrk") is None:
        return {"skipped": "wrk is not installed (apt-get install wrk)"}
    payout_id = _created_payout_ids(server, merchant, 1)[0]
    # Our generator on the same request just before, so both see the same machine.
    host = f"127.0.0.1:{server.port}"
    auth = {"Authorization": f"Bearer {merchant.token}"}
    ours = run(
        run_load(
            "127.0.0.1",
            server.port,
            [http_request("GET", f"/v3/payouts/{payout_id}", host, auth)] * 3000,
            concurrency=concurrency,
        )
    ).rate
    done = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{concurrency}",
            "-d5s",
            "-H",
            f"Authorization: Bearer {merchant.token}",
            f"{server.base}/v3/payouts/{payout_id}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = re.search(r"Requests/sec:\s+([\d.]+)", done.stdout)
    return {
        "requests_per_s": float(found.group(1)) if found else 0.0,
        "loadgen_requests_per_s": ours,
        "output": done.stdout,
    }


def _created_payout_ids(server: Server, merchant: Merchant, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        raw = signed_post(server, merchant, "/v3/payouts", payout_body(merchant))
        head, _, body = raw.partition(b"\r\n\r\n")
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[2:])
        headers.pop("Content-Length", None)
        ids.append(
            server.call("POST", "/v3/payouts", raw=body, token=merchant.token, headers=headers)[
                "id"
            ]
        )
    return ids
