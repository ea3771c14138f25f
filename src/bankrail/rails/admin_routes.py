"""Operator routes for the AML screening list."""

from __future__ import annotations

from fastapi import APIRouter, Response

from bankrail.http.auth import Admin
from bankrail.http.deps import Context
from bankrail.http.openapi import ERRORS_ADMIN
from bankrail.http.responses import json_response
from bankrail.merchants.schemas import ScreeningList, ScreeningListOut
from bankrail.rails.screening import replace_screening_list, screening_list

router = APIRouter(prefix="/admin", tags=["operator"], responses=ERRORS_ADMIN)


@router.post("/screening-list", response_model=ScreeningListOut)
async def set_screening_list(body: ScreeningList, context: Context, _: Admin) -> Response:
    """Replace the list of beneficiary names that AML screening rejects."""
    async with context.pool.acquire() as conn, conn.transaction():
        names = await replace_screening_list(conn, body.names)
    return json_response(200, {"names": names})


@router.get("/screening-list", response_model=ScreeningListOut)
async def get_screening_list(context: Context, _: Admin) -> Response:
    """The screening list in force."""
    async with context.pool.acquire() as conn:
        names = await screening_list(conn)
    return json_response(200, {"names": names})
