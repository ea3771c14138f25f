"""`python -m bench.profiles`: where the API process's time goes in the scenarios whose
targets are not met, and the most any code could reach on this machine.

For each scenario (the bench's own, from bench/writes.py, bench/reads.py and
bench/http_scenarios.py) it runs the closed loop once with py-spy sampling every API process
(`py-spy record --nonblocking`, not a project dependency: `pip install py-spy`; it needs
ptrace, which root and most developer machines have), then prints:

- the rate, its share of the one-core ES512 verify rate, and the CPU per request of each
  process group (API, verifier, PostgreSQL, worker, request-log writer, load generator);
- the ceiling: the rate at which every core of the machine would be busy with that CPU per
  request (cores ÷ the sum), and that as a share of the verify rate. A target above the
  ceiling cannot be met by making one process faster unless the sum falls;
- the API process's samples by area (by the file of the frame running when sampled): the
  driver (asyncpg), the event loop and sockets, the HTTP server, the framework under the
  pipeline, Bankrail's pipeline, the request log's capture, signature handling, validation,
  and Bankrail's domain and store code.

The raw profiles (py-spy's collapsed stacks) are kept under `--out` for flame graphs."""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.service import Server

__all__ = ["AREAS", "area_of", "main", "recording", "shares_by_area"]

AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("request log capture", ("bankrail/http/request_log",)),
    (
        "signatures (parse, verifier hand-off)",
        ("bankrail/security/signing", "bankrail/security/verifier"),
    ),
    ("pipeline and middleware", ("bankrail/http/",)),
    ("auth, keys, idempotency", ("bankrail/security/",)),
    ("domain, store, rendering", ("bankrail/",)),
    ("asyncpg (driver)", ("asyncpg/",)),
    ("HTTP server (uvicorn, httptools)", ("uvicorn/", "httptools")),
    ("Starlette, FastAPI", ("starlette/", "fastapi/")),
    ("validation (pydantic)", ("pydantic",)),
    ("event loop, sockets, tasks", ("asyncio/", "uvloop", "selectors", "socket")),
)
"""Areas by the path of a sampled frame's file, the first that matches."""

_FRAME_FILE = re.compile(r"\(([^()]*?)(?::\d+)?\)$")


def area_of(frame: str) -> str:
    """The area of a py-spy frame `function (path/to/file.py:line)`; "other" if none."""
    found = _FRAME_FILE.search(frame)
    path = found.group(1) if found else frame
    for area, markers in AREAS:
        if any(marker in path for marker in markers):
            return area
    return "other"


def shares_by_area(collapsed: list[str]) -> dict[str, float]:
    """The share of samples whose running frame is in each area, largest first, from py-spy's
    raw output (one `frame;frame;... count` line per stack)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in collapsed:
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            counts[area_of(stack.split(";")[-1])] += int(count)
    total = sum(counts.values())
    return {area: round(n / total, 3) for area, n in counts.most_common()} if total else {}


@dataclass
class _Recording:
    label: str
    out: Path


_current: _Recording | None = None


@contextlib.contextmanager
def profiling(label: str, out: Path) -> Iterator[None]:
    """While inside, every closed loop `bench.measure.measured` runs is sampled (`recording`)
    into `out/<label>-<pid>.txt`."""
    global _current
    _current, before = _Recording(label, out), _current
    try:
        yield
    finally:
        _current = before


@contextlib.asynccontextmanager
async def recording(server: Server | None) -> AsyncIterator[None]:
    """Sample the server's API processes with py-spy while inside, if `profiling` is on
    (else, or with no server, nothing)."""
    if _current is None or server is None:
        yield
        return
    api_pids = [pid for pid, group in server.processes().items() if group == "api"]
    spies = [
        await asyncio.create_subprocess_exec(
            _py_spy(),
            "record",
            "--pid",
            str(pid),
            "--rate",
            "200",
            "--nonblocking",
            "--format",
            "raw",
            "--output",
            str(_current.out / f"{_current.label}-{pid}.txt"),
            stdout=subprocess.DEVNULL,
        )
        for pid in api_pids
    ]
    try:
        yield
    finally:
        for spy in spies:
            if spy.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        for spy in spies:
            try:
                await asyncio.wait_for(spy.wait(), 60)
            except TimeoutError:
                spy.kill()
                await spy.wait()


def _py_spy() -> str:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if found is None:
        raise SystemExit("py-spy is not installed: pip install py-spy")
    return found


Scenario = Callable[[Any, Any, int, int, Any], Awaitable[dict[str, Any]]]


def _scenarios() -> dict[str, Scenario]:
    from bench import reads, writes
    from bench.http_scenarios import _created_payout_ids, _drained, _payouts, _payouts_measured

    async def post_payouts(server: Any, merchant: Any, n: int, c: int, o: Any) -> Any:
        return await _payouts_measured(server, _payouts(server, merchant, n), c, o)

    async def get_payout(server: Any, merchant: Any, n: int, c: int, o: Any) -> Any:
        ids = _created_payout_ids(server, merchant, reads.SAMPLE)
        await _drained(server)  # their execution is not the GETs' work
        return await reads.read(server, merchant, [f"/v3/payouts/{i}" for i in ids], n, c, o)

    async def get_payment(server: Any, merchant: Any, n: int, c: int, o: Any) -> Any:
        await writes.made_payments(
            server, merchant, "bench-profiles", reads.SAMPLE, c, preselected=False
        )
        paths = await reads.payment_paths(server, merchant)
        return await reads.read(server, merchant, paths, n, c, o)

    async def get_payments_list(server: Any, merchant: Any, n: int, c: int, o: Any) -> Any:
        await writes.made_payments(server, merchant, "bench-profiles", 60, c, preselected=False)
        return await reads.read(server, merchant, ["/v3/payments?limit=50"], n // 4, c, o)

    return {
        "post_payouts": post_payouts,
        "post_authorization_flow": writes.authorization_flows,
        "post_payments_mandate": writes.mandate_payments,
        "post_refunds": writes.refunds,
        "get_payout": get_payout,
        "get_payment": get_payment,
        "get_payments_list": get_payments_list,
    }


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.profiles", description=__doc__)
    parser.add_argument("--requests", type=int, default=3_000, help="requests per closed loop")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1, help="API processes")
    parser.add_argument(
        "--scenario", action="append", choices=sorted(_scenarios()), help="default: every one"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/profiles"))
    return parser.parse_args(argv)


async def _profile(args: argparse.Namespace) -> dict[str, Any]:
    from bench.localstripe_baseline import localstripe_rates
    from bench.measure import Options
    from bench.service import Server, seed

    server = Server(args.workers)
    server.start()
    figures: dict[str, Any] = {}
    try:
        merchant = seed(server, balance=10**15)
        options = Options(verify_seconds=0.5, repeats=1)
        scenarios = _scenarios()
        for name in args.scenario or list(scenarios):
            run = scenarios[name]
            with profiling(name, args.out):
                summary = await run(server, merchant, args.requests, args.concurrency, options)
            kept = _profile_files(args.out, name)
            if not kept:
                print(f"{name}: py-spy wrote no profile (see its error above)", file=sys.stderr)
            collapsed = [line for path in kept for line in path.read_text().splitlines()]
            figures[name] = {"summary": summary, "api_areas": shares_by_area(collapsed)}
    finally:
        server.stop()
    peer = await localstripe_rates(args.requests, args.requests // 2, args.concurrency, 0.5)
    figures["localstripe"] = {name: rate.get("requests_per_s") for name, rate in peer.items()}
    return figures


_PEER = {"post_payouts": "create", "get_payout": "get", "get_payment": "get"}
"""The scenarios judged against a multiple of localstripe's rate, and which."""


def _profile_files(out: Path, label: str | None = None) -> list[Path]:
    """The profiles `recording` wrote under `out` (of one scenario, or of any)."""
    pattern = re.compile(rf"({re.escape(label) if label else '[a-z_]+'})-\d+\.txt")
    return sorted(path for path in out.glob("*.txt") if pattern.fullmatch(path.name))


def report(figures: dict[str, Any], cores: int) -> str:
    """Each scenario's rate, CPU by process group, ceiling and API areas as text."""
    # Imported here: bench.targets imports bench.measure, which imports this module.
    from bench.targets import verify_share

    lines = []
    peer: dict[str, float | None] = figures.get("localstripe", {})
    for name, figure in figures.items():
        if name == "localstripe":
            continue
        summary = figure["summary"]
        cpu = {k: v for k, v in summary["cpu_ms_per_request"].items() if v}
        total = sum(cpu.values())
        verify = summary.get("verify_per_s_around", {}).get("mean")
        ceiling = cores * 1000 / total if total else 0.0
        reached = verify_share(summary)
        share = f" = {reached:.2f} of the verify rate" if reached is not None else ""
        lines.append(f"{name}: {summary['requests_per_s']:,.0f} req/s{share}")
        lines.append(
            "  CPU ms per request (the load generator's included): "
            + ", ".join(f"{k} {v:.3f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))
            + f"; all {total:.3f}"
        )
        if verify:
            lines.append(
                f"  ceiling with all {cores} cores busy: {ceiling:,.0f} req/s"
                f" = {ceiling / verify:.2f} of the verify rate ({verify:,.0f}/s)"
            )
        else:
            lines.append(f"  ceiling with all {cores} cores busy: {ceiling:,.0f} req/s")
        peer_rate = peer.get(_PEER.get(name, ""))
        if peer_rate:
            lines.append(
                f"  against localstripe's {_PEER[name]} ({peer_rate:,.0f}/s):"
                f" {summary['requests_per_s'] / peer_rate:.2f} x, the ceiling"
                f" {ceiling / peer_rate:.2f} x"
            )
        lines.append(
            "  API process by area: "
            + ", ".join(f"{area} {share:.0%}" for area, share in figure["api_areas"].items())
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from bench.loadgen import run as run_loop

    args = _parse(sys.argv[1:] if argv is None else argv)
    _py_spy()
    args.out.mkdir(parents=True, exist_ok=True)
    for old in _profile_files(args.out):
        old.unlink()
    figures = run_loop(_profile(args))
    print(report(figures, len(os.sched_getaffinity(0))))
    return 0


if __name__ == "__main__":
    # Through the imported module, whose `profiling` bench.measure sees (not this __main__).
    from bench.profiles import main as imported_main

    sys.exit(imported_main())
