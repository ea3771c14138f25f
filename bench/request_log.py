"""`python -m bench --request-log`: what the request log (on by default in the sandbox)
costs a signed `POST /v3/payouts`, a `GET /v3/payouts/{id}`, a `GET /v3/payments/{id}` and a
signed `POST /v3/payments/{id}/authorization-flow`, and whether round 3's targets of these hold
with it on as with it off.

Two `bankrail serve --workers 1` with the sandbox defaults, one with the request log on (its
default 7 days) and one with it off (`BANKRAIL_REQUEST_LOG_RETENTION_SECONDS=0`), run side by
side; they take turns (on, off, then off, on...), each turn a closed loop of fresh signed
payouts (after the other server's payouts have all executed) between two readings of the
one-core verify rate, then of GETs of payouts by id, then of payments by id, then of
authorisation-flow starts (between two readings too) on payments made just before. After
both turns of a round, each server in the round's order takes an open loop of GETs of
payouts offered at one rate to both (80 % of what the log-on server answered in a closed
loop just before the pair), so that the machine's change of speed and the background work
fall on both alike. On the log-on server each loop starts once
the log has written what came before it (no loop pays for another's entries), and a closed
loop of GETs is metered until its own entries are written, so that its CPU counts writing
them; the log-off server gets the same pause and the same last request (`_Log`). Reported
for each request: each setting's median requests/s, p50 and CPU per request (API processes, and all
of the server's processes with PostgreSQL), and the median over the rounds of the ratio on/off
of the round's two rates; how many entries the log wrote (proof it was on); and, for each
setting, each write's share of the verify rate around its turn, each GET's multiple of
localstripe's GET (read on a localstripe kept running, once before each turn's GETs, which are
judged against that reading: the machine's speed moves both alike) and the paced
GETs' p50 and p99, beside round 3's targets (0.6 for the payouts, 0.45 for the flow, 1.3 for
a GET, a p99 of 50 ms; `python -m bench` judges its own runs against 0.75, 0.6 and 2). Every
median over the rounds is, of an even count, the worse middle one."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import asyncpg

from bench.baselines import verify_control
from bench.http_scenarios import (
    TARGET_P99_MS,
    TARGET_VERIFY_SHARE,
    _created_payout_ids,
    _drained,
)
from bench.loadgen import http_request, run_load
from bench.loadgen import run as run_loop
from bench.localstripe_baseline import Localstripe
from bench.measure import LOAD_SHARE, between_verify_rates, idle, measured
from bench.reads import SAMPLE, _gets, payment_paths
from bench.report import verdict
from bench.service import Merchant, Server, payout_body, seed, signed_post
from bench.targets import (
    LABELS,
    OTHER_WRITES_TARGET_SHARE,
    READ_MULTIPLE,
    READ_TARGET_MULTIPLE,
    multiple_of,
    verify_share,
)
from bench.writes import flow_starts, made_payments

__all__ = ["request_log_cost"]

SETTINGS = {"on": "604800", "off": "0"}
KINDS = ("post_payouts", "get_payout", "get_payment", "post_authorization_flow")
"""What each turn measures in a closed loop, in order (keys of targets.LABELS)."""
PACED = "get_payout_paced"
"""Each round's last loops, after both servers' turns: GETs of payouts by id offered at one
rate to both servers, one after the other."""
READS = ("get_payout", "get_payment")
SHARES = {"post_payouts": TARGET_VERIFY_SHARE, "post_authorization_flow": OTHER_WRITES_TARGET_SHARE}
"""Round 3's share of the verify rate for each write measured here."""
WRITTEN_SECONDS = 60.0
"""How long a loop's entries may take to be written before the bench gives up on them."""
VERIFY_SECONDS = 0.3  # the verify rate, measured just before and just after each write's turn


async def request_log_cost(requests: int, concurrency: int, rounds: int) -> dict[str, Any]:
    """Alternate `rounds` turns on each server, each of `requests` payouts, then `requests`
    GETs of payouts by id, as many of payments by id and as many authorisation-flow starts;
    after both turns of a round, as many paced GETs of payouts on each server at one rate;
    the figures of each setting, the medians of the rounds' ratios (on / off), and each
    setting's targets."""
    servers = {
        name: Server(1, env={"BANKRAIL_REQUEST_LOG_RETENTION_SECONDS": value})
        for name, value in SETTINGS.items()
    }
    sides: dict[str, _Side] = {}
    peer = Localstripe()
    try:
        peer.start()
        for name, server in servers.items():
            server.start()
            merchant = seed(server, balance=10**15)
            conn = await asyncpg.connect(server.dsn()) if name == "on" else None
            ids = _created_payout_ids(server, merchant, SAMPLE)
            await made_payments(server, merchant, "bench-user", SAMPLE, 8, preselected=False)
            side = sides[name] = _Side(
                server,
                _Log(conn, server, merchant),
                merchant,
                {
                    "get_payout": [f"/v3/payouts/{payout_id}" for payout_id in ids],
                    "get_payment": await payment_paths(server, merchant),
                },
            )
            made = len(side.paths["get_payment"])
            assert made == SAMPLE, f"{made} of {SAMPLE} payments awaiting authorisation were made"
            await _turn(side, min(200, requests), concurrency, None)
        turns: dict[str, dict[str, list[dict[str, float]]]] = {
            kind: {"on": [], "off": []} for kind in (*KINDS, PACED)
        }
        controls: list[float] = []
        for i in range(rounds):
            order = ("on", "off") if i % 2 == 0 else ("off", "on")
            for name in order:
                done = await _turn(sides[name], requests, concurrency, peer)
                for kind in KINDS:
                    turns[kind][name].append(done[kind])
            # The paced GETs' offered load, the same for both servers this round: below what
            # the log-on server answers now, so that a request's wait is its own, not a
            # queue's. Read just before the paced pair, not before the round's writes: the
            # writes' aftermath and the machine's own change of speed over a round moved what
            # the server could answer by more than the fifth this load leaves spare.
            on = sides["on"]
            await idle(on.server)
            gets = _gets(on.server, on.merchant, on.paths["get_payout"], requests)
            calibration = await measured(on.server, gets, concurrency)
            paced_rate = LOAD_SHARE * calibration["requests_per_s"]
            await idle(on.server)  # the calibration's entries, whichever server goes first
            for name in order:
                turns[PACED][name].append(
                    await _paced(sides[name], requests, concurrency, paced_rate)
                )
            for server in servers.values():
                await idle(server)
            # As long as the round's turns of payouts took, each between its own two readings.
            took = [requests / turns["post_payouts"][name][-1]["requests_per_s"] for name in order]
            controls.append(verify_control(VERIFY_SECONDS, statistics.mean(took)))
        for server in servers.values():
            await idle(server)  # the last paced loop's entries
        written = {name: await _entries(server) for name, server in servers.items()}
    finally:
        peer.stop()  # first: in a session of its own, nothing else would end it
        for side in sides.values():
            await side.log.close()
        for server in servers.values():
            server.stop()
    baseline = _baseline(turns, peer.skipped)
    return {
        "requests": requests,
        "concurrency": concurrency,
        "rounds": rounds,
        "turns": turns,
        "entries_written": written,
        "localstripe_get": baseline,
        **{kind: _figures(turns[kind]) for kind in KINDS},
        PACED: paced_latencies(turns[PACED]),
        "targets": targets_by_setting(turns, baseline),
        "verify_control": control_summary(controls),
    }


def control_summary(shares: list[float]) -> dict[str, Any]:
    """The rounds' controls (`verify_control`): how many, their median and their range;
    `{}` when there were none."""
    if not shares:
        return {}
    return {
        "readings": len(shares),
        "median": statistics.median(shares),
        "lowest": min(shares),
        "highest": max(shares),
    }


def control_line(control: dict[str, Any]) -> str | None:
    """What the controls say of the writes' shares: a loop of verifications alone, read as
    a write's turn is, would read exactly 1 where the machine's speed holds."""
    if not control:
        return None
    return (
        "  the verify rate's own drift: a loop that only verifies, read as each write's turn"
        f" is (between two verify rates), read {control['lowest']:.2f}-{control['highest']:.2f}"
        f" of the verify rate around it (median {control['median']:.2f},"
        f" {control['readings']} rounds); 1 where the machine's speed holds"
    )


KEPT_UP = 0.95
"""A paced turn whose answered rate fell under this share of the offered one measured a
queue, not the requests: it is counted (`short_turns`)."""


def paced_latencies(turns: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """For each setting, the paced GETs' offered rate, p50 and p99 (medians over the rounds,
    of an even count the worse middle), whether that p99 is within TARGET_P99_MS, and how
    many turns answered under KEPT_UP of the rate offered."""
    figures: dict[str, Any] = {}
    for name, runs in turns.items():
        p99 = statistics.median_high(run["p99_ms"] for run in runs)
        figures[name] = {
            "offered_per_s": statistics.median(run["offered_per_s"] for run in runs),
            "p50_ms": statistics.median_high(run["p50_ms"] for run in runs),
            "p99_ms": p99,
            "met": p99 <= TARGET_P99_MS,
            "short_turns": sum(
                run["requests_per_s"] < KEPT_UP * run["offered_per_s"] for run in runs
            ),
        }
    return figures


def targets_by_setting(
    turns: dict[str, dict[str, list[dict[str, float]]]], peer: dict[str, Any]
) -> dict[str, dict[str, dict[str, Any]]]:
    """For each setting, round 3's targets of these requests: each write's share of the
    verify rate measured around its turn (at least its `SHARES`), and each GET's rate as a
    multiple of localstripe's GET (at least READ_TARGET_MULTIPLE; None when it was not
    measured): of the reading taken just before its turn (`localstripe_get_per_s`), or of
    `peer` for a turn without one. Each figure is the median over the rounds, of an even
    count the worse of the middle two, as `python -m bench` takes its median run."""
    figures: dict[str, dict[str, dict[str, Any]]] = {}
    for name in SETTINGS:
        figures[name] = {}
        for kind, floor in SHARES.items():
            share = statistics.median_low(t["verify_share"] for t in turns[kind][name])
            figures[name][kind] = {"verify_share": share, "met": share >= floor}
        for kind in READS:
            multiples = [
                multiple
                for turn in turns[kind][name]
                if (multiple := _multiple(turn, peer)) is not None
            ]
            multiple = statistics.median_low(multiples) if multiples else None
            figures[name][kind] = {
                "localstripe_multiple": multiple,
                "met": None if multiple is None else multiple >= READ_TARGET_MULTIPLE,
            }
    return figures


def _multiple(turn: dict[str, float], peer: dict[str, Any]) -> float | None:
    """A GET turn's rate as a multiple of localstripe's GET read just before it, or of
    `peer` when it has no reading of its own."""
    reading = turn.get("localstripe_get_per_s")
    if reading:
        return turn["requests_per_s"] / reading
    return multiple_of(turn["requests_per_s"], peer)


def _baseline(turns: dict[str, dict[str, list[dict[str, float]]]], skipped: str | None) -> Any:
    """localstripe's GET over the comparison: the median (the lower middle) of its readings,
    one a turn, with their range, and why the readings stopped if they did (`skipped`);
    `{"skipped": reason}` when there were none."""
    readings = [
        turn["localstripe_get_per_s"]
        for turn in (*turns[READS[0]]["on"], *turns[READS[0]]["off"])
        if turn.get("localstripe_get_per_s")
    ]
    if not readings:
        return {"skipped": skipped or "localstripe was not measured"}
    return {
        "requests_per_s": statistics.median_low(readings),
        "readings": len(readings),
        "lowest_per_s": min(readings),
        "highest_per_s": max(readings),
        # Why a later turn had no reading (judged against the median instead).
        **({"skipped": skipped} if skipped else {}),
    }


def _figures(turns: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Each setting's medians over the rounds and the medians of the rounds' ratios, of an
    even count the worse middle: the lower rate, the higher latency and CPU."""

    def median(name: str, field: str) -> float:
        values = [t[field] for t in turns[name]]
        return (statistics.median_low if field == "requests_per_s" else statistics.median_high)(
            values
        )

    cpu_ratios = [
        on["all_cpu_ms"] / off["all_cpu_ms"]
        for on, off in zip(turns["on"], turns["off"], strict=True)
        if off["all_cpu_ms"] > 0
    ]

    return {
        "median_requests_per_s": {name: median(name, "requests_per_s") for name in turns},
        "median_p50_ms": {name: median(name, "p50_ms") for name in turns},
        "median_api_cpu_ms": {name: median(name, "api_cpu_ms") for name in turns},
        "median_writer_cpu_ms": {name: median(name, "writer_cpu_ms") for name in turns},
        "median_postgres_cpu_ms": {name: median(name, "postgres_cpu_ms") for name in turns},
        "median_all_cpu_ms": {name: median(name, "all_cpu_ms") for name in turns},
        # Each round's two turns ran back to back: the median of their ratios discounts the
        # machine's change of speed across rounds.
        "ratio_on_off": statistics.median_low(
            on["requests_per_s"] / off["requests_per_s"]
            for on, off in zip(turns["on"], turns["off"], strict=True)
        ),
        # Stricter: the log-on loop timed until its entries were written (which includes
        # up to one of the buffer's 0.1 s intervals of waiting for the last batch), the
        # log-off loop until the same last request was answered.
        "settled_ratio_on_off": statistics.median_low(
            on["settled_per_s"] / off["settled_per_s"]
            for on, off in zip(turns["on"], turns["off"], strict=True)
        ),
        # A turn too short for the CPU meter's 10 ms ticks reads 0 ms: no ratio of it.
        "cpu_ratio_on_off": statistics.median_high(cpu_ratios) if cpu_ratios else None,
    }


class _Side(NamedTuple):
    """One server of the comparison and what its loops use: its request log as the bench
    waits for it, its merchant, and the paths its GETs cycle over (by kind)."""

    server: Server
    log: _Log
    merchant: Merchant
    paths: dict[str, list[str]]


class _Log:
    """A server's request log as the bench waits for a loop's entries (`conn` to its database
    when the log is on, None when it is off): a closed loop of GETs is metered until its own
    entries are written, so that its CPU counts writing them (docs/performance.md, "The
    request log"). The log-off server gets the same last request."""

    def __init__(self, conn: asyncpg.Connection | None, server: Server, merchant: Merchant) -> None:
        self._conn = conn
        self._server = server
        self._merchant = merchant

    async def written_from_now(self, count: int) -> Callable[[], Awaitable[None]]:
        """A wait for the `count` entries of the requests made from now on to be written.

        It sends one more request, for an unknown payout (a 404, logged too; sent to the
        log-off server as well, which it then waits for only), and waits for its entry: the
        one API process (`Server(1)`) captures each entry before it answers, and its log
        writes them in the order it took them, so that one written means every earlier one
        is, found by the merchant's newest entry (one probe of an index, where counting the
        loop's entries every few milliseconds cost PostgreSQL more than the entries do).
        Then it checks that none was dropped."""
        marker = f"/v3/payouts/{uuid.uuid4()}"
        host = f"127.0.0.1:{self._server.port}"
        auth = {"Authorization": f"Bearer {self._merchant.token}"}
        probe = http_request("GET", marker, host, auth)
        conn = self._conn

        async def answered() -> None:
            await run_load("127.0.0.1", self._server.port, [probe], concurrency=1)

        if conn is None:
            return answered
        since = await conn.fetchval("SELECT clock_timestamp()")
        merchant = self._merchant.merchant_id
        newest = (
            "SELECT path FROM request_log WHERE merchant_id = $1::uuid"
            " ORDER BY created_at DESC, id DESC LIMIT 1"
        )
        made = "SELECT count(*) FROM request_log WHERE merchant_id = $1::uuid AND created_at >= $2"

        async def written() -> None:
            await answered()
            deadline = time.monotonic() + WRITTEN_SECONDS
            while await conn.fetchval(newest, merchant) != marker:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the log did not write its entries in {WRITTEN_SECONDS} s")
                await asyncio.sleep(0.01)
            kept = await conn.fetchval(made, merchant, since)
            if kept != count + 1:
                raise RuntimeError(f"the request log wrote {kept - 1} entries of {count}")

        return written

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()


async def _logged_loop(
    server: Server,
    log: _Log,
    requests: list[bytes],
    concurrency: int,
    rate: float | None = None,
) -> dict[str, Any]:
    """`measured` on a server whose request log is `log`, once it is `idle`: a closed loop is
    metered until its own entries are written (`settled_per_s`)."""
    await idle(server)
    written = await log.written_from_now(len(requests)) if rate is None else None
    return await measured(server, requests, concurrency, rate, settled=written)


async def _turn(
    side: _Side,
    requests: int,
    concurrency: int,
    peer: Localstripe | None,
) -> dict[str, dict[str, float]]:
    """One closed loop of `requests` fresh payouts, every one accepted, between two verify
    rates, drained; then, for each GET of the side's `paths` (by kind), one of `requests`
    GETs cycling over its paths; then one of `requests` authorisation-flow starts, between
    two verify rates, on as many preselected payments made just before (outside the
    measurement). Each GET loop as `_logged_loop` runs it, each write as `_write_turn`. With
    a `peer`, localstripe's GET rate is read once the server is idle before the GETs, and
    each GET loop's summary carries it (`localstripe_get_per_s`)."""
    server, log, merchant, paths = side
    posts = [
        signed_post(server, merchant, "/v3/payouts", payout_body(merchant)) for _ in range(requests)
    ]
    done = {"post_payouts": await _write_turn(server, posts, concurrency)}
    await _drained(server)
    reading = None
    if peer is not None:
        await idle(server)
        reading = await peer.rate(requests, concurrency)
    for kind, cycled in paths.items():
        gets = _gets(server, merchant, cycled, requests)
        got = await _logged_loop(server, log, gets, concurrency)
        assert got["ok_ratio"] == 1.0, got
        done[kind] = _summary(got)
        if reading is not None:
            done[kind]["localstripe_get_per_s"] = reading
    starts = await flow_starts(server, merchant, f"bench-{uuid.uuid4()}", requests, concurrency)
    done["post_authorization_flow"] = await _write_turn(server, starts, concurrency)
    return done


async def _paced(side: _Side, requests: int, concurrency: int, rate: float) -> dict[str, float]:
    """An open loop of `requests` GETs of payouts offered at `rate`, as `_logged_loop` runs
    it: its summary with its p99 and the rate offered."""
    server, log, merchant, paths = side
    gets = _gets(server, merchant, paths["get_payout"], requests)
    # As `python -m bench` paces: twice the connections, so that none waits for a free one.
    paced = await _logged_loop(server, log, gets, concurrency * 2, rate=rate)
    assert paced["ok_ratio"] == 1.0, paced
    return {**_summary(paced), "p99_ms": paced["p99_ms"], "offered_per_s": rate}


async def _write_turn(server: Server, writes: list[bytes], concurrency: int) -> dict[str, float]:
    """One closed loop of `writes`, every one accepted, between two verify rates: its
    summary with its share of the verify rate around it. Metered while it is answered only:
    a write leaves its execution behind (the worker, PostgreSQL), which a meter running
    until the log-on server's entries are written would count on that server alone."""

    async def run(_verify_rate: float) -> dict[str, Any]:
        return await measured(server, writes, concurrency)

    done = await between_verify_rates(server, VERIFY_SECONDS, run)
    assert done["ok_ratio"] == 1.0, done
    return {**_summary(done), "verify_share": verify_share(done) or 0.0}


def _summary(measured_run: dict[str, Any]) -> dict[str, float]:
    cpu = measured_run["cpu_ms_per_request"]
    return {
        "requests_per_s": measured_run["requests_per_s"],
        "settled_per_s": measured_run["settled_per_s"],
        "p50_ms": measured_run["p50_ms"],
        "api_cpu_ms": cpu.get("api", 0.0),
        "writer_cpu_ms": cpu.get("request_log", 0.0),
        "postgres_cpu_ms": cpu.get("postgres", 0.0),
        "all_cpu_ms": round(sum(cpu.values()), 3),
    }


async def _entries(server: Server) -> int:
    conn = await asyncpg.connect(server.dsn())
    try:
        return int(await conn.fetchval("SELECT count(*) FROM request_log"))
    finally:
        await conn.close()


def report(figures: dict[str, Any]) -> str:
    """The comparison as a few lines of text."""
    lines = [
        f"Request log on vs off, {figures['rounds']} turns of {figures['requests']} requests at "
        f"{figures['concurrency']} connections per setting (medians); entries written: "
        f"on {figures['entries_written']['on']}, off {figures['entries_written']['off']}"
    ]
    for kind in KINDS:
        title, f = LABELS[kind], figures[kind]
        rates, p50 = f["median_requests_per_s"], f["median_p50_ms"]
        api, every = f["median_api_cpu_ms"], f["median_all_cpu_ms"]
        writer, postgres = f["median_writer_cpu_ms"], f["median_postgres_cpu_ms"]
        lines.append(f"  {title}:")
        for name in ("on", "off"):
            lines.append(
                f"    log {name:<3}: {rates[name]:8.1f} requests/s  p50 {p50[name]:.1f} ms"
                f"  CPU ms/request: API {api[name]:.3f}, log writer {writer[name]:.3f},"
                f" PostgreSQL {postgres[name]:.3f}, all {every[name]:.3f}"
            )
        lines.append(
            f"    ratio on/off of the rates (median over the rounds): {f['ratio_on_off']:.3f};"
            " of all CPU per request: "
            + (
                f"{f['cpu_ratio_on_off']:.3f}"
                if f["cpu_ratio_on_off"] is not None
                else "n/a (each turn under the CPU meter's 10 ms)"
            )
        )
        lines.append(
            "    the same, the log-on loop timed until its entries were written:"
            f" {f['settled_ratio_on_off']:.3f}"
        )
    lines.append(paced_line(figures[PACED]))
    lines.extend(verdict_lines(figures))
    control = control_line(figures.get("verify_control", {}))
    if control is not None:
        lines.append(control)
    return "\n".join(lines)


def paced_line(paced: dict[str, Any]) -> str:
    """The paced GETs' latencies, on beside off, and their p99 against TARGET_P99_MS."""
    on, off = paced["on"], paced["off"]
    short = on["short_turns"] + off["short_turns"]
    return (
        f"  {LABELS['get_payout']} offered at {on['offered_per_s']:,.0f}/s to both (median of"
        f" the rounds, each {LOAD_SHARE * 100:.0f} % of what the log-on server answered in a"
        f" closed loop just before): p50 {on['p50_ms']:.1f} | {off['p50_ms']:.1f} ms,"
        f" p99 {on['p99_ms']:.1f} ({verdict(on['met'])})"
        f" | {off['p99_ms']:.1f} ms ({verdict(off['met'])}),"
        f" log on | off, target <= {TARGET_P99_MS:.0f} ms"
        + (f"; {short} turn(s) answered under {KEPT_UP:.0%} of the rate offered" if short else "")
    )


def verdict_lines(figures: dict[str, Any]) -> list[str]:
    """Round 3's targets of these requests, judged for each setting."""
    targets, peer = figures["targets"], figures["localstripe_get"]
    if "readings" in peer:
        baseline = (
            f"{peer['requests_per_s']:,.0f}/s, the median of {peer['readings']} readings"
            f" {peer['lowest_per_s']:,.0f}-{peer['highest_per_s']:,.0f}/s, one before each"
            " turn's GETs, each turn judged against its own"
            + (f"; later turns against the median: {peer['skipped']}" if "skipped" in peer else "")
        )
    elif "requests_per_s" in peer:
        baseline = f"{peer['requests_per_s']:,.0f}/s"
    else:
        baseline = peer["skipped"]
    lines = [f"  targets, log on | log off (localstripe's GET: {baseline}):"]
    for kind, floor in SHARES.items():
        writes = [targets[name][kind] for name in SETTINGS]
        lines.append(
            f"    {LABELS[kind]}: share of the verify rate "
            + " | ".join(f"{w['verify_share']:.2f} ({verdict(w['met'])})" for w in writes)
            + f", target >= {floor}"
        )
    for kind in READS:
        reads = [targets[name][kind] for name in SETTINGS]
        lines.append(
            f"    {LABELS[kind]}: x localstripe's GET "
            + " | ".join(
                "-"
                if r["localstripe_multiple"] is None
                else f"{r['localstripe_multiple']:.2f} ({verdict(r['met'])})"
                for r in reads
            )
            + f", target >= {READ_TARGET_MULTIPLE} (aim {READ_MULTIPLE:.0f})"
        )
    return lines


def run(requests: int, concurrency: int, rounds: int) -> str:
    """Measure and return the report."""
    return report(run_loop(request_log_cost(requests, concurrency, rounds)))
