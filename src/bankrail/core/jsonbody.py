"""Deterministic JSON encoding, used for every API body and for idempotent replays."""

from __future__ import annotations

from typing import Any

import orjson

JSON_MEDIA_TYPE = "application/json"
PROBLEM_MEDIA_TYPE = "application/problem+json"


def dumps(value: Any) -> bytes:
    """Encode a value as compact UTF-8 JSON (datetimes and UUIDs as strings)."""
    return orjson.dumps(value)


def loads(raw: bytes | str) -> Any:
    """Decode JSON bytes."""
    return orjson.loads(raw)
