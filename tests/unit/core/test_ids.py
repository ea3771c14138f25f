"""Entity ids: version-7 UUIDs, ordered by creation time."""

from __future__ import annotations

import time
import uuid

from bankrail.core.ids import new_id, new_id_bytes


def test_an_id_is_a_version_7_rfc_uuid() -> None:
    made = new_id()
    assert made.version == 7
    assert made.variant == uuid.RFC_4122
    assert uuid.UUID(str(made)) == made


def test_an_id_carries_its_creation_time_in_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    made = new_id()
    after = time.time_ns() // 1_000_000
    assert before <= made.int >> 80 <= after


def _made_then_next_millisecond() -> uuid.UUID:
    """A new id, returned once its millisecond has passed (by the clock, not a sleep)."""
    first = new_id()
    while time.time_ns() // 1_000_000 == first.int >> 80:
        pass
    return first


def test_ids_made_in_a_later_millisecond_sort_after_earlier_ones() -> None:
    first = _made_then_next_millisecond()
    later = new_id()
    assert str(first) < str(later)
    assert first < later


def test_ids_made_in_the_same_millisecond_still_differ() -> None:
    made = [new_id() for _ in range(10_000)]
    assert len(set(made)) == len(made)


def test_ids_made_together_are_version_7_ids_of_now_and_all_differ() -> None:
    before = time.time_ns() // 1_000_000
    made = [uuid.UUID(bytes=raw) for raw in new_id_bytes(10_000)]
    after = time.time_ns() // 1_000_000
    assert len(set(made)) == len(made) == 10_000
    for one in made:
        assert one.version == 7
        assert one.variant == uuid.RFC_4122
        assert before <= one.int >> 80 <= after


def test_ids_made_together_sort_after_an_id_made_in_an_earlier_millisecond() -> None:
    first = _made_then_next_millisecond()
    assert all(first < uuid.UUID(bytes=raw) for raw in new_id_bytes(100))
    assert new_id_bytes(0) == []
