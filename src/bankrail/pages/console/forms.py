"""Reading and checking what people type into the console's forms and filters.

Each parser raises `FieldError` naming the form field, so the page can be shown again with
the message next to that field (status 400).
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation

from bankrail.core.money import CURRENCY_EXPONENTS, MAX_AMOUNT_IN_MINOR
from bankrail.core.timefmt import parse_timestamp
from bankrail.core.urls import is_absolute_http_uri

MAX_URI_LENGTH = 2000
MAX_KID_LENGTH = 200
MAX_PEM_LENGTH = 10_000
MAX_NAME_LENGTH = 200
MAX_CLOCK_SECONDS = 10 * 365 * 86400
CLOCK_UNITS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}


class FieldError(Exception):
    """One form field is invalid."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def parse_uuid(raw: str | None, field: str) -> uuid.UUID | None:
    """An optional UUID."""
    if raw is None or not raw.strip():
        return None
    try:
        return uuid.UUID(raw.strip())
    except ValueError as exc:
        raise FieldError(field, "must be an identifier (UUID)") from exc


def parse_day_or_time(raw: str | None, field: str, *, end_of_day: bool) -> datetime | None:
    """A date (`YYYY-MM-DD`, UTC; the day after when `end_of_day`) or an ISO 8601 time."""
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    try:
        if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
            day = date.fromisoformat(text)
            moment = datetime.combine(day, time(0), tzinfo=UTC)
            return moment + timedelta(days=1) if end_of_day else moment
        return parse_timestamp(text)
    except ValueError as exc:
        raise FieldError(field, "must be a date such as 2026-01-31") from exc


def parse_choice(raw: str | None, field: str, choices: list[str] | tuple[str, ...]) -> str | None:
    """An optional value out of a fixed list."""
    if raw is None or not raw.strip():
        return None
    if raw.strip() not in choices:
        raise FieldError(field, "must be one of " + ", ".join(choices))
    return raw.strip()


def parse_amount(raw: str | None, field: str, currency: str, *, allow_zero: bool = False) -> int:
    """An amount in major units (`1234.56`, commas allowed) as integer minor units."""
    exponent = CURRENCY_EXPONENTS.get(currency, 2)
    text = (raw or "").strip().replace(",", "").replace(" ", "")
    if not text:
        raise FieldError(field, "enter an amount")
    pattern = r"[0-9]{1,19}" + (rf"(\.[0-9]{{1,{exponent}}})?" if exponent else "")
    if not re.fullmatch(pattern, text):
        places = f"at most {exponent} decimal places" if exponent else "no decimal places"
        raise FieldError(field, f"must be a positive amount in {currency} with {places}")
    try:
        minor = int(Decimal(text).scaleb(exponent))
    except InvalidOperation as exc:  # pragma: no cover - the pattern rules it out
        raise FieldError(field, "is not a number") from exc
    if minor > MAX_AMOUNT_IN_MINOR:
        raise FieldError(field, "is too large")
    if minor == 0 and not allow_zero:
        raise FieldError(field, "must be more than zero")
    return minor


def check_webhook_uri(field: str, raw: str) -> str | None:
    """An absolute http(s) URI, or None for an empty field (the production policy is
    `bankrail.events.destinations`)."""
    uri = raw.strip()
    if not uri:
        return None
    if len(uri) > MAX_URI_LENGTH:
        raise FieldError(field, f"must be at most {MAX_URI_LENGTH} characters")
    if not is_absolute_http_uri(uri):
        raise FieldError(
            field, "must be an absolute http(s) URI, such as https://example.com/hooks"
        )
    return uri


def parse_clock_advance(raw_amount: str | None, raw_unit: str | None) -> float:
    """How many seconds to move the service clock."""
    unit = parse_choice(raw_unit or "seconds", "unit", tuple(CLOCK_UNITS)) or "seconds"
    text = (raw_amount or "").strip()
    if not re.fullmatch(r"[0-9]{1,12}(\.[0-9]{1,6})?", text):
        raise FieldError("amount", "must be a number of at least 0")
    seconds = float(Decimal(text) * CLOCK_UNITS[unit])
    if seconds > MAX_CLOCK_SECONDS:
        raise FieldError("amount", "must be at most ten years")
    return seconds


def parse_text(raw: str | None, field: str, *, required: bool, max_length: int) -> str | None:
    """A trimmed line of text."""
    text = (raw or "").strip()
    if not text:
        if required:
            raise FieldError(field, "is required")
        return None
    if len(text) > max_length:
        raise FieldError(field, f"must be at most {max_length} characters")
    return text
