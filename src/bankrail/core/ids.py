"""Ids of the rows Bankrail creates: payouts, payments, ledger transactions, events,
deliveries, merchants and their accounts."""

from __future__ import annotations

import os
import time
import uuid

__all__ = ["new_id"]

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
    milliseconds = time.time_ns() // 1_000_000
    value = (milliseconds & 0xFFFF_FFFF_FFFF) << 80 | int.from_bytes(os.urandom(10), "big")
    return uuid.UUID(int=value & _CLEAR_VERSION_AND_VARIANT | _VERSION_7 | _VARIANT_RFC)
