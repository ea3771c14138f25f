"""`GET /v3/request-log`: a merchant's own API requests, newest first (DESIGN §11 "Debugging
tools"; docs/api.md, "Request log"). The entries are captured and written by
http/request_log.py, already redacted; the console's request-log pages read them here too."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field
from starlette.responses import Response

from bankrail.core.pagination import Window, newest_first_page
from bankrail.core.timefmt import iso_utc
from bankrail.db.pool import Connection
from bankrail.http.listing import Pagination, WindowQuery
from bankrail.http.openapi import ERRORS_AUTH
from bankrail.http.pipeline import MERCHANT, Call, Endpoint, routes
from bankrail.http.request_log import object_key
from bankrail.http.responses import json_response

__all__ = [
    "ROUTES",
    "RequestLogFilter",
    "RequestLogQuery",
    "get_entry",
    "list_entries",
    "render_entry",
]

STATUS_PATTERN = r"^[1-5](xx|XX|[0-9]{2})$"


class RequestLogFilter(BaseModel):
    """The filters of the request log: a status class (`4xx`) or code (`404`), a path
    prefix, an object id the entry names."""

    status: str | None = Field(
        None, pattern=STATUS_PATTERN, description="A status class (`4xx`) or a code (`404`)."
    )
    path: str | None = Field(
        None, pattern=r"^/", max_length=500, description="A path prefix, e.g. `/v3/payouts`."
    )
    object_id: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        description="The entries naming this object: in their path, or created by them.",
    )

    def statuses(self) -> tuple[int | None, int | None]:
        """The inclusive range of status codes asked for, (None, None) for any."""
        if self.status is None:
            return None, None
        if self.status[1:].lower() == "xx":
            low = int(self.status[0]) * 100
            return low, low + 99
        return int(self.status), int(self.status)


class RequestLogQuery(WindowQuery, RequestLogFilter):
    """`GET /v3/request-log`: the window (`from`, `to`, `limit`, `cursor`) and the filters."""


class Exchange(BaseModel):
    """The request or the answer, redacted: its headers and its body (JSON as JSON)."""

    headers: dict[str, str]
    body: Any = None


class RequestLogEntry(BaseModel):
    """One API request of the merchant and its answer."""

    id: uuid.UUID
    created_at: str
    method: str
    path: str
    status: int
    duration_ms: float
    client_id: str
    idempotency_key: str | None
    replayed: bool
    request: Exchange
    response: Exchange


class RequestLogPage(BaseModel):
    """`GET /v3/request-log`: one page of entries, newest first."""

    items: list[RequestLogEntry]
    pagination: Pagination


_COLUMNS = (
    "id, created_at, method, path, status, duration_ms, client_id, idempotency_key, replayed,"
    " request, response"
)


def render_entry(row: Any) -> dict[str, Any]:
    """An entry as the API shows it."""
    return {
        "id": str(row["id"]),
        "created_at": iso_utc(row["created_at"]),
        "method": row["method"],
        "path": row["path"],
        "status": row["status"],
        "duration_ms": row["duration_ms"],
        "client_id": row["client_id"],
        "idempotency_key": row["idempotency_key"],
        "replayed": row["replayed"],
        "request": row["request"],
        "response": row["response"],
    }


async def list_entries(
    conn: Connection, merchant_id: uuid.UUID | None, window: Window, filters: RequestLogFilter
) -> tuple[Sequence[Any], str | None]:
    """One page of the merchant's entries (rows), newest first (None: every merchant's, the
    console operator's view), and the cursor of the next page (None on the last); 400
    (InvalidParameters) for a cursor that is not one of ours."""
    after_time, after_id = window.after()
    low, high = filters.statuses()
    rows = await conn.fetch(
        f"SELECT merchant_id, {_COLUMNS} FROM request_log"
        " WHERE ($1::uuid IS NULL OR merchant_id = $1)"
        " AND ($2::timestamptz IS NULL OR created_at >= $2)"
        " AND ($3::timestamptz IS NULL OR created_at <= $3)"
        " AND ($4::timestamptz IS NULL OR (created_at, id) < ($4, $5::uuid))"
        " AND ($6::int IS NULL OR status BETWEEN $6 AND $7)"
        " AND ($8::text IS NULL OR starts_with(path, $8))"
        " AND ($9::text IS NULL OR object_ids @> ARRAY[$9::text])"
        " ORDER BY created_at DESC, id DESC LIMIT $10",
        merchant_id,
        window.since,
        window.until,
        after_time,
        after_id,
        low,
        high,
        filters.path,
        object_key(filters.object_id) if filters.object_id else None,
        window.limit + 1,
    )
    return newest_first_page(rows, window.limit)


async def get_entry(conn: Connection, merchant_id: uuid.UUID | None, entry_id: uuid.UUID) -> Any:
    """One entry (a row), of the merchant (None: of any merchant, the operator's view);
    None when there is no such entry."""
    return await conn.fetchrow(
        f"SELECT merchant_id, {_COLUMNS} FROM request_log WHERE id = $1"
        " AND ($2::uuid IS NULL OR merchant_id = $2)",
        entry_id,
        merchant_id,
    )


async def list_request_log(call: Call[None, RequestLogQuery]) -> Response:
    """The caller merchant's API requests and their answers, newest first, redacted:
    `status` takes a class (`4xx`) or a code, `path` a path prefix, `object_id` the entries
    naming that object (in their path, or created by them); `from` and `to` (inclusive)
    bound `created_at`. Requests to this endpoint are not themselves logged."""
    context, query = call.context, call.query
    async with context.pool.acquire() as conn:
        rows, next_cursor = await list_entries(
            conn, call.merchant.merchant_id, query.window(), query
        )
    items = [render_entry(row) for row in rows]
    return json_response(200, {"items": items, "pagination": {"next_cursor": next_cursor}})


ROUTES = routes(
    Endpoint(
        "GET",
        "/v3/request-log",
        list_request_log,
        MERCHANT,
        query=RequestLogQuery,
        response_model=RequestLogPage,
        errors=ERRORS_AUTH,
        tags=["request log"],
    ),
)
