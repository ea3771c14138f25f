"""Operator routes for the AML screening list."""

from __future__ import annotations

from starlette.responses import Response

from bankrail.http.openapi import ERRORS_ADMIN
from bankrail.http.pipeline import OPERATOR, Call, Endpoint, routes
from bankrail.http.responses import json_response
from bankrail.merchants.schemas import ScreeningList, ScreeningListOut
from bankrail.rails.screening import replace_screening_list, screening_list


async def set_screening_list(call: Call[ScreeningList, None]) -> Response:
    """Replace the list of beneficiary names that AML screening rejects."""
    body, context = call.body, call.context
    async with context.pool.acquire() as conn, conn.transaction():
        names = await replace_screening_list(conn, body.names)
    return json_response(200, {"names": names})


async def get_screening_list(call: Call[None, None]) -> Response:
    """The screening list in force."""
    context = call.context
    async with context.pool.acquire() as conn:
        names = await screening_list(conn)
    return json_response(200, {"names": names})


ROUTES = routes(
    Endpoint(
        "POST",
        "/admin/screening-list",
        set_screening_list,
        OPERATOR,
        body=ScreeningList,
        response_model=ScreeningListOut,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
    Endpoint(
        "GET",
        "/admin/screening-list",
        get_screening_list,
        OPERATOR,
        response_model=ScreeningListOut,
        errors=ERRORS_ADMIN,
        tags=["operator"],
    ),
)
