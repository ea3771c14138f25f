"""The query parameters every newest-first listing takes: `from`, `to`, `limit`, `cursor`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query
from pydantic import BaseModel, Field

from bankrail.core.pagination import Window
from bankrail.core.problems import invalid_field
from bankrail.core.timefmt import Timestamp

__all__ = ["DEFAULT_PAGE", "MAX_PAGE", "ListWindow", "Pagination", "WindowQuery"]

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


class WindowQuery(BaseModel):
    """The query of a newest-first listing (the pipeline's form of `ListWindow`); a
    listing's own filters are fields of a subclass."""

    from_: Timestamp | None = Field(
        None, alias="from", description="RFC 3339; items created at or after it."
    )
    to: Timestamp | None = Field(None, description="RFC 3339; items created at or before it.")
    limit: int = Field(DEFAULT_PAGE, ge=1, le=MAX_PAGE)
    cursor: str | None = Field(None, max_length=200)

    def window(self) -> Window:
        """The window asked for; 400 when `from` is later than `to`."""
        if self.from_ is not None and self.to is not None and self.from_ > self.to:
            raise invalid_field("from", "must not be later than `to`")
        return Window(since=self.from_, until=self.to, limit=self.limit, cursor=self.cursor)
