"""JSON answers whose bodies are exactly the deterministic encoding of core.jsonbody."""

from __future__ import annotations

from typing import Any

from fastapi import Response

from bankrail.core.jsonbody import JSON_MEDIA_TYPE, PROBLEM_MEDIA_TYPE, dumps

__all__ = ["answer_response", "json_response"]


def json_response(status: int, value: Any, headers: dict[str, str] | None = None) -> Response:
    """A JSON response whose body is exactly `dumps(value)`."""
    return Response(dumps(value), status_code=status, media_type=JSON_MEDIA_TYPE, headers=headers)


def answer_response(status: int, body: bytes) -> Response:
    """An answer already encoded (as stored under an Idempotency-Key): problem+json for a
    4xx or 5xx, JSON otherwise."""
    media_type = PROBLEM_MEDIA_TYPE if status >= 400 else JSON_MEDIA_TYPE
    return Response(body, status_code=status, media_type=media_type)
