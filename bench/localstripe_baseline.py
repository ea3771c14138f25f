"""The peer's baselines: localstripe 1.15 (a fake, stateful Stripe server on aiohttp, one
process) answering GET /v1/customers/{id} and creating customers (POST /v1/customers), measured
on this machine by the bench's own load generator at the same connections as Bankrail's
scenarios, so that each read can be stated as a multiple of the GET and a payout as a multiple
of the create.

Optional: `pip install -e '.[bench]'` brings it; without it the baseline is skipped, with the
reason in the figures. It runs as shipped (its access log on, to a discarded stderr) but for
its snapshot of the store, a pickle at the fixed path /tmp/localstripe.pickle rewritten on
every write: that is turned off, so that the run writes nothing to the machine's shared /tmp.
The GETs measured never write it anyway; the creates would, once each."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

from bench.baselines import verify_rate
from bench.loadgen import http_request, run_load
from bench.processes import cpu_by_pid
from bench.service import free_port

API_KEY = "sk_test_bench"
_LAUNCH = (
    "import sys, localstripe.resources as r; r.Store.dump_to_disk = lambda self: None;"
    " from localstripe import server; sys.argv[0] = 'localstripe'; server.start()"
)


def skipped_because() -> str | None:
    """Why the baseline cannot run here, or None when it can."""
    if importlib.util.find_spec("localstripe") is None:
        return "localstripe is not installed (pip install -e '.[bench]')"
    return None


def _start(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-c", _LAUNCH, "--port", str(port), "--from-scratch"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"localstripe exited with {process.returncode}")
            try:
                _customer(port)
                return process
            except OSError:
                time.sleep(0.05)
    except BaseException:
        _stop(process)  # in a session of its own: nothing else would end it
        raise
    _stop(process)
    raise RuntimeError("localstripe did not answer within 30 s")


_CUSTOMER_FORM = b"email=bench%40example.com&name=Bench"
"""A customer as Stripe takes it, form-encoded."""


def _customer(port: int) -> str:
    """Create a customer and return its id."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/customers",
        data=_CUSTOMER_FORM,
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
        return str(json.loads(answer.read())["id"])


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class Localstripe:
    """One localstripe, started by `start` and ended by `stop`, with its two requests
    prepared (`get`: GET /v1/customers/{id} of a customer made at the start; `create`: POST
    /v1/customers). `skipped` says why there is none (not installed, did not start) or why
    its readings stopped (`rate`). Kept running beside a comparison, its GET rate is read
    again at each turn: a machine whose speed moves between turns moves both readings of a
    turn alike, where one reading after all the turns judged every turn against that
    moment's speed."""

    def __init__(self) -> None:
        self.skipped: str | None = skipped_because()
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.get = b""
        self.create = b""

    def start(self) -> None:
        """Start it (or note in `skipped` why it could not be)."""
        if self.skipped is not None:
            return
        self.port = free_port()
        try:
            self.process = _start(self.port)
        except (RuntimeError, OSError) as exc:
            self.skipped = f"localstripe did not start: {exc}"
            return
        host, auth = f"127.0.0.1:{self.port}", {"Authorization": f"Bearer {API_KEY}"}
        self.get = http_request("GET", f"/v1/customers/{_customer(self.port)}", host, auth)
        form = {**auth, "Content-Type": "application/x-www-form-urlencoded"}
        self.create = http_request("POST", "/v1/customers", host, form, _CUSTOMER_FORM)

    async def rate(self, count: int, concurrency: int) -> float | None:
        """The rate of `count` GETs in a closed loop at `concurrency` connections; None when
        it is skipped, or when it answered anything but 2xx or stopped answering (it
        measured its errors, not its work: noted in `skipped`, and no later reading is
        taken)."""
        if self.process is None or self.skipped is not None:
            return None
        try:
            result = await run_load(
                "127.0.0.1", self.port, [self.get] * count, concurrency=concurrency
            )
        except (OSError, TimeoutError) as exc:  # it died or stopped answering mid-run
            self.skipped = f"localstripe stopped answering: {exc!r}"
            return None
        summary = result.summary()
        self.skipped = _errors(summary)
        return None if self.skipped is not None else summary["requests_per_s"]

    def stop(self) -> None:
        """Stop it."""
        process, self.process = self.process, None
        if process is not None:
            _stop(process)


def _errors(summary: dict[str, Any]) -> str | None:
    """Why a loop's figures are no baseline: it answered anything but 2xx (it measured its
    errors, not its work); None when every answer was a 2xx."""
    if summary["ok_ratio"] == 1.0:
        return None
    return f"localstripe answered {summary['ok_ratio']:.0%} of them with a 2xx"


async def localstripe_rates(
    gets: int, creates: int, concurrency: int, verify_seconds: float
) -> dict[str, dict[str, Any]]:
    """Against one fresh localstripe, each in a closed loop at `concurrency` connections
    between two verify rates: `gets` GET /v1/customers/{id} (under "get"), then `creates`
    POST /v1/customers (under "create"), each with the CPU localstripe and the load generator
    spent per request; both `{"skipped": reason}` when it is not installed or does not start."""
    peer = Localstripe()
    try:
        peer.start()
        if peer.process is None:
            return {"get": {"skipped": str(peer.skipped)}, "create": {"skipped": str(peer.skipped)}}
        process, port = peer.process, peer.port
        measured = {
            "get": await _measured(process, port, [peer.get] * gets, concurrency, verify_seconds),
            "create": await _measured(
                process, port, [peer.create] * creates, concurrency, verify_seconds
            ),
        }
    finally:
        peer.stop()
    return {
        name: summary if (why := _errors(summary)) is None else {"skipped": why}
        for name, summary in measured.items()
    }


async def _measured(
    process: subprocess.Popen[bytes],
    port: int,
    requests: list[bytes],
    concurrency: int,
    verify_seconds: float,
) -> dict[str, Any]:
    before = verify_rate(verify_seconds)
    cpu_before, own_before = cpu_by_pid({process.pid: ""}), sum(os.times()[:2])
    result = await run_load("127.0.0.1", port, requests, concurrency=concurrency)
    cpu_after, own_after = cpu_by_pid({process.pid: ""}), sum(os.times()[:2])
    after = verify_rate(verify_seconds)
    summary: dict[str, Any] = dict(result.summary())
    spent = cpu_after.get(process.pid, 0.0) - cpu_before.get(process.pid, 0.0)
    summary["cpu_ms_per_request"] = {
        "localstripe": round(spent * 1000 / result.requests, 3),
        "loadgen": round((own_after - own_before) * 1000 / result.requests, 3),
    }
    summary["verify_per_s_around"] = {
        "before": before,
        "after": after,
        "mean": (before + after) / 2,
    }
    summary["verify_share"] = summary["requests_per_s"] / summary["verify_per_s_around"]["mean"]
    summary["version"] = importlib.metadata.version("localstripe")
    return summary
