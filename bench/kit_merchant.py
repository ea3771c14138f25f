"""`python -m bench.kit_merchant`: what the testing kit's `bankrail_merchant` fixture costs a
test, made fresh (as it is) or obtained by resetting a merchant an earlier test used
(`POST /sandbox/merchants/{id}/reset`, then its accounts funded again).

One server (`bankrail.testing.start_server`); the two ways take turns in one run, `--rounds`
times each: a fresh merchant (`create_merchant`: the merchant, a client, a new P-521 key
registered, two accounts, two funding transfers), and a reset of a merchant that made
`--payouts` payouts since the last one (made outside the timed part) with its two accounts
funded again. Reported: the median and quartiles of each, in milliseconds, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from typing import Any

import httpx

from bankrail.testing import Merchant, create_merchant, start_server

__all__ = ["main", "measure"]


FUNDING = {"GBP": 1_000_000, "EUR": 1_000_000}  # the fixture's


def _fund(operator: httpx.Client, merchant: Merchant) -> None:
    for currency, amount in FUNDING.items():
        answer = operator.post(
            "/sandbox/bank-transfers",
            json={
                "iban": merchant.iban(currency),
                "amount_in_minor": amount,
                "currency": currency,
                "remitter_name": "Bankrail Test Funding",
                "reference": "test funding",
            },
        )
        answer.raise_for_status()


def _payouts(url: str, merchant: Merchant, count: int) -> None:
    """`count` payouts from the merchant's GBP account, as a test would make."""
    with httpx.Client(base_url=url, auth=merchant.auth(), timeout=30) as client:
        for _ in range(count):
            answer = client.post(
                "/v3/payouts",
                headers={"Idempotency-Key": str(uuid.uuid4())},
                json={
                    "merchant_account_id": merchant.account_id("GBP"),
                    "amount_in_minor": 100,
                    "currency": "GBP",
                    "beneficiary": {
                        "type": "external_account",
                        "account_holder_name": "Jane Doe",
                        "reference": "bench",
                        "account_identifier": {
                            "type": "sort_code_account_number",
                            "sort_code": "040004",
                            "account_number": "12345678",
                        },
                    },
                },
            )
            answer.raise_for_status()


def _figures(times: list[float]) -> dict[str, float]:
    low, median, high = statistics.quantiles(times, n=4)
    return {"p25_ms": round(low, 1), "median_ms": round(median, 1), "p75_ms": round(high, 1)}


def measure(rounds: int, payouts: int) -> dict[str, Any]:
    """Both ways, taking turns, `rounds` times each on one server; their figures."""
    server = start_server()
    try:
        with server.operator() as operator:
            reused = create_merchant(operator, name="reused")
            fresh: list[float] = []
            reset: list[float] = []
            for turn in range(rounds):
                began = time.perf_counter()
                create_merchant(operator, name=f"fresh {turn}")
                fresh.append((time.perf_counter() - began) * 1000)

                _payouts(server.url, reused, payouts)
                began = time.perf_counter()
                operator.post(f"/sandbox/merchants/{reused.id}/reset").raise_for_status()
                _fund(operator, reused)
                reset.append((time.perf_counter() - began) * 1000)
    finally:
        server.stop()
    made, reused_figures = _figures(fresh), _figures(reset)
    return {
        "rounds": rounds,
        "payouts_before_each_reset": payouts,
        "fresh": made,
        "reset": reused_figures,
        "reset_over_fresh": round(reused_figures["median_ms"] / made["median_ms"], 2),
    }


def main() -> None:
    """Print the figures as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.kit_merchant", description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--payouts", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.rounds, args.payouts), indent=2))


if __name__ == "__main__":
    main()
