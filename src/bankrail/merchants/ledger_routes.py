"""`GET /admin/ledger/check`: the ledger invariants, checked on demand by the operator."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.responses import Response

from bankrail.http.openapi import ERRORS_ADMIN
from bankrail.http.pipeline import OPERATOR, Call, Endpoint, routes
from bankrail.http.responses import json_response
from bankrail.ledger.service import check_ledger


class LedgerCheck(BaseModel):
    """The outcome of the invariant check."""

    ok: bool
    violations: list[dict[str, Any]]


async def ledger_check(call: Call[None, None]) -> Response:
    """Every posting set sums to zero, every balance equals its postings, none is negative."""
    context = call.context
    async with context.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        violations = await check_ledger(conn)
    return json_response(200, {"ok": not violations, "violations": violations})


ROUTES = routes(
    Endpoint(
        "GET",
        "/admin/ledger/check",
        ledger_check,
        OPERATOR,
        response_model=LedgerCheck,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
)
