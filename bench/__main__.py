"""`python -m bench`: start a fresh embedded PostgreSQL, measure, print a table, write JSON.

Every run is bounded: fixed request counts and durations (`--smoke` makes them tiny, for CI).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bankrail.db.embedded import EmbeddedPostgres
from bankrail.db.migrations import migrate
from bench import access_log, request_log
from bench.baselines import es512_rates, insert_commit_rate
from bench.http_scenarios import Options, scenarios
from bench.loadgen import run as run_loadgen
from bench.report import baselines_table, http_table, judge
from bench.targets import growth, lost_anything, post_targets
from bench.webhooks import delivery_rate

__all__ = ["growth", "main", "post_targets"]  # the verdicts, as the bench's tests import them


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--smoke", action="store_true", help="tiny bounded run that proves it works"
    )
    parser.add_argument("--events", type=int, default=20_000, help="webhook events to deliver")
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each baseline")
    parser.add_argument("--requests", type=int, default=3_000, help="requests per HTTP scenario")
    parser.add_argument("--concurrency", type=int, default=32, help="connections per scenario")
    parser.add_argument("--workers", default="1,2", help="API process counts to compare, e.g. 1,2")
    parser.add_argument(
        "--seed-rows",
        type=int,
        default=1_000_000,
        help="growth: payouts and payments to store before rerunning POST and GET (0: skip)",
    )
    parser.add_argument(
        "--soak-seconds",
        type=float,
        default=0.0,
        help="memory: mixed load this long while sampling the API processes' RSS (e.g. 300)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs of each POST /v3/payouts scenario; the median run is reported",
    )
    parser.add_argument("--rss-interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument(
        "--wrk", action="store_true", help="also measure GET /v3/payouts/{id} with wrk"
    )
    parser.add_argument(
        "--access-log",
        action="store_true",
        help="only compare POST /v3/payouts with the sandbox's access line on and off "
        "(--requests per turn, --repeats turns each) and print the ratio",
    )
    parser.add_argument(
        "--request-log",
        action="store_true",
        help="only compare POST /v3/payouts, GET /v3/payouts/{id}, GET /v3/payments/{id} and "
        "POST /v3/payments/{id}/authorization-flow with the request log on and off (--requests "
        "per turn, --repeats turns each) and print the ratios and each setting's round-3 "
        "targets",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/latest.json"))
    return parser.parse_args(argv)


async def _measure(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    sign_rate, verify_rate = es512_rates(args.seconds)
    commits = await insert_commit_rate(dsn, 200 if args.smoke else 3_000)
    webhooks = await delivery_rate(dsn, args.events)
    return {
        "es512_sign_per_s_one_core": sign_rate,
        "es512_verify_per_s_one_core": verify_rate,
        "durable_insert_commits_per_s": commits,
        "webhook_deliveries_per_s": webhooks["deliveries_per_s"],
        "webhook_deliveries_delivered": webhooks["delivered"],
        "webhook_deliveries_received": webhooks["received"],
    }


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.smoke:
        args.events, args.seconds, args.requests, args.workers = 300, 0.3, 60, "1"
        args.seed_rows, args.soak_seconds, args.rss_interval = 1_000, 0.0, 0.5
        args.repeats = 1
    if args.access_log:
        print(access_log.run(args.requests, args.concurrency, max(2, args.repeats)))
        return 0
    if args.request_log:
        print(request_log.run(args.requests, args.concurrency, max(2, args.repeats)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bankrail-bench-") as tmp:
        server = EmbeddedPostgres(Path(tmp))
        dsn = server.start()
        try:
            started = time.time()
            figures = asyncio.run(_measure(dsn, args))
        finally:
            server.stop()
    counts = [int(n) for n in args.workers.split(",")]
    # Growth, soak and wrk run with the first process count only: they take minutes.
    verify_seconds = min(args.seconds, 1.0)
    first = Options(
        args.seed_rows,
        args.soak_seconds,
        args.rss_interval,
        args.wrk,
        verify_seconds,
        args.repeats,
    )
    later = Options(
        rss_interval=args.rss_interval, verify_seconds=verify_seconds, repeats=args.repeats
    )
    http = {
        f"workers_{n}": run_loadgen(
            scenarios(n, args.requests, args.concurrency, first if i == 0 else later)
        )
        for i, n in enumerate(counts)
    }
    for run in http.values():
        run["post_targets"] = post_targets(run)
        if "post_payouts_grown" in run:
            run["growth"] = growth(run)
    judge(http)
    figures["http"] = http
    result = {
        "started_at": started,
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "smoke": args.smoke,
        "figures": figures,
    }
    print(baselines_table(figures))
    print()
    print(http_table(http, figures["es512_verify_per_s_one_core"]))
    problems = lost_anything(http)
    print(
        "nothing lost (every accepted write stored or executed by the end of its scenario,"
        f" the ledger check clean): {'met' if not problems else 'NOT met'}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten {args.out}")
    if figures["webhook_deliveries_delivered"] < args.events:
        print("not every event was delivered", file=sys.stderr)
        return 1
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
