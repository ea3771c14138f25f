"""Unit tests for bankrail.core.pagination: opaque keyset cursors."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bankrail.core.pagination import decode_cursor, encode_cursor
from bankrail.core.problems import ProblemError


def test_round_trip() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    item = uuid.uuid4()
    assert decode_cursor(encode_cursor(moment, item)) == (moment, item)


def test_round_trip_keeps_the_instant_of_other_offsets() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-3)))
    decoded, _ = decode_cursor(encode_cursor(moment, uuid.uuid4()))
    assert decoded == moment


def test_cursor_is_url_safe_and_unpadded() -> None:
    cursor = encode_cursor(datetime(2026, 1, 2, tzinfo=UTC), uuid.uuid4())
    assert "=" not in cursor
    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


@given(
    moment=st.datetimes(timezones=st.just(UTC), min_value=datetime(1970, 1, 1)),
    item=st.uuids(),
)
def test_round_trip_property(moment: datetime, item: uuid.UUID) -> None:
    assert decode_cursor(encode_cursor(moment, item)) == (moment, item)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "!!!",
        "not a cursor",
        "é",
        _b64(b"\xff\xfe\xfd"),
        _b64(b"2026-01-02T00:00:00+00:00"),  # no id
        _b64(b"2026-01-02T00:00:00+00:00|not-a-uuid"),
        _b64(b"garbage|" + str(uuid.uuid4()).encode()),
        _b64(b"2026-01-02T00:00:00|" + str(uuid.uuid4()).encode()),  # naive time
        # Valid text whose instant, moved to UTC, is outside the years 1 to 9999.
        _b64(b"9999-12-31T23:59:59-14:00|" + str(uuid.uuid4()).encode()),
        _b64(b"0001-01-01T00:00:00+14:00|" + str(uuid.uuid4()).encode()),
    ],
)
def test_garbage_cursor_is_a_400_problem(cursor: str) -> None:
    with pytest.raises(ProblemError) as caught:
        decode_cursor(cursor)
    assert caught.value.problem.status == 400
    assert caught.value.errors == {"cursor": ["not a valid cursor"]}


def test_field_name_is_reported() -> None:
    with pytest.raises(ProblemError) as caught:
        decode_cursor("!!!", field="next_cursor")
    assert caught.value.errors is not None
    assert "next_cursor" in caught.value.errors


@given(st.text(max_size=80))
def test_any_text_decodes_or_is_a_400(cursor: str) -> None:
    outcome: datetime | int
    try:
        outcome, _ = decode_cursor(cursor)
    except ProblemError as problem:
        outcome = problem.problem.status
    if isinstance(outcome, datetime):
        assert outcome.tzinfo is not None
    else:
        assert outcome == 400
