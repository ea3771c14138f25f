"""Ids of the rows Bankrail creates: payouts, payments, ledger transactions, events,
deliveries, merchants and their accounts."""

from __future__ import annotations

import os
import time
import uuid

__all__ = ["new_id", "new_id_bytes"]

_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0x2 << 62
_CLEAR_VERSION_AND_VARIANT = ~((0xF << 76) | (0x3 << 62))


def new_id() -> uuid.UUID:
    """A new unique id: a version-7 UUID (RFC 9562), the creation time in milliseconds
    followed by 74 random bits.

    Ids made later sort after ids made earlier (to the millisecond), so a new row's index
    entries land on the few most recent pages of each index instead of a random page of it.
    With a million payouts stored, random (version-4) ids made every insert read and dirty a
    page from anywhere in several large indexes. The ids stay unguessable enough for
    uniqueness; access is checked against the caller, never implied by knowing an id.
    """
    # Python 3.14's uuid.uuid7() makes the same layout; this runs on 3.11.
    return uuid.UUID(int=_version_7(_milliseconds(), os.urandom(10)))


def new_id_bytes(count: int) -> list[bytes]:
    """`count` new ids, each as its UUID's 16 bytes, made as `new_id` makes one (all in the
    same millisecond): for a writer of many rows at once, one call to the system's random
    source for them all instead of one each."""
    milliseconds = _milliseconds()
    random = os.urandom(10 * count)
    return [
        _version_7(milliseconds, random[i : i + 10]).to_bytes(16, "big")
        for i in range(0, 10 * count, 10)
    ]


def _milliseconds() -> int:
    return (time.time_ns() // 1_000_000) & 0xFFFF_FFFF_FFFF


def _version_7(milliseconds: int, random: bytes) -> int:
    """The id of `milliseconds` and 10 `random` bytes, as an integer."""
    value = milliseconds << 80 | int.from_bytes(random, "big")
    return value & _CLEAR_VERSION_AND_VARIANT | _VERSION_7 | _VARIANT_RFC
