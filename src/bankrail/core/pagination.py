"""Opaque keyset cursors: (timestamp, id) pairs, ordered ascending."""

from __future__ import annotations

import base64
import binascii
import uuid
from datetime import datetime

from bankrail.core.problems import invalid_field


def encode_cursor(moment: datetime, item_id: uuid.UUID) -> str:
    """A cursor pointing just after this (time, id) position."""
    raw = f"{moment.isoformat()}|{item_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, field: str = "cursor") -> tuple[datetime, uuid.UUID]:
    """The (time, id) position of a cursor; 400 when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment_text, _, id_text = raw.partition("|")
        moment = datetime.fromisoformat(moment_text)
        if moment.tzinfo is None:
            raise ValueError("naive")
        return moment, uuid.UUID(id_text)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise invalid_field(field, "not a valid cursor") from exc
