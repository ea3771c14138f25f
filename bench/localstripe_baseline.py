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


class LocalstripeGets:
    """One localstripe kept running beside a comparison, whose GET /v1/customers/{id} rate
    is read again at each turn (`rate`): a machine whose speed moves between turns moves
    both readings of a turn alike, where one reading after all the turns judged every turn
    against that moment's speed. `skipped` says why there is none (not installed, did not
    start); `stop` ends it."""

    def __init__(self) -> None:
        self.skipped: str | None = skipped_because()
        self._process: subprocess.Popen[bytes] | None = None
        self._port = 0
        self._get = b""

    def start(self) -> None:
        """Start it (or note in `skipped` why it could not be)."""
        if self.skipped is not None:
            return
        self._port = free_port()
        try:
            self._process = _start(self._port)
        except (RuntimeError, OSError) as exc:
            self.skipped = f"localstripe did not start: {exc}"
            return
        host, auth = f"127.0.0.1:{self._port}", {"Authorization": f"Bearer {API_KEY}"}
        self._get = http_request("GET", f"/v1/customers/{_customer(self._port)}", host, auth)

    async def rate(self, count: int, concurrency: int) -> float | None:
        """The rate of `count` GETs in a closed loop at `concurrency` connections; None when
        it is skipped, or when it answered anything but 2xx or stopped answering (it
        measured its errors, not its work: noted in `skipped`, and no later reading is
        taken)."""
        if self._process is None or self.skipped is not None:
            return None
        try:
            result = await run_load(
                "127.0.0.1", self._port, [self._get] * count, concurrency=concurrency
            )
        except (OSError, TimeoutError) as exc:  # it died or stopped answering mid-run
            self.skipped = f"localstripe stopped answering: {exc!r}"
            return None
        summary = result.summary()
        if summary["ok_ratio"] != 1.0:
            self.skipped = f"localstripe answered {summary['ok_ratio']:.0%} of them with a 2xx"
            return None
        return summary["requests_per_s"]

    def stop(self) -> None:
        """Stop it."""
        process, self._process = self._process, None
        if process is not None:
            _stop(process)


async def localstripe_rates(
    gets: int, creates: int, concurrency: int, verify_seconds: float
) -> dict[str, dict[str, Any]]:
    """Against one fresh localstripe, each in a closed loop at `concurrency` connections
    between two verify rates: `gets` GET /v1/customers/{id} (under "get"), then `creates`
    POST /v1/customers (under "create"), each with the CPU localstripe and the load generator
    spent per request; both `{"skipped": reason}` when it is not installed or does not start."""
    reason = skipped_because()
    if reason is not None:
        return {"get": {"skipped": reason}, "create": {"skipped": reason}}
    port = free_port()
    try:
        process = _start(port)
    except (RuntimeError, OSError) as exc:
        skipped = {"skipped": f"localstripe did not start: {exc}"}
        return {"get": skipped, "create": dict(skipped)}
    host, auth = f"127.0.0.1:{port}", {"Authorization": f"Bearer {API_KEY}"}
    try:
        get = http_request("GET", f"/v1/customers/{_customer(port)}", host, auth)
        form = {**auth, "Content-Type": "application/x-www-form-urlencoded"}
        create = http_request("POST", "/v1/customers", host, form, _CUSTOMER_FORM)
        measured = {
            "get": await _measured(process, port, [get] * gets, concurrency, verify_seconds),
            "create": await _measured(
                process, port, [create] * creates, concurrency, verify_seconds
            ),
        }
    finally:
        _stop(process)
    # A baseline that answered anything but 2xx measured its errors, not its work.
    return {
        name: summary
        if summary["ok_ratio"] == 1.0
        else {"skipped": f"localstripe answered {summary['ok_ratio']:.0%} of them with a 2xx"}
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
