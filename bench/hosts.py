"""Payouts per second with 1, 2... `bankrail serve` hosts on one PostgreSQL server
(docs/scaling.md).

    python -m bench.hosts --database-url postgresql://postgres@127.0.0.1:5432/postgres

For each host count H: a new database on that server, H `serve --workers 1` hosts on it
(each with its background worker), one funded merchant, then `--requests` signed
POST /v3/payouts spread evenly over the hosts (closed loop, `--concurrency` connections in
all), as a load balancer would spread them. The one-core ES512 verify rate is measured just
before and after each run, and the figure is stated as a share of their mean, as
`python -m bench` does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import time
from typing import Any

import asyncpg

from bankrail.db.migrations import migrate
from bench.baselines import verify_rate
from bench.loadgen import run, run_load
from bench.service import Server, payout_body, seed, signed_post


def _database(server_dsn: str, name: str) -> str:
    base, _, _ = server_dsn.rpartition("/")
    return f"{base}/{name}"


async def _create(server_dsn: str) -> str:
    name = f"bankrail_bench_hosts_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(server_dsn)
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    dsn = _database(server_dsn, name)
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return dsn


async def _drop(server_dsn: str, dsn: str) -> None:
    conn = await asyncpg.connect(server_dsn)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {dsn.rpartition('/')[2]} WITH (FORCE)")
    finally:
        await conn.close()


async def _spread(hosts: list[Server], requests: list[list[bytes]], concurrency: int) -> float:
    """Payouts/s of every host's share sent at once."""
    started = time.perf_counter()
    results = await asyncio.gather(
        *(
            run_load("127.0.0.1", host.port, share, concurrency=max(1, concurrency // len(hosts)))
            for host, share in zip(hosts, requests, strict=True)
        )
    )
    seconds = time.perf_counter() - started
    accepted = sum(n for r in results for status, n in r.statuses.items() if status == 202)
    total = sum(r.requests for r in results)
    if accepted != total:
        raise RuntimeError(f"{total - accepted} of {total} payouts were not accepted")
    return total / seconds


def measure(server_dsn: str, count: int, requests: int, concurrency: int) -> dict[str, Any]:
    """One run with `count` hosts."""
    dsn = run(_create(server_dsn))
    os.environ["DATABASE_URL"] = dsn
    hosts = [Server(workers=1) for _ in range(count)]
    try:
        for n, host in enumerate(hosts, 1):
            os.environ["BANKRAIL_HOST_ID"] = f"bench-host-{n}"
            host.start()
        merchant = seed(hosts[0], balance=requests * 10)
        body = payout_body(merchant)
        shares = [
            [signed_post(host, merchant, "/v3/payouts", body) for _ in range(requests // count)]
            for host in hosts
        ]
        before = verify_rate(3.0)
        rate = run(_spread(hosts, shares, concurrency))
        after = verify_rate(3.0)
    finally:
        for host in hosts:
            host.stop()
        os.environ.pop("DATABASE_URL", None)
        os.environ.pop("BANKRAIL_HOST_ID", None)
        run(_drop(server_dsn, dsn))
    verify = (before + after) / 2
    return {
        "hosts": count,
        "payouts_per_s": round(rate, 1),
        "verify_per_s_one_core": round(verify, 1),
        "share_of_verify_rate": round(rate / verify, 3),
    }


def main() -> None:
    """Measure and print one JSON line per host count."""
    parser = argparse.ArgumentParser(prog="python -m bench.hosts", description=__doc__)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--hosts", default="1,2", help="host counts to compare, e.g. 1,2")
    parser.add_argument("--requests", type=int, default=3_000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    for count in (int(n) for n in args.hosts.split(",")):
        figures = measure(args.database_url, count, args.requests, args.concurrency)
        print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
