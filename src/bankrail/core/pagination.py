"""Opaque keyset cursors, (timestamp, id) positions, and the page window of the
newest-first listings."""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bankrail.core.problems import invalid_field
from bankrail.core.timefmt import parse_rfc3339


def encode_cursor(moment: datetime, item_id: uuid.UUID) -> str:
    """A cursor pointing just after this (time, id) position."""
    raw = f"{moment.isoformat()}|{item_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, field: str = "cursor") -> tuple[datetime, uuid.UUID]:
    """The (time, id) position of a cursor, the time in UTC; 400 when it is not one of ours,
    including a forged one whose time, moved to UTC, falls outside the years 1 to 9999 (the
    database could not be asked about it)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment_text, _, id_text = raw.partition("|")
        return parse_rfc3339(moment_text), uuid.UUID(id_text)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise invalid_field(field, "not a valid cursor") from exc


@dataclass(frozen=True)
class Window:
    """What a newest-first listing asks for: an inclusive `created_at` range, a page size, and
    the cursor of the page before (None for the first page)."""

    since: datetime | None
    until: datetime | None
    limit: int
    cursor: str | None

    def after(self) -> tuple[datetime | None, uuid.UUID | None]:
        """The (time, id) position the page starts below; (None, None) for the first page."""
        return decode_cursor(self.cursor) if self.cursor else (None, None)


def newest_first_page(rows: Sequence[Any], limit: int) -> tuple[Sequence[Any], str | None]:
    """The first `limit` of `rows` (fetched newest first, `limit + 1` of them) and the cursor
    of the next page, None on the last page. Rows have `created_at` and `id`."""
    if len(rows) <= limit:
        return rows, None
    page = rows[:limit]
    return page, encode_cursor(page[-1]["created_at"], page[-1]["id"])
