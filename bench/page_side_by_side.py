"""A page of 50 payments against a GET by id, on two trees side by side
(docs/performance.md "A page of 50 payments").

`python -m bench.page_side_by_side --python BEFORE/.venv/bin/python` starts one
`bankrail serve --workers 1` with that interpreter (another tree's) and one with this one,
each on a fresh embedded database with the same payments: a base made through the API (half
awaiting authorisation, half settled on a mandate, with their payment sources), copied
back in time until there are `--payments` of them. Then, in each of `--rounds` rounds, each
server in turn is restarted (nothing kept in its process) and measured with the bench's CPU
meter (`bench.processes.CpuMeter`):

- first walk: `--walk` pages, each at its own cursor, read for the first time since the
  restart, after a few other pages of the history and GETs read to open the pool's
  connections and prepare their statements;
- second walk: the same pages again (where a page's documents are kept from its second read
  on, this is the read that renders and keeps them);
- `--pages` reads of the first page (after the first two, its documents are held);
- `--gets` GETs by id of the 50 latest payments awaiting authorisation.

Rounds alternate the servers; the medians of the rounds are printed, with each tree's page
÷ GET by rate and by API CPU from the same rounds. Bounded: fixed counts, a deadline per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from bankrail.core.pagination import encode_cursor
from bench.loadgen import http_request, run, run_load
from bench.processes import CpuMeter
from bench.reads import payment_paths
from bench.service import (
    Merchant,
    Server,
    authorised_mandate,
    mandate_payment_body,
    payment_body,
    seed,
    signed_call,
)

_CONCURRENCY = 8
_WARM_PAGES = 16


@dataclass
class Tree:
    """One server under measurement and what is prepared for it."""

    name: str
    server: Server
    merchant: Merchant | None = None
    gets: list[bytes] = field(default_factory=list)
    first_page: list[bytes] = field(default_factory=list)
    walk: list[bytes] = field(default_factory=list)
    warm: list[bytes] = field(default_factory=list)
    figures: dict[str, list[dict[str, float]]] = field(default_factory=dict)


async def _base(server: Server, merchant: Merchant, count: int) -> None:
    """`count` payments through the API, alternating one awaiting authorisation and one on a
    mandate, and the wait until those on the mandate settled."""
    mandate_id = authorised_mandate(server, merchant)
    for n in range(count):
        if n % 2:
            signed_call(server, merchant, "/v3/payments", mandate_payment_body(mandate_id))
        else:
            signed_call(server, merchant, "/v3/payments", payment_body(merchant))
    conn = await asyncpg.connect(server.dsn())
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            left = await conn.fetchval(
                "SELECT count(*) FROM payments WHERE mandate_id = $1"
                " AND status NOT IN ('payment_settled', 'payment_failed')",
                uuid.UUID(mandate_id),
            )
            if not left:
                return
            await asyncio.sleep(0.2)
        raise RuntimeError("the mandate's payments did not settle")
    finally:
        await conn.close()


async def _copies(server: Server, merchant: Merchant, total: int) -> None:
    """Copies of the merchant's payments, each batch an hour earlier than the one before,
    until there are `total`; then VACUUM (ANALYZE)."""
    conn = await asyncpg.connect(server.dsn())
    try:
        merchant_id = uuid.UUID(merchant.merchant_id)
        base = await conn.fetchval(
            "SELECT count(*) FROM payments WHERE merchant_id = $1", merchant_id
        )
        await conn.execute(
            "CREATE TEMP TABLE base AS SELECT * FROM payments WHERE merchant_id = $1",
            merchant_id,
        )
        for hours in range(1, (total - 1) // base + 1):
            await conn.execute("DROP TABLE IF EXISTS copy")
            await conn.execute("CREATE TEMP TABLE copy AS SELECT * FROM base")
            await conn.execute(
                "UPDATE copy SET id = gen_random_uuid(),"
                " created_at = created_at - make_interval(hours => $1)",
                hours,
            )
            await conn.execute("INSERT INTO payments SELECT * FROM copy")
        await conn.execute("VACUUM (ANALYZE)")
    finally:
        await conn.close()


async def _cursors(server: Server, merchant: Merchant, limit: int) -> list[str]:
    """The cursor of every page after the first, newest first."""
    conn = await asyncpg.connect(server.dsn())
    try:
        rows = await conn.fetch(
            "SELECT id, created_at FROM payments WHERE merchant_id = $1"
            " ORDER BY created_at DESC, id DESC",
            uuid.UUID(merchant.merchant_id),
        )
    finally:
        await conn.close()
    return [
        encode_cursor(rows[i]["created_at"], rows[i]["id"])
        for i in range(limit - 1, len(rows) - 1, limit)
    ]


async def _prepare(tree: Tree, args: argparse.Namespace) -> None:
    server = tree.server
    merchant = seed(server, 10**9)
    tree.merchant = merchant
    await _base(server, merchant, args.base)
    await _copies(server, merchant, args.payments)
    host = f"127.0.0.1:{server.port}"
    auth = {"Authorization": f"Bearer {merchant.token}"}
    paths = await payment_paths(server, merchant)
    tree.gets = [http_request("GET", paths[i % len(paths)], host, auth) for i in range(args.gets)]
    tree.first_page = [http_request("GET", "/v3/payments?limit=50", host, auth)] * args.pages
    cursors = await _cursors(server, merchant, 50)
    assert len(cursors) >= args.walk + _WARM_PAGES, "too few payments for the walk"
    pages = ["/v3/payments?limit=50"] + [f"/v3/payments?limit=50&cursor={c}" for c in cursors]
    tree.walk = [http_request("GET", path, host, auth) for path in pages[: args.walk]]
    tree.warm = [http_request("GET", path, host, auth) for path in pages[-_WARM_PAGES:]]


async def _measured(server: Server, requests: list[bytes]) -> dict[str, float]:
    assert server.process is not None
    assert server.data_dir is not None
    meter = CpuMeter(server.process.pid, server.data_dir)
    meter.start()
    result = await run_load(
        "127.0.0.1", server.port, requests, concurrency=_CONCURRENCY, deadline_seconds=300
    )
    meter.stop()
    assert result.statuses.keys() == {200}, result.statuses
    cpu = meter.per_request_ms(result.requests)
    return {
        "rate": result.rate,
        "api": cpu.get("api", 0.0),
        "pg": cpu.get("postgres", 0.0),
        "busy": meter.machine["busy"],
    }


async def _round(tree: Tree) -> None:
    server = tree.server
    server.restart()
    await run_load("127.0.0.1", server.port, tree.gets[:400], concurrency=_CONCURRENCY)
    await run_load("127.0.0.1", server.port, tree.warm, concurrency=_CONCURRENCY)
    for name, requests in (
        ("first walk", tree.walk),
        ("second walk", tree.walk),
        ("first page read again", tree.first_page),
        ("GET by id", tree.gets),
    ):
        tree.figures.setdefault(name, []).append(await _measured(server, requests))


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def _report(trees: list[Tree]) -> dict[str, Any]:
    """Per tree: each figure's median over the rounds, each page's ratios to the GET by id
    (the median of the rounds' ratios), and every round's figures under `runs`."""
    report: dict[str, Any] = {}
    for tree in trees:
        figures = {
            name: {key: round(_median(runs, key), 3) for key in ("rate", "api", "pg", "busy")}
            for name, runs in tree.figures.items()
        }
        gets = tree.figures["GET by id"]
        for name in ("first walk", "second walk", "first page read again"):
            pages = tree.figures[name]
            by_rate = [p["rate"] / g["rate"] for p, g in zip(pages, gets, strict=True)]
            # A run too short for the meter's 10 ms ticks reads 0 ms: no ratio for it.
            by_cpu = [g["api"] / p["api"] for p, g in zip(pages, gets, strict=True) if p["api"]]
            figures[name]["page ÷ GET by rate"] = round(statistics.median(by_rate), 3)
            figures[name]["page ÷ GET by API CPU"] = (
                round(statistics.median(by_cpu), 3) if by_cpu else None
            )
        figures["runs"] = tree.figures
        report[tree.name] = figures
    return report


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    env = {"BANKRAIL_REQUEST_LOG_RETENTION_SECONDS": "0"} if args.request_log_off else {}
    trees = [
        Tree("before", Server(workers=1, env=env, python=args.python)),
        Tree("this tree", Server(workers=1, env=env)),
    ]
    try:
        for tree in trees:
            tree.server.start()
            await _prepare(tree, args)
        for number in range(args.rounds):
            for tree in trees if number % 2 == 0 else trees[::-1]:
                await _round(tree)
            print(f"round {number + 1} done", file=sys.stderr)
    finally:
        for tree in trees:
            tree.server.stop()
            if tree.server.data_dir is not None:
                shutil.rmtree(tree.server.data_dir, ignore_errors=True)
    return _report(trees)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the other tree's interpreter")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base", type=int, default=400, help="payments made through the API")
    parser.add_argument("--payments", type=int, default=16_000)
    parser.add_argument("--walk", type=int, default=150, help="pages per walk")
    parser.add_argument("--pages", type=int, default=600)
    parser.add_argument("--gets", type=int, default=2_000)
    parser.add_argument("--request-log-off", action="store_true")
    print(json.dumps(run(_main(parser.parse_args())), indent=1))


if __name__ == "__main__":
    main()
