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
from bench.baselines import es512_rates, insert_commit_rate
from bench.http_scenarios import scenarios
from bench.webhooks import delivery_rate


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


def _table(figures: dict[str, Any]) -> str:
    rows = [
        ("ES512 signatures/s, one core", figures["es512_sign_per_s_one_core"]),
        ("ES512 verifications/s, one core", figures["es512_verify_per_s_one_core"]),
        ("durable single-row INSERT commits/s", figures["durable_insert_commits_per_s"]),
        ("signed webhook deliveries/s (receiver answers 200)", figures["webhook_deliveries_per_s"]),
    ]
    ratio = figures["webhook_deliveries_per_s"] / figures["es512_sign_per_s_one_core"]
    lines = [f"{name:<52} {value:>12,.0f}" for name, value in rows]
    lines.append(f"{'deliveries/s ÷ one-core signing rate':<52} {ratio:>12.2f}")
    return "\n".join(lines)


def _http_table(http: dict[str, Any], verify_rate: float) -> str:
    names = {
        "post_payouts": "signed POST /v3/payouts",
        "post_payouts_at_80pct": "signed POST /v3/payouts at 80 % of max",
        "post_payments": "signed POST /v3/payments",
        "get_payout": "GET /v3/payouts/{id}",
        "get_merchant_accounts": "GET /v3/merchant-accounts",
    }
    lines = [
        f"{'scenario':<42} {'procs':>5} {'conc':>5} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'max ms':>8} {'2xx':>6}"
    ]
    for run in http.values():
        for key, label in names.items():
            row = run[key]
            lines.append(
                f"{label:<42} {run['workers']:>5} {run['concurrency']:>5}"
                f" {row['requests_per_s']:>9,.0f} {row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f}"
                f" {row['max_ms']:>8.1f} {row['ok_ratio']:>6.0%}"
            )
    for run in http.values():
        ratio = run["post_payouts"]["requests_per_s"] / verify_rate
        lines.append(
            f"POST /v3/payouts ÷ one-core verify rate, {run['workers']} process(es): {ratio:.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.smoke:
        args.events, args.seconds, args.requests, args.workers = 300, 0.3, 60, "1"
    with tempfile.TemporaryDirectory(prefix="bankrail-bench-") as tmp:
        server = EmbeddedPostgres(Path(tmp))
        dsn = server.start()
        try:
            started = time.time()
            figures = asyncio.run(_measure(dsn, args))
        finally:
            server.stop()
    http = {
        f"workers_{n}": asyncio.run(scenarios(int(n), args.requests, args.concurrency))
        for n in args.workers.split(",")
    }
    figures["http"] = http
    result = {
        "started_at": started,
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "smoke": args.smoke,
        "figures": figures,
    }
    print(_table(figures))
    print()
    print(_http_table(http, figures["es512_verify_per_s_one_core"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten {args.out}")
    if figures["webhook_deliveries_delivered"] < args.events:
        print("not every event was delivered", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
