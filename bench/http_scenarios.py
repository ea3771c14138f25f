"""The service scenarios: signed POST /v3/payouts (the headline), signed POST /v3/payments,
signed POST /v3/payments/{id}/refunds, GET /v3/payouts/{id}, GET /v3/payments?limit=50 and
GET /v3/merchant-accounts, against `bankrail serve --workers N`. After the write scenarios
the run checks that nothing was lost (every accepted payout and refund executed, every
accepted payment stored) and, at its end, that `GET /admin/ledger/check` is clean."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.loadgen import http_request, run, run_load
from bench.measure import Options, between_verify_rates, measured, median_run, repeated
from bench.processes import CpuMeter, RssSampler
from bench.seed import seed_rows, seed_settled_payments
from bench.service import (
    Merchant,
    Server,
    authorised_mandate,
    mandate_payment_body,
    payment_body,
    payout_body,
    seed,
    signed_post,
)

__all__ = ["Options", "_repeated", "median_run", "scenarios"]
_repeated = repeated  # the name the bench's tests import it by

TARGET_VERIFY_SHARE = 0.6
"""Signed POST /v3/payouts must reach this share of the one-core ES512 verify rate."""
LOAD_SHARE = 0.8
"""The p99 target holds at this share of a rate."""
TARGET_P99_MS = 50.0
REFUNDED_PAYMENTS = 50
"""Settled payments the refund scenario spreads its refunds over (a refund locks its payment)."""
REFUND_AMOUNT = 1
"""Each refund is of 1 penny, so every refund of a run fits in its payment."""


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
        host = f"127.0.0.1:{server.port}"
        auth = {"Authorization": f"Bearer {merchant.token}"}
        warm = [
            signed_post(server, merchant, "/v3/payouts", payout_body(merchant))
            for _ in range(min(200, requests))
        ]
        await run_load("127.0.0.1", server.port, warm, concurrency=concurrency)
        await _drained(server)
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
            payments = [
                signed_post(server, merchant, "/v3/payments", payment_body(merchant))
                for _ in range(requests)
            ]
            results["post_payments"] = await measured(server, payments, concurrency)
            results["post_payments"]["stored"] = await _payments_stored(
                server, merchant, results["post_payments"]
            )
            results["post_refunds"] = await _refunds(
                server, merchant, requests, concurrency, options
            )
            page = server.call("GET", "/v3/payments?limit=50", token=merchant.token)
            listings = [
                http_request("GET", "/v3/payments?limit=50", host, auth) for _ in range(requests)
            ]
            results["get_payments_list"] = await between_verify_rates(
                options.verify_seconds, lambda _: measured(server, listings, concurrency)
            )
            results["get_payments_list"]["items_per_page"] = len(page["items"])
            mandate_id = authorised_mandate(server, merchant)
            on_mandate = [
                signed_post(server, merchant, "/v3/payments", mandate_payment_body(mandate_id))
                for _ in range(requests)
            ]
            # Every payment on one mandate is decided with the mandate locked: this measures
            # that serialised path, then waits for the payments to settle (their jobs would
            # otherwise run during the next scenario).
            results["post_payments_mandate"] = await measured(server, on_mandate, concurrency)
            await _payments_settled(server, mandate_id)
            lists = [
                http_request("GET", "/v3/merchant-accounts", host, auth)
                for _ in range(requests * 2)
            ]
            results["get_merchant_accounts"] = await measured(server, lists, concurrency)
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
    host = f"127.0.0.1:{server.port}"
    results["post_payouts" + suffix] = await _payouts_measured(
        server, _payouts(server, merchant, requests), concurrency, options
    )
    sample = _created_payout_ids(server, merchant, 50)
    auth = {"Authorization": f"Bearer {merchant.token}"}
    gets = [
        http_request("GET", f"/v3/payouts/{sample[i % len(sample)]}", host, auth)
        for i in range(requests * 3)
    ]
    # The verify rate around each run too, so that growth can discount the machine's speed;
    # repeated as the POST is: one GET run lasts about a second, and on this machine the same
    # server's runs a minute apart differed by a sixth.
    results["get_payout" + suffix] = await repeated(
        options,
        lambda: between_verify_rates(
            options.verify_seconds, lambda _: measured(server, gets, concurrency)
        ),
        "verify_share",
        higher_is_better=True,
    )


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

        return await between_verify_rates(options.verify_seconds, scenario)

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


async def _payments_stored(
    server: Server, merchant: Merchant, accepted: dict[str, Any]
) -> dict[str, int]:
    """After POST /v3/payments: every 201 is a stored payment awaiting authorisation."""
    import asyncpg

    conn = await asyncpg.connect(server.dsn())
    try:
        stored = await conn.fetchval(
            "SELECT count(*) FROM payments WHERE merchant_id = $1"
            " AND status = 'authorization_required'",
            uuid.UUID(merchant.merchant_id),
        )
    finally:
        await conn.close()
    created = round(accepted["requests"] * accepted["ok_ratio"])
    return {"created": created, "stored": int(stored), "lost": created - int(stored)}


async def _refunds(
    server: Server, merchant: Merchant, requests: int, concurrency: int, options: Options
) -> dict[str, Any]:
    """Signed POST /v3/payments/{id}/refunds, each with a new Idempotency-Key, over settled
    payments seeded (and the requests signed) before the clock starts; then the wait until
    every accepted refund has executed, and the count of those that did."""
    payment_ids = await seed_settled_payments(
        server.dsn(),
        merchant.merchant_id,
        merchant.account_id,
        min(REFUNDED_PAYMENTS, requests),
        REFUND_AMOUNT * requests,
    )
    body = {"amount_in_minor": REFUND_AMOUNT, "reference": "bench refund"}
    refunds = [
        signed_post(
            server, merchant, f"/v3/payments/{payment_ids[i % len(payment_ids)]}/refunds", body
        )
        for i in range(requests)
    ]

    async def scenario(_: float) -> dict[str, Any]:
        summary = await measured(server, refunds, concurrency)
        summary["execution"] = await _refunds_executed(server, payment_ids, summary)
        return summary

    return await between_verify_rates(options.verify_seconds, scenario)


async def _refunds_executed(
    server: Server, payment_ids: list[str], accepted: dict[str, Any], limit_seconds: float = 300.0
) -> dict[str, Any]:
    """Poll (bounded) until no refund of these payments is still on its way, then count:
    every 201 must be a refund that executed, and each payment's refunded amount their sum."""
    import asyncpg

    ids = [uuid.UUID(i) for i in payment_ids]
    conn = await asyncpg.connect(server.dsn())
    try:
        unfinished = (
            "SELECT count(*) FROM refunds WHERE payment_id = ANY($1::uuid[])"
            " AND stage NOT IN ('executed', 'failed')"
        )
        left_at_end: int = await conn.fetchval(unfinished, ids)
        began = time.monotonic()
        left = left_at_end
        while left and time.monotonic() - began < limit_seconds:
            await asyncio.sleep(0.05)
            left = await conn.fetchval(unfinished, ids)
        drain = time.monotonic() - began
        counts = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE stage = 'executed') AS executed,"
            " count(*) FILTER (WHERE stage = 'failed') AS failed,"
            " coalesce(sum(amount_in_minor) FILTER (WHERE stage <> 'failed'), 0) AS amount"
            " FROM refunds WHERE payment_id = ANY($1::uuid[])",
            ids,
        )
        refunded = await conn.fetchval(
            "SELECT coalesce(sum(refunded_amount_in_minor), 0) FROM payments"
            " WHERE id = ANY($1::uuid[])",
            ids,
        )
    finally:
        await conn.close()
    assert counts is not None
    created = round(accepted["requests"] * accepted["ok_ratio"])
    return {
        "accepted": created,
        "executed": int(counts["executed"]),
        "failed": int(counts["failed"]),
        "unexecuted_when_load_ended": left_at_end,
        "unexecuted_after_drain": left,
        "drain_seconds": round(drain, 2),
        "lost": created - int(counts["executed"]),
        "refunded_amount_matches": int(refunded) == int(counts["amount"]),
    }


async def _payments_settled(server: Server, mandate_id: str, limit_seconds: float = 300.0) -> None:
    """Wait (bounded) until every payment taken on the mandate has settled or failed."""
    import asyncpg

    conn = await asyncpg.connect(server.dsn())
    try:
        began = time.monotonic()
        while time.monotonic() - began < limit_seconds:
            left = await conn.fetchval(
                "SELECT count(*) FROM payments WHERE mandate_id = $1"
                " AND status NOT IN ('payment_settled', 'payment_failed')",
                uuid.UUID(mandate_id),
            )
            if not left:
                return
            await asyncio.sleep(0.05)
    finally:
        await conn.close()


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
