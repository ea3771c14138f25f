"""The query parameters every newest-first listing takes: `from`, `to`, `limit`, `cursor`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query
from pydantic import BaseModel

from bankrail.core.pagination import Window
from bankrail.core.problems import invalid_field
from bankrail.core.timefmt import Timestamp

__all__ = ["DEFAULT_PAGE", "MAX_PAGE", "ListWindow", "Pagination"]

DEFAULT_PAGE = 50
MAX_PAGE = 200


class Pagination(BaseModel):
    """Where the next page starts: pass `next_cursor` as `cursor`; null on the last page."""

    next_cursor: str | None


async def _window(
    from_: Annotated[
        Timestamp | None,
        Query(alias="from", description="RFC 3339; items created at or after it."),
    ] = None,
    to: Annotated[
        Timestamp | None, Query(description="RFC 3339; items created at or before it.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> Window:
    if from_ is not None and to is not None and from_ > to:
        raise invalid_field("from", "must not be later than `to`")
    return Window(since=from_, until=to, limit=limit, cursor=cursor)


ListWindow = Annotated[Window, Depends(_window)]
