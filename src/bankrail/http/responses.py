"""JSON answers whose bodies are exactly the deterministic encoding of core.jsonbody."""

from __future__ import annotations

from typing import Any

from fastapi import Response

from bankrail.core.jsonbody import JSON_MEDIA_TYPE, PROBLEM_MEDIA_TYPE, dumps
from bankrail.security.idempotency import ReplayedAnswer

__all__ = ["ReplayedResponse", "answer_response", "json_response"]


class ReplayedResponse(Response):
    """An answer stored under an Idempotency-Key, sent again to a repeat of its request
    (the request log marks its entry `replayed`); on the wire the same as any answer."""


def json_response(status: int, value: Any, headers: dict[str, str] | None = None) -> Response:
    """A JSON response whose body is exactly `dumps(value)`."""
    return Response(dumps(value), status_code=status, media_type=JSON_MEDIA_TYPE, headers=headers)


def answer_response(status: int, body: bytes) -> Response:
    """An answer already encoded (as stored under an Idempotency-Key): problem+json for a
    4xx or 5xx, JSON otherwise."""
    media_type = PROBLEM_MEDIA_TYPE if status >= 400 else JSON_MEDIA_TYPE
    if isinstance(body, ReplayedAnswer):
        return ReplayedResponse(body, status_code=status, media_type=media_type)
    return Response(body, status_code=status, media_type=media_type)
