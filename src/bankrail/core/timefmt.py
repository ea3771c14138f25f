"""Rendering of timestamps as the spec writes them: ISO 8601, UTC, suffix Z."""

from __future__ import annotations

from datetime import UTC, datetime


def iso_utc(moment: datetime) -> str:
    """ISO 8601 in UTC with microseconds and `Z`, e.g. `2026-01-02T03:04:05.123456Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def iso_utc_7(moment: datetime) -> str:
    """The v1 transaction format: seven fractional digits and `Z` (spec 2.3)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z"


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
        while rest and rest[0].isdigit():
            digits += rest[0]
            rest = rest[1:]
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest}"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)
