"""The benchmark's verdicts, from a run's own figures: the POST /v3/payouts targets, growth,
the targets of every signed write and main read, the comparison of process counts, and
whether anything was lost."""

from __future__ import annotations

from typing import Any

from bench.http_scenarios import TARGET_P99_MS, TARGET_VERIFY_SHARE

GROWTH_FLOOR = 0.85  # "within 15 % of the empty database"
PAYOUTS_VERIFY_SHARE = 0.75
"""Signed POST /v3/payouts must reach this share of the verify rate measured around it (the
other signed writes: `TARGET_VERIFY_SHARE`)."""
READ_MULTIPLE = 2.0
"""Each read must answer at least this many times localstripe's GET rate."""
CREATE_MULTIPLE = 5.0
"""Signed POST /v3/payouts must reach at least this many times localstripe's create rate."""
OTHER_WRITES_TARGET_SHARE = 0.45
"""Round 3's target for every signed write but POST /v3/payouts: this share of the verify
rate (`TARGET_VERIFY_SHARE`, which `python -m bench` judges them against, is round 2's)."""
READ_TARGET_MULTIPLE = 1.3
"""Round 3's target for a GET by id: this many times localstripe's GET rate (`READ_MULTIPLE`,
which `python -m bench` judges every read against, is its aim)."""

LABELS = {
    "post_payouts": "signed POST /v3/payouts",
    "post_payouts_at_80pct": "signed POST /v3/payouts at 80 % of max",
    "post_payouts_at_80pct_of_target": "signed POST /v3/payouts at 80 % of target",
    "post_payments": "signed POST /v3/payments, user-selected",
    "post_payments_preselected": "signed POST /v3/payments, preselected",
    "post_authorization_flow": "signed POST /v3/payments/{id}/authorization-flow",
    "post_refunds": "signed POST /v3/payments/{id}/refunds",
    "post_payments_mandate": "signed POST /v3/payments on a mandate",
    "post_v1_payouts": "signed POST /v1/payouts",
    "get_payout": "GET /v3/payouts/{id}",
    "get_payment": "GET /v3/payments/{id}",
    "get_payments_list": "GET /v3/payments?limit=50",
    "get_merchant_accounts": "GET /v3/merchant-accounts",
    "localstripe_get": "localstripe GET /v1/customers/{id}",
    "localstripe_create": "localstripe POST /v1/customers",
    "post_payouts_grown": "signed POST /v3/payouts, grown database",
    "get_payout_grown": "GET /v3/payouts/{id}, grown database",
}
"""Every scenario, in the order of the table."""

WRITES = (
    "post_payouts",
    "post_payments",
    "post_payments_preselected",
    "post_authorization_flow",
    "post_refunds",
    "post_payments_mandate",
    "post_v1_payouts",
)
READS = ("get_payout", "get_payment", "get_payments_list", "get_merchant_accounts")
CHECKS = ("execution", "stored", "started")
"""Where a write scenario's batch keeps what it left behind."""


def post_targets(run: dict[str, Any]) -> dict[str, Any]:
    """The two POST /v3/payouts targets for one process count, from the run's own figures:
    the closed-loop rate against 0.6 of the verify rate measured around it, and the p99 at
    80 % of that target rate (and, as a second reading, at 80 % of the rate reached)."""
    post = run["post_payouts"]
    ratio = post["requests_per_s"] / post["verify_per_s_around"]["mean"]
    at_target = run["post_payouts_at_80pct_of_target"]["p99_ms"]
    at_reached = run["post_payouts_at_80pct"]["p99_ms"]
    rate_met = ratio >= TARGET_VERIFY_SHARE
    target_met = at_target <= TARGET_P99_MS
    reached_met = at_reached <= TARGET_P99_MS
    return {
        "verify_share": round(ratio, 3),
        "rate_met": rate_met,
        "p99_ms_at_80pct_of_target": at_target,
        "p99_met_at_80pct_of_target": target_met,
        "p99_ms_at_80pct_of_reached": at_reached,
        "p99_met_at_80pct_of_reached": reached_met,
        "both_met": rate_met and target_met and reached_met,
    }


def growth(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """POST /v3/payouts and GET /v3/payouts/{id} on the grown database against the empty
    one: by requests per second, by CPU per request (empty ÷ grown, so that below 1 is worse
    in both), and by share of the verify rate measured around each run, which discounts the
    machine's own change of speed between the two. The target (within 15 %) is judged on the
    share where there is one, else on requests per second."""
    figures: dict[str, dict[str, Any]] = {}
    for name in ("post_payouts", "get_payout"):
        empty, full = run[name], run[name + "_grown"]
        by_rate = full["requests_per_s"] / empty["requests_per_s"]
        by_cpu = sum(empty["cpu_ms_per_request"].values()) / sum(
            full["cpu_ms_per_request"].values()
        )
        verify = [r.get("verify_per_s_around", {}).get("mean") for r in (empty, full)]
        by_share = by_rate * verify[0] / verify[1] if all(verify) else None
        judged = by_share if by_share is not None else by_rate
        figures[name] = {
            "by_requests_per_s": round(by_rate, 3),
            "by_cpu_per_request": round(by_cpu, 3),
            "by_verify_share": None if by_share is None else round(by_share, 3),
            "met": judged >= GROWTH_FLOOR,
        }
    return figures


def verify_share(row: dict[str, Any]) -> float | None:
    """A scenario's rate as a share of the verify rate measured around it, if it was."""
    around = row.get("verify_per_s_around")
    if not around:
        return None
    return float(row["requests_per_s"]) / float(around["mean"])


def at_80pct(run: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The open-loop run of a scenario at 80 % of the rate it reached (POST /v3/payouts keeps
    its own, repeated, under `post_payouts_at_80pct`)."""
    if name == "post_payouts":
        paced: dict[str, Any] | None = run.get("post_payouts_at_80pct")
        return paced
    row: dict[str, Any] = run.get(name, {})
    return row.get("at_80pct")


def multiple_of(rate: float, baseline: dict[str, Any]) -> float | None:
    """`rate` as a multiple of a localstripe baseline's rate (`localstripe_rates`), None when
    the baseline was not measured (skipped)."""
    peer = baseline.get("requests_per_s")
    return rate / peer if peer else None


def scenario_targets(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """For one process count: every signed write against its share of the verify rate (0.75
    for POST /v3/payouts, 0.6 for the others) and a p99 of 50 ms at 80 % of the rate it
    reached, and POST /v3/payouts against 5 times localstripe's create rate
    (`localstripe_create_met`); every read against twice localstripe's GET rate (`met` None
    when localstripe was not measured)."""
    figures: dict[str, dict[str, Any]] = {}
    for name in WRITES:
        if name not in run:
            continue
        floor = PAYOUTS_VERIFY_SHARE if name == "post_payouts" else TARGET_VERIFY_SHARE
        share = verify_share(run[name]) or 0.0
        paced = at_80pct(run, name) or {}
        p99 = paced.get("p99_ms")
        figures[name] = {
            "verify_share": round(share, 3),
            "verify_share_floor": floor,
            "rate_met": share >= floor,
            "p99_ms_at_80pct": p99,
            "paced_rate": paced.get("target_rate"),
            "p99_met": p99 is not None and p99 <= TARGET_P99_MS,
        }
        figures[name]["met"] = figures[name]["rate_met"] and figures[name]["p99_met"]
    if "post_payouts" in figures:
        multiple = multiple_of(
            run["post_payouts"]["requests_per_s"], run.get("localstripe_create", {})
        )
        figures["post_payouts"]["localstripe_create_multiple"] = (
            None if multiple is None else round(multiple, 3)
        )
        figures["post_payouts"]["localstripe_create_met"] = (
            None if multiple is None else multiple >= CREATE_MULTIPLE
        )
    for name in READS:
        if name not in run:
            continue
        ratio = multiple_of(run[name]["requests_per_s"], run.get("localstripe_get", {}))
        figures[name] = {
            "localstripe_multiple": None if ratio is None else round(ratio, 3),
            "met": None if ratio is None else ratio >= READ_MULTIPLE,
        }
    return figures


def workers_targets(http: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """For every write, 2 API processes against 1 (when the run has both): by share of the
    verify rate measured around each (the verdict: it discounts the machine's own change of
    speed between the two runs) and by requests per second."""
    one, two = http.get("workers_1"), http.get("workers_2")
    if one is None or two is None:
        return {}
    figures: dict[str, dict[str, Any]] = {}
    for name in WRITES:
        if name not in one or name not in two:
            continue
        by_rate = two[name]["requests_per_s"] / one[name]["requests_per_s"]
        shares = (verify_share(one[name]), verify_share(two[name]))
        by_share = shares[1] / shares[0] if shares[0] and shares[1] else None
        judged = by_share if by_share is not None else by_rate
        figures[name] = {
            "by_verify_share": None if by_share is None else round(by_share, 3),
            "by_requests_per_s": round(by_rate, 3),
            "met": judged >= 1.0,
        }
    return figures


def _batches(row: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(batch name, what it left behind) of a write scenario's closed and paced batches."""
    found = []
    for batch, figures in (("saturated", row), ("at 80 %", row.get("at_80pct") or {})):
        for key in CHECKS:
            if key in figures:
                found.append((batch, figures[key]))
    return found


def lost_anything(http: dict[str, Any]) -> list[str]:
    """What the runs lost or left unbalanced (empty when nothing): an accepted write not
    stored or not executed by the end of its scenario, a refunded amount that does not
    match, a ledger check with violations."""
    problems = []
    for key, run in http.items():
        for name in (*WRITES, "post_payouts_at_80pct", "post_payouts_at_80pct_of_target"):
            for batch, figures in _batches(run.get(name, {})):
                if (
                    figures.get("lost")
                    or figures.get("unexecuted_after_drain")
                    or figures.get("refunded_amount_matches") is False
                ):
                    problems.append(f"{key}: {LABELS[name]} ({batch}) lost: {figures}")
        check = run.get("ledger_check")
        if check is not None and not check.get("ok"):
            problems.append(f"{key}: the ledger check found violations: {check}")
    return problems
