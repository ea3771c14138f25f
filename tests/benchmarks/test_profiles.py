"""What `python -m bench.profiles` makes of py-spy's samples: each sampled frame's area by
its file, the shares of a profile by area, and the report's ceiling arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.profiles import _profile_files, area_of, report, shares_by_area


@pytest.mark.parametrize(
    ("frame", "area"),
    [
        ("record (bankrail/http/request_log.py:120)", "request log capture"),
        ("flush (bankrail/http/joined_writes.py:44)", "pipeline and middleware"),
        ("_verify (bankrail/security/verifier.py:80)", "signatures (parse, verifier hand-off)"),
        ("fingerprint (bankrail/security/idempotency.py:12)", "auth, keys, idempotency"),
        ("decide_payout (bankrail/payouts/models.py:300)", "domain, store, rendering"),
        ("fetchrow (asyncpg/connection.py:700)", "asyncpg (driver)"),
        (
            "data_received (uvicorn/protocols/http/httptools_impl.py:9)",
            "HTTP server (uvicorn, httptools)",
        ),
        ("__call__ (starlette/routing.py:1)", "Starlette, FastAPI"),
        ("validate_python (pydantic/type_adapter.py:1)", "validation (pydantic)"),
        ("run (asyncio/runners.py:118)", "event loop, sockets, tasks"),
        ("dumps (orjson)", "other"),
    ],
)
def test_a_frame_belongs_to_the_area_of_its_file(frame: str, area: str) -> None:
    assert area_of(frame) == area


def test_shares_are_counted_by_the_frame_running_when_sampled() -> None:
    collapsed = [
        "<module> (bankrail/__main__.py:1);fetch (asyncpg/connection.py:1) 3",
        "<module> (bankrail/__main__.py:1);render (bankrail/payouts/service.py:9) 1",
        "",
        "not a sample line",
    ]
    assert shares_by_area(collapsed) == {"asyncpg (driver)": 0.75, "domain, store, rendering": 0.25}
    assert shares_by_area([]) == {}


def test_the_report_gives_the_ceiling_of_all_cores_and_the_multiple_of_the_peer() -> None:
    figures = {
        "post_payouts": {
            "summary": {
                "requests_per_s": 500.0,
                "verify_per_s_around": {"mean": 1_000.0},
                "cpu_ms_per_request": {"api": 1.0, "postgres": 1.5, "worker": 0.0},
            },
            "api_areas": {"asyncpg (driver)": 0.6, "other": 0.4},
        },
        "localstripe": {"get": 2_000.0, "create": 200.0},
    }
    text = report(figures, cores=2)
    assert "post_payouts: 500 req/s = 0.50 of the verify rate" in text
    assert "CPU ms per request (the load generator's included): postgres 1.500, api 1.000;" in text
    assert "; all 2.500" in text
    # 2 cores * 1,000 ms / 2.5 ms = 800 requests/s with every core busy.
    assert "ceiling with all 2 cores busy: 800 req/s = 0.80 of the verify rate (1,000/s)" in text
    assert "against localstripe's create (200/s): 2.50 x, the ceiling 4.00 x" in text
    assert "API process by area: asyncpg (driver) 60%, other 40%" in text


def test_only_the_profiles_it_wrote_are_taken_or_cleared(tmp_path: Path) -> None:
    for name in ("get_payment-12.txt", "get_payments_list-13.txt", "requirements.txt", "a-b.txt"):
        (tmp_path / name).write_text("")
    assert [p.name for p in _profile_files(tmp_path, "get_payment")] == ["get_payment-12.txt"]
    assert [p.name for p in _profile_files(tmp_path)] == [
        "get_payment-12.txt",
        "get_payments_list-13.txt",
    ]
