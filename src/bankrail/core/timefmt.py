"""Rendering of timestamps as the spec writes them: ISO 8601, UTC, suffix Z."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import PlainValidator, WithJsonSchema


def _iso_microseconds(moment: datetime) -> str:
    # isoformat is about half the cost of strftime, and every answer renders several
    # timestamps (a GET of a payout up to four); in UTC it always ends in "+00:00".
    if moment.tzinfo is not UTC:
        moment = moment.astimezone(UTC)
    return moment.isoformat(timespec="microseconds")[:-6]


def iso_utc(moment: datetime) -> str:
    """ISO 8601 in UTC with microseconds and `Z`, e.g. `2026-01-02T03:04:05.123456Z`."""
    return _iso_microseconds(moment) + "Z"


def iso_utc_7(moment: datetime) -> str:
    """The v1 transaction format: seven fractional digits and `Z` (spec 2.3)."""
    return _iso_microseconds(moment) + "0Z"


def parse_timestamp(raw: str) -> datetime:
    """Parse an ISO 8601 timestamp; naive values are taken as UTC.

    Accepts `Z`, offsets, and up to 9 fractional digits (extra digits beyond microseconds
    are dropped).
    """
    text = raw.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    if "." in text:
        head, _, rest = text.partition(".")
        digits = ""
        while rest and "0" <= rest[0] <= "9":
            digits += rest[0]
            rest = rest[1:]
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest}"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


# ASCII digits only: \d would match any script's, which fromisoformat then refuses.
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def parse_rfc3339(value: Any) -> datetime:
    """An RFC 3339 date-time with its offset (`2026-01-02T03:04:05Z`), in UTC.

    Raises ValueError for anything else: numbers, dates without a time, times without an
    offset, and instants outside the years 1 to 9999 once moved to UTC.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("must include a UTC offset")
        return value.astimezone(UTC)
    if not isinstance(value, str) or not _RFC3339.fullmatch(value.strip()):
        raise ValueError("must be an RFC 3339 date-time with an offset, e.g. 2026-01-02T03:04:05Z")
    try:
        return parse_timestamp(value)
    except (ValueError, OverflowError) as exc:
        raise ValueError("must be a valid date-time between the years 1 and 9999") from exc


Timestamp = Annotated[
    datetime,
    PlainValidator(parse_rfc3339),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A request field or query parameter holding an RFC 3339 date-time (see parse_rfc3339)."""
