"""`python -m bench --request-log` compares POST /v3/payouts, GET /v3/payouts/{id} and GET
/v3/payments/{id} with the request log on and off, the log is really written by the server
where it is on (and only there), and their targets are judged for each setting."""

from __future__ import annotations

import re

from support.bench_runs import run_bench


def test_the_request_log_comparison_runs_both_settings_and_prints_the_ratios() -> None:
    stdout = run_bench(
        "bench", "--request-log", "--requests", "100", "--repeats", "2", "--concurrency", "4"
    )
    written = re.search(r"entries written: on (\d+), off (\d+)", stdout)
    assert written, stdout
    # At least the 50 payouts and 50 payments made for the GETs, the warm-up's 100 + 100 +
    # 100 and 2 turns of 100 + 100 + 100 (enough CPU per turn for the meter's 10 ms ticks to
    # read it).
    assert int(written[1]) >= 100 + 300 + 600, stdout
    assert int(written[2]) == 0, stdout
    for title in (
        r"signed POST /v3/payouts:",
        r"GET /v3/payouts/\{id\}:",
        r"GET /v3/payments/\{id\}:",
    ):
        assert re.search(title, stdout), stdout
    assert re.search(r"log on : +[\d.]+ requests/s", stdout), stdout
    assert re.search(r"log off: +[\d.]+ requests/s", stdout), stdout
    ratios = re.findall(
        r"ratio on/off of the rates .*: \d\.\d{3}; of all CPU .*: \d\.\d{3}$", stdout, re.M
    )
    assert len(ratios) == 3, stdout
    # Each target judged for both settings, side by side: a share of the verify rate for the
    # payouts, a multiple of localstripe's GET (or "-" where it could not run) for each GET.
    verdict = r"(met|NOT met)"
    assert re.search(
        rf"signed POST /v3/payouts: share of the verify rate \d\.\d\d \({verdict}\) \|"
        rf" \d\.\d\d \({verdict}\), target >= 0\.6$",
        stdout,
        re.M,
    ), stdout
    for title in (r"GET /v3/payouts/\{id\}", r"GET /v3/payments/\{id\}"):
        judged = rf"(\d+\.\d\d \({verdict}\)|-)"
        line = rf"^    {title}: x localstripe's GET {judged} \| {judged}, target >= 1\.3 \(aim 2\)$"
        assert re.search(line, stdout, re.M), stdout
