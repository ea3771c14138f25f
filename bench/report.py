"""The printed report: the baselines, one table row per HTTP scenario, then for each process
count what the scenarios left behind, and the target lines (met / NOT met)."""

from __future__ import annotations

import json
from typing import Any

from bench.http_scenarios import TARGET_P99_MS, TARGET_VERIFY_SHARE
from bench.targets import (
    CREATE_MULTIPLE,
    GROWTH_FLOOR,
    LABELS,
    READ_MULTIPLE,
    READS,
    WRITES,
    at_80pct,
    scenario_targets,
    verify_share,
    workers_targets,
)

_PAYOUT_SCENARIOS = (
    "post_payouts",
    "post_payouts_at_80pct",
    "post_payouts_at_80pct_of_target",
    "post_payouts_grown",
)


def baselines_table(figures: dict[str, Any]) -> str:
    """The one-core ES512 rates, the durable commit rate and the webhook delivery rate."""
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


def verdict(met: bool | None) -> str:
    """ "met" or "NOT met"."""
    return "met" if met else "NOT met"


def _runs(run: dict[str, Any], name: str, figure: str, form: str) -> str:
    """' (median of a, b, c)' when the scenario ran more than once."""
    runs = run.get(name, {}).get("runs", [])
    if len(runs) < 2:
        return ""
    return " (median of " + ", ".join(format(r[figure], form) for r in runs) + ")"


def _row(run: dict[str, Any], name: str, row: dict[str, Any]) -> str:
    """One table row: rate, p50/p99 in a closed loop, p99 at 80 % of that rate, 2xx, share
    of the verify rate around it, and CPU per request by process group."""
    cpu = ", ".join(f"{k} {v:.2f}" for k, v in sorted(row["cpu_ms_per_request"].items()))
    machine = row.get("machine")
    if machine:
        cpu += f"; machine busy {machine['busy']:.0%} (stolen {machine['steal']:.0%})"
    paced = at_80pct(run, name)
    p99_paced = f"{paced['p99_ms']:>8.1f}" if paced else f"{'-':>8}"
    share = verify_share(row)
    shown = f"{share:>7.2f}" if share is not None else f"{'-':>7}"
    return (
        f"{LABELS[name]:<50} {run['workers']:>5} {run['concurrency']:>5}"
        f" {row['requests_per_s']:>9,.0f} {row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f}"
        f" {p99_paced} {row['max_ms']:>8.1f} {row['ok_ratio']:>6.0%} {shown}  {cpu}"
    )


def http_table(http: dict[str, Any], verify_rate: float) -> str:
    """The table of every scenario of every process count, then each count's lines."""
    lines = [
        f"{'scenario':<50} {'procs':>5} {'conc':>5} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'p99@80%':>8} {'max ms':>8} {'2xx':>6} {'/verify':>7}"
        "  CPU ms per request by process group"
    ]
    for run in http.values():
        for name in LABELS:
            row = run.get(name)
            if row is not None and "requests_per_s" in row:
                lines.append(_row(run, name, row))
            elif row is not None and name.startswith("localstripe_"):
                lines.append(f"{LABELS[name]:<50} {run['workers']:>5} skipped: {row['skipped']}")
    lines.append(
        "p99@80%: p99 ms in an open loop at 80 % of the rate reached; /verify: req/s ÷ the"
        " one-core ES512 verify rate measured just before and after the scenario"
    )
    lines.append("")
    lines.extend(_post_targets_lines(http))
    for run in http.values():
        lines.extend(_payout_lines(run, verify_rate))
        lines.extend(_left_behind_lines(run))
        lines.extend(_run_lines(run))
    lines.append("")
    lines.extend(target_lines(http))
    return "\n".join(lines)


def _post_targets_lines(http: dict[str, Any]) -> list[str]:
    lines = []
    for run in http.values():
        targets = run["post_targets"]
        lines.append(
            f"POST /v3/payouts targets, {run['workers']} process(es):"
            f" rate {targets['verify_share']:.2f} of verify"
            + _runs(run, "post_payouts", "verify_share", ".2f")
            + f" ({verdict(targets['rate_met'])}, >= {TARGET_VERIFY_SHARE});"
            f" p99 {targets['p99_ms_at_80pct_of_target']:.1f} ms at 80 % of the target rate"
            + _runs(run, "post_payouts_at_80pct_of_target", "p99_ms", ".1f")
            + f" ({verdict(targets['p99_met_at_80pct_of_target'])}),"
            f" {targets['p99_ms_at_80pct_of_reached']:.1f} ms at 80 % of the rate reached"
            + _runs(run, "post_payouts_at_80pct", "p99_ms", ".1f")
            + f" ({verdict(targets['p99_met_at_80pct_of_reached'])}, <= {TARGET_P99_MS:.0f} ms);"
            f" all in one configuration: {'yes' if targets['both_met'] else 'no'}"
        )
    return lines


def _payout_lines(run: dict[str, Any], verify_rate: float) -> list[str]:
    """POST /v3/payouts against the verify rate, and executed end to end."""
    procs = run["workers"]
    ratio = run["post_payouts"]["requests_per_s"] / verify_rate
    lines = [
        f"POST /v3/payouts ÷ one-core verify rate, {procs} process(es): {ratio:.2f}"
        " (the rate at the start of the run)"
    ]
    for name in _PAYOUT_SCENARIOS:
        around = run.get(name, {}).get("verify_per_s_around")
        if around:
            lines.append(
                f"{LABELS[name]}, {procs} process(es):"
                f" {run[name]['requests_per_s'] / around['mean']:.2f} of the verify rate"
                f" measured around it ({around['before']:,.0f}/s before,"
                f" {around['after']:,.0f}/s after)"
            )
        execution = run.get(name, {}).get("execution")
        if execution:
            cpu = ", ".join(
                f"{k} {v:.2f}" for k, v in sorted(execution["cpu_ms_per_payout"].items())
            )
            lines.append(
                f"{LABELS[name]}, {procs} process(es): executed end to end"
                f" {execution['executed_per_s']:,.0f}/s"
                f" ({execution['unexecuted_when_load_ended']:,} not yet executed when the"
                f" load ended, all executed {execution['drain_seconds']} s later);"
                f" CPU ms per payout, acceptance and execution: {cpu}"
            )
    return lines


def _left_behind(name: str, figures: dict[str, Any]) -> str:
    """What one batch of a write left behind, in words."""
    if "stored" in figures and name == "post_authorization_flow":
        return (
            f"{figures['stored']:,} of {figures['created']:,} payments whose flow was started"
            f" are authorizing ({figures['lost']:,} lost)"
        )
    if "stored" in figures:
        return (
            f"{figures['stored']:,} of {figures['created']:,} accepted payments stored"
            f" ({figures['lost']:,} lost)"
        )
    done = figures.get("executed", figures.get("settled", 0))
    failed = f"{figures['failed']:,} failed, " if "failed" in figures else ""
    noun = {
        "post_refunds": "refunds executed",
        "post_payments_mandate": "payments settled",
        "post_v1_payouts": "payouts executed",
    }[name]
    amounts = figures.get("refunded_amount_matches")
    matching = "" if amounts is None else "match" if amounts else "DO NOT match"
    return (
        f"{done:,} of {figures['accepted']:,} accepted {noun} ({failed}{figures['lost']:,} lost;"
        f" {figures['unexecuted_when_load_ended']:,} not yet done when the load ended,"
        f" all done {figures['drain_seconds']} s later)"
        + (f"; refunded amounts {matching}" if matching else "")
    )


def _left_behind_lines(run: dict[str, Any]) -> list[str]:
    """What each write batch (other than POST /v3/payouts) left behind."""
    lines = []
    for name in WRITES[1:]:
        row = run.get(name, {})
        for batch, figures in (("", row), (" at 80 %", row.get("at_80pct") or {})):
            for key in ("stored", "started", "execution"):
                if key in figures:
                    lines.append(
                        f"{LABELS[name]}{batch}, {run['workers']} process(es):"
                        f" {_left_behind(name, figures[key])}"
                    )
    return lines


def _run_lines(run: dict[str, Any]) -> list[str]:
    """The listing's page, the ledger check, startup, growth, RSS and wrk of one run."""
    procs = run["workers"]
    lines = []
    if "get_payments_list" in run:
        lines.append(
            f"GET /v3/payments?limit=50, {procs} process(es):"
            f" {run['get_payments_list']['items_per_page']} items per page"
        )
    check = run.get("ledger_check")
    if check is not None:
        lines.append(
            f"GET /admin/ledger/check at the end of the run, {procs} process(es):"
            f" {json.dumps(check)}"
        )
    lines.append(
        f"ready on a fresh / existing data directory, {procs} process(es):"
        f" {run['ready_seconds_fresh']:.2f} s / {run['ready_seconds_existing']:.2f} s"
    )
    if "growth" in run:
        rows = run["seeded"]["rows_each"]
        for name, figure in run["growth"].items():
            share = figure["by_verify_share"]
            lines.append(
                f"{name} with {rows:,} payouts and payments stored ÷ empty:"
                f" {figure['by_requests_per_s']:.2f} by req/s,"
                f" {figure['by_cpu_per_request']:.2f} by CPU per request"
                + (f", {share:.2f} by share of the verify rate around each" if share else "")
                + f" ({verdict(figure['met'])}, >= {GROWTH_FLOOR});"
                f" seeded in {run['seeded']['seconds']} s"
            )
    rss = run.get("rss") or {}
    if rss:
        lines.append(
            f"API process RSS MB ({procs} process(es)): first {rss['first_mb']},"
            f" max {rss['max_mb']}, last {rss['last_mb']},"
            f" drift over the second half {rss['drift_second_half_mb']}"
            + (f" after a {run['soak']['seconds']:.0f} s soak" if "soak" in run else "")
        )
    noop = run.get("pipeline_noop")
    if noop:
        lines.append(
            f"no-op authenticated GET through the middleware and pipeline"
            f" {noop['pipeline_per_s']:,.0f} req/s ÷ bare Starlette route"
            f" {noop['bare_starlette_per_s']:,.0f} req/s = {noop['share']:.2f}"
            f" ({verdict(noop['met'])}, >= {noop['target_share']}); by CPU per request"
            f" {noop['bare_starlette_cpu_us']:.0f} ÷ {noop['pipeline_cpu_us']:.0f} µs"
            + (
                f" = {noop['share_by_cpu']:.2f}"
                if noop["share_by_cpu"] is not None
                else " (n/a: each run under the CPU meter's 10 ms)"
            )
        )
    if "wrk_get_payout" in run:
        wrk = run["wrk_get_payout"]
        lines.append(
            f"GET /v3/payouts/{{id}}: wrk {wrk.get('requests_per_s', 0):,.0f} req/s,"
            f" bench/loadgen just before {wrk.get('loadgen_requests_per_s', 0):,.0f} req/s"
        )
    return lines


def target_lines(http: dict[str, Any]) -> list[str]:
    """The targets of every signed write and main read, for each process count, then 2
    processes against 1 for every write, then nothing lost."""
    lines = ["Targets of every signed write and main read:"]
    for run in http.values():
        procs = run["workers"]
        targets = run["targets"]
        for name in WRITES:
            if name not in targets:
                continue
            figure = targets[name]
            p99 = figure["p99_ms_at_80pct"]
            lines.append(
                f"{LABELS[name]}, {procs} process(es): {figure['verify_share']:.2f} of the verify"
                f" rate ({verdict(figure['rate_met'])}, >= {figure['verify_share_floor']});"
                + (f" p99 {p99:.1f} ms" if p99 is not None else " p99 not measured")
                + f" at 80 % of the rate reached ({verdict(figure['p99_met'])},"
                f" <= {TARGET_P99_MS:.0f} ms)"
            )
        if "post_payouts" in targets:
            lines.append(_create_line(run, targets["post_payouts"]))
        baseline = run.get("localstripe_get", {})
        for name in READS:
            if name not in targets:
                continue
            multiple = targets[name]["localstripe_multiple"]
            if multiple is None:
                lines.append(
                    f"{LABELS[name]}, {procs} process(es): not judged, the localstripe"
                    f" baseline was skipped ({baseline.get('skipped', 'not measured')})"
                )
                continue
            lines.append(
                f"{LABELS[name]}, {procs} process(es): {run[name]['requests_per_s']:,.0f} req/s,"
                f" {multiple:.2f} x localstripe {baseline['version']}'s GET"
                f" ({baseline['requests_per_s']:,.0f}/s)"
                f" ({verdict(targets[name]['met'])}, >= {READ_MULTIPLE:.0f} x)"
            )
    lines.extend(_workers_lines(http))
    return lines


def _create_line(run: dict[str, Any], figure: dict[str, Any]) -> str:
    """POST /v3/payouts against localstripe's create, or why it is not judged."""
    procs, peer = run["workers"], run.get("localstripe_create", {})
    multiple = figure.get("localstripe_create_multiple")
    if multiple is None:
        return (
            f"{LABELS['post_payouts']}, {procs} process(es): not judged against localstripe's"
            f" create, the baseline was skipped ({peer.get('skipped', 'not measured')})"
        )
    rate = run["post_payouts"]["requests_per_s"]
    return (
        f"{LABELS['post_payouts']}, {procs} process(es): {rate:,.0f} req/s,"
        f" {multiple:.2f} x localstripe {peer['version']}'s create"
        f" ({peer['requests_per_s']:,.0f}/s) ({verdict(figure['localstripe_create_met'])},"
        f" >= {CREATE_MULTIPLE:.0f} x)"
    )


def _workers_lines(http: dict[str, Any]) -> list[str]:
    figures = workers_targets(http)
    if not figures:
        return ["2 processes against 1: not judged, the run did not have both (--workers 1,2)"]
    lines = []
    for name, figure in figures.items():
        share = figure["by_verify_share"]
        lines.append(
            f"{LABELS[name]}, 2 processes ÷ 1:"
            + (f" {share:.2f} by share of the verify rate around each," if share else "")
            + f" {figure['by_requests_per_s']:.2f} by req/s ({verdict(figure['met'])}, >= 1)"
        )
    return lines


def judge(http: dict[str, Any]) -> None:
    """Store each run's targets in its figures (`targets`), and the comparison of process
    counts under `workers_2_vs_1` of the last run."""
    for run in http.values():
        run["targets"] = scenario_targets(run)
    compared = workers_targets(http)
    if compared:
        http["workers_2"]["workers_2_vs_1"] = compared
