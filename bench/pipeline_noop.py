"""The pipeline's own cost: a no-op authenticated GET through Bankrail's whole middleware and
request pipeline (http/pipeline.py), beside a bare Starlette route, in the same run.

Both are served by uvicorn (one process, uvloop + httptools, no access log), each in a process
of its own started here: `noop_app` is Bankrail's application (`create_app`, on the bench
server's database) with one more pipeline route, `GET /bench/noop`, authenticated as every
merchant route is (token, scopes, rate limit, revocation) and answering `{}` (the request log
on, as the sandbox has it, but this synthetic route's requests not captured in it); `bare_app`
is a Starlette application with one route answering the same. The figure is the ratio of their
rates (the issue's target: at least 0.6)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench.loadgen import http_request, run_load
from bench.processes import cpu_by_pid
from bench.service import Merchant, Server, free_port

TARGET_SHARE = 0.6


async def _noop(call: Any) -> Response:
    return Response(b"{}", media_type="application/json")


async def _bare(request: Request) -> Response:
    return Response(b"{}", media_type="application/json")


def noop_app() -> Any:
    """Bankrail's application with `GET /bench/noop` (uvicorn `--factory`): the settings from
    the environment, the database at `BENCH_DSN`. The request log stays as the settings say
    (on, with the sandbox's defaults), but this synthetic route's requests are not captured
    unless `BENCH_NOOP_LOGGED=1`: what an entry costs is the request log's, measured by
    `python -m bench --request-log`, not the pipeline's."""
    from bankrail.app import create_app
    from bankrail.config import settings_from_env
    from bankrail.http.pipeline import MERCHANT, Endpoint, PipelineRoute

    class Unlogged(PipelineRoute):
        async def _serve(self, request: Any) -> Any:
            return await self._run(request)

    kind = PipelineRoute if os.environ.get("BENCH_NOOP_LOGGED") == "1" else Unlogged
    app = create_app(settings_from_env(), os.environ["BENCH_DSN"])
    app.router.routes.insert(0, kind(Endpoint("GET", "/bench/noop", _noop, MERCHANT)))
    return app


def bare_app() -> Starlette:
    """A Starlette application with one route, `GET /bench/bare` (uvicorn `--factory`)."""
    return Starlette(routes=[Route("/bench/bare", _bare)])


def _start(factory: str, port: int, env: dict[str, str], probe: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            f"bench.pipeline_noop:{factory}",
            "--port",
            str(port),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{probe}", timeout=1):
                return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{factory} did not start")


async def _rate(
    process: subprocess.Popen[bytes],
    port: int,
    path: str,
    token: str | None,
    count: int,
    concurrency: int,
) -> tuple[float, float]:
    """(requests per second, the server process's CPU µs per request) of one run."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = http_request("GET", path, f"127.0.0.1:{port}", headers)
    before = cpu_by_pid({process.pid: "server"})[process.pid]
    result = await run_load("127.0.0.1", port, [request] * count, concurrency=concurrency)
    used = cpu_by_pid({process.pid: "server"})[process.pid] - before
    assert result.statuses.keys() == {200}, result.statuses
    return result.rate, used / count * 1e6


def share_by_cpu(bare_us: float, pipeline_us: float) -> float | None:
    """The bare route's CPU per request over the pipeline's; None when the pipeline's reads 0
    (a run shorter than the CPU meter's 10 ms tick: a smoke run on a fast machine)."""
    return bare_us / pipeline_us if pipeline_us > 0 else None


async def pipeline_noop(
    server: Server, merchant: Merchant, count: int, concurrency: int
) -> dict[str, Any]:
    """The no-op GET through the pipeline beside the bare route: each measured three times,
    alternating, the best run of each kept (the machine is shared)."""
    env = {
        "BENCH_DSN": server.dsn(),
        "BANKRAIL_ADMIN_TOKEN": server.admin_token,
        "BANKRAIL_DATA_DIR": str(server.data_dir / "noop") if server.data_dir else ".",
        "BANKRAIL_ACCESS_LOG": "off",
        "BANKRAIL_LOG_LEVEL": "WARNING",
        "BANKRAIL_RATE_LIMIT_PER_SECOND": "1000000",
        "BANKRAIL_RATE_LIMIT_BURST": "1000000",
    }
    noop_port, bare_port = free_port(), free_port()
    noop = _start("noop_app", noop_port, env, "/healthz")
    bare = _start("bare_app", bare_port, {}, "/bench/bare")
    try:
        pipeline_runs, bare_runs = [], []
        for _ in range(3):
            bare_runs.append(await _rate(bare, bare_port, "/bench/bare", None, count, concurrency))
            pipeline_runs.append(
                await _rate(noop, noop_port, "/bench/noop", merchant.token, count, concurrency)
            )
    finally:
        for process in (noop, bare):
            process.terminate()
            process.wait(timeout=30)
    best_pipeline, best_bare = max(pipeline_runs), max(bare_runs)
    share = best_pipeline[0] / best_bare[0]
    # On a machine others load, the rate says more about them than about either server; the
    # CPU each process used per request does not: its ratio is the rate ratio one core
    # would give (fewest µs of each).
    pipeline_us = min(us for _, us in pipeline_runs)
    bare_us = min(us for _, us in bare_runs)
    return {
        "pipeline_per_s": best_pipeline[0],
        "bare_starlette_per_s": best_bare[0],
        "share": share,
        "pipeline_cpu_us": pipeline_us,
        "bare_starlette_cpu_us": bare_us,
        "share_by_cpu": share_by_cpu(bare_us, pipeline_us),
        "target_share": TARGET_SHARE,
        "met": share >= TARGET_SHARE,
        "runs": {"pipeline": pipeline_runs, "bare": bare_runs},
    }
