"""`GET /admin/ledger/check`: the ledger invariants, checked on demand by the operator."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel

from bankrail.http.auth import Admin
from bankrail.http.deps import Context
from bankrail.http.openapi import ERRORS_ADMIN
from bankrail.http.responses import json_response
from bankrail.ledger.service import check_ledger

router = APIRouter(prefix="/admin", tags=["operator"], responses=ERRORS_ADMIN)


class LedgerCheck(BaseModel):
    """The outcome of the invariant check."""

    ok: bool
    violations: list[dict[str, Any]]


@router.get("/ledger/check", response_model=LedgerCheck)
async def ledger_check(context: Context, _: Admin) -> Response:
    """Every posting set sums to zero, every balance equals its postings, none is negative."""
    async with context.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        violations = await check_ledger(conn)
    return json_response(200, {"ok": not violations, "violations": violations})
