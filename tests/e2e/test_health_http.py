"""Liveness and readiness, as a load balancer or orchestrator reads them."""

from __future__ import annotations

import httpx

from support.server import RunningServer


def test_healthz_answers_without_a_token(server: RunningServer) -> None:
    answer = httpx.get(f"{server.base_url}/healthz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}
    assert answer.headers["svc-trace-id"]


def test_readyz_reports_database_migrations_and_workers(server: RunningServer) -> None:
    answer = httpx.get(f"{server.base_url}/readyz")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "status": "ready",
        "checks": {"database": "ok", "migrations": "ok", "workers": "ok"},
    }
