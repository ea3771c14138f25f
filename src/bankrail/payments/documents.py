"""The payment documents this process has rendered, kept as their JSON bytes by row version
for the pages of `GET /v3/payments` (docs/performance.md "A page of 50 payments").

A page's one statement (`queries.list_payments`) is told the documents held here of the
payments the same listing showed when it was last read (`held_for`, `listed`): of those still
at that version PostgreSQL sends only the id and version, and the page takes the document from
here; the others it reads whole, renders once and keeps (`put`), and the page splices the
bytes into its answer (`page_answer`). A version is what identifies the content
`render_row` reads: the payments row's `xmin` and its joined payment source's (`_store`
`DOCUMENT_VERSION`). Every UPDATE of a row writes a new version of it, stamped with the
writing transaction's id, so a payment (or source) that changed has a new version and its
old document is never served again; entries also expire after `max_age_seconds`, minutes,
while PostgreSQL's 32-bit transaction ids come round again only after four billion
transactions. Per process and bounded (entries and bytes), least recently used out first.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from bankrail.payments._store import document_key

__all__ = ["Held", "PaymentDocuments", "Version", "page_answer"]

Version = tuple[int, int | None]
"""A payment document's version: the `xmin` of its payments row and of its joined payment
source (None without one)."""


@dataclass(frozen=True, slots=True)
class Held:
    """The documents held of what a listing showed when it was last read: `keys` (as
    `document_key` names them) for its statement, and each document's bytes by payment id,
    taken when the statement was told of them: served for a row that comes back at that
    version, whatever the cache drops or replaces while the statement runs."""

    keys: list[str]
    documents: dict[uuid.UUID, bytes]


_NOTHING_HELD = Held([], {})


class PaymentDocuments:
    """Rendered payment documents by payment id, each with the version it was rendered from
    (served only for that version), at most `max_entries` of them and `max_bytes` of
    documents, each for at most `max_age_seconds`; and what the last `max_listings` listings
    read again showed (`max_listed` payments in all), and the last `max_first_reads` listings
    read once. One per process (app.py wires it into the context's services)."""

    def __init__(
        self,
        *,
        max_entries: int = 10_000,
        max_bytes: int = 16 * 1024 * 1024,
        max_age_seconds: float = 600.0,
        max_listings: int = 1_000,
        max_listed: int = 20_000,
        max_first_reads: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_age_seconds = max_age_seconds
        self.max_listings = max_listings
        self.max_listed = max_listed
        self.max_first_reads = max_first_reads
        self._clock = clock
        # payment id -> (version, document, when it was rendered); oldest used first.
        self._entries: OrderedDict[uuid.UUID, tuple[Version, bytes, float]] = OrderedDict()
        self._bytes = 0
        # A listing (merchant, filters, window) read more than once -> what it listed when
        # last read: each payment's id and version, and the same as `document_key` names them.
        self._listings: OrderedDict[Hashable, tuple[list[tuple[uuid.UUID, Version]], list[str]]]
        self._listings = OrderedDict()
        self._listed = 0  # payments in `_listings`
        # Listings read once: kept apart, so that a walk through the history (each page read
        # once) does not push out the listings read again and again.
        self._first_reads: OrderedDict[Hashable, None] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """The bytes of the documents held."""
        return self._bytes

    @property
    def listings(self) -> int:
        """The listings whose last read is remembered (read more than once)."""
        return len(self._listings)

    def get(self, payment_id: uuid.UUID, version: Version) -> bytes | None:
        """The document of this payment at this version, if held and not too old."""
        entry = self._entries.get(payment_id)
        if entry is None or entry[0] != version or self._clock() - entry[2] > self.max_age_seconds:
            self.misses += 1
            return None
        self._entries.move_to_end(payment_id)
        self.hits += 1
        return entry[1]

    def first_read(self, page: Hashable) -> bool:
        """Whether `page` (a listing's merchant, filters and window) is read for the first
        time now, as far as this process remembers; it is remembered as read from now on."""
        if page in self._listings:
            return False
        if page in self._first_reads:
            del self._first_reads[page]
            self._remember(page, [], [])
            return False
        self._first_reads[page] = None
        if len(self._first_reads) > self.max_first_reads:
            self._first_reads.popitem(last=False)
        return True

    def held_for(self, page: Hashable) -> Held:
        """The documents held, at the version they were listed at, of the payments `page`
        listed when it was last read: what that page's statement need not read again."""
        listed = self._listings.get(page)
        if listed is None:
            return _NOTHING_HELD
        self._listings.move_to_end(page)
        oldest = self._clock() - self.max_age_seconds
        entries = self._entries
        held = Held([], {})
        for (payment_id, version), key in zip(listed[0], listed[1], strict=True):
            entry = entries.get(payment_id)
            if entry is not None and entry[0] == version and entry[2] >= oldest:
                held.keys.append(key)
                held.documents[payment_id] = entry[1]
        return held

    def served(self, payment_id: uuid.UUID, held: Held) -> bytes:
        """The document `held` vouched for, served for a row that came back held (at the
        version vouched for)."""
        self.hits += 1
        entry = self._entries.get(payment_id)
        if entry is not None:
            self._entries.move_to_end(payment_id)
        return held.documents[payment_id]

    def listed(self, page: Hashable, payments: list[tuple[uuid.UUID, Version]]) -> None:
        """Remember what `page` listed now, read again: each payment's id and version (the
        keys named again only when the listing changed: a page read again lists the same)."""
        before = self._listings.get(page)
        if before is not None and before[0] == payments:
            self._listings.move_to_end(page)
            return
        keys = [document_key(payment_id, *version) for payment_id, version in payments]
        self._remember(page, payments, keys)

    def _remember(
        self, page: Hashable, payments: list[tuple[uuid.UUID, Version]], keys: list[str]
    ) -> None:
        before = self._listings.pop(page, None)
        if before is not None:
            self._listed -= len(before[0])
        self._listings[page] = (payments, keys)
        self._listed += len(payments)
        while len(self._listings) > self.max_listings or self._listed > self.max_listed:
            _, (dropped, _) = self._listings.popitem(last=False)
            self._listed -= len(dropped)

    def put(self, payment_id: uuid.UUID, version: Version, document: bytes) -> None:
        """Keep the document of this payment at this version (in place of any other version
        of it), then drop the least recently used while over a bound."""
        old = self._entries.pop(payment_id, None)
        if old is not None:
            self._bytes -= len(old[1])
        if len(document) > self.max_bytes:
            return
        self._entries[payment_id] = (version, document, self._clock())
        self._bytes += len(document)
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            _, (_, dropped, _) = self._entries.popitem(last=False)
            self._bytes -= len(dropped)


def page_answer(items: Sequence[bytes], next_cursor: str | None) -> dict[str, Any]:
    """The page's answer for `json_response`: the documents spliced as they are (the bytes
    `dumps` gives for the same items as values) and the pagination."""
    return {
        "items": orjson.Fragment(b"[" + b",".join(items) + b"]"),
        "pagination": {"next_cursor": next_cursor},
    }
