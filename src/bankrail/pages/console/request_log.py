"""The console's request-log pages: the merchant's API requests, newest first, filtered by
status class, path, object id and time, and one request with its answer side by side
(docs/console.md, "Request log"). The entries are the ones `GET /v3/request-log` lists,
redacted when they were captured."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from bankrail.core.pagination import Window
from bankrail.core.problems import InvalidParameters
from bankrail.http.auth import require_payments_audience
from bankrail.merchants.request_log import RequestLogFilter, get_entry, list_entries, render_entry
from bankrail.pages.console.core import (
    ConsoleRoute,
    Errors,
    app_context,
    attempt,
    link_filters,
    not_found,
    object_id,
    render,
    resolve_viewer,
)
from bankrail.pages.console.forms import parse_choice, parse_day_or_time, parse_text

router = APIRouter(route_class=ConsoleRoute)

STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx")
PAGE = 50


def _filters(request: Request, errors: Errors) -> tuple[Window, RequestLogFilter, dict[str, str]]:
    query = request.query_params
    values = {k: query.get(k, "") for k in ("status", "path", "object_id", "from", "to", "cursor")}
    status = attempt(errors, parse_choice, values["status"], "status", STATUS_CLASSES)
    path = attempt(errors, parse_text, values["path"], "path", required=False, max_length=500)
    if path and not path.startswith("/"):
        errors.setdefault("path", []).append("must start with /, for example /v3/payouts")
    found = attempt(
        errors, parse_text, values["object_id"], "object_id", required=False, max_length=100
    )
    since = attempt(errors, parse_day_or_time, values["from"], "from", end_of_day=False)
    until = attempt(errors, parse_day_or_time, values["to"], "to", end_of_day=True)
    if since and until and since >= until:
        errors.setdefault("to", []).append("must not be before the start date")
    window = Window(since=since, until=until, limit=PAGE, cursor=values["cursor"] or None)
    filters = RequestLogFilter.model_construct(
        status=status, path=path if path and path.startswith("/") else None, object_id=found
    )
    return window, filters, values


@router.get("/request-log", response_class=HTMLResponse)
async def request_log_list(request: Request) -> Response:
    """The API requests, newest first, filtered by status class, path prefix, object id and
    creation date."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    errors: Errors = {}
    window, filters, values = _filters(request, errors)
    items: list[dict[str, Any]] = []
    next_cursor = None
    if not errors:
        try:
            async with app_context(request).pool.acquire() as conn:
                rows, next_cursor = await list_entries(conn, viewer.merchant_id, window, filters)
            items = [render_entry(row) for row in rows]
        except InvalidParameters:
            errors["cursor"] = ["This page link is not valid; start again from the first page."]
    return render(
        request,
        "request_log.html",
        400 if errors else 200,
        title="Request log",
        section="request-log",
        items=items,
        next_cursor=next_cursor,
        values=values,
        filters=link_filters(values),
        errors=errors,
        statuses=STATUS_CLASSES,
    )


def _shown(value: Any) -> str:
    """A body or headers as the page shows them: indented JSON, or the text as it is."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)


@router.get("/request-log/{entry_id}", response_class=HTMLResponse)
async def request_log_entry(request: Request, entry_id: str) -> Response:
    """One API request and its answer, side by side: headers and body of each."""
    viewer = await resolve_viewer(request, needs=require_payments_audience)
    async with app_context(request).pool.acquire() as conn:
        row = await get_entry(conn, viewer.merchant_id, object_id(entry_id, "request"))
    if row is None:
        raise not_found("request")
    entry = render_entry(row)
    return render(
        request,
        "request_log_entry.html",
        title=f"{entry['method']} {entry['path']}",
        section="request-log",
        entry=entry,
        shown={
            side: {part: _shown(entry[side][part]) for part in ("headers", "body")}
            for side in ("request", "response")
        },
    )
