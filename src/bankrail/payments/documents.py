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
from typing import Any

import orjson

from bankrail.payments._store import document_key

__all__ = ["PaymentDocuments", "Version", "page_answer"]

Version = tuple[int, int | None]
"""A payment document's version: the `xmin` of its payments row and of its joined payment
source (None without one)."""


class PaymentDocuments:
    """Rendered payment documents by payment id, each with the version it was rendered from
    (served only for that version), at most `max_entries` of them and `max_bytes` of
    documents, each for at most `max_age_seconds`. One per process (app.py wires it into the
    context's services); an event loop's requests use it without awaiting in between."""

    def __init__(
        self,
        *,
        max_entries: int = 10_000,
        max_bytes: int = 16 * 1024 * 1024,
        max_age_seconds: float = 600.0,
        max_pages: int = 1_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_age_seconds = max_age_seconds
        self._clock = clock
        # payment id -> (version, document, when it was rendered); oldest used first.
        self._entries: OrderedDict[uuid.UUID, tuple[Version, bytes, float]] = OrderedDict()
        self._bytes = 0
        # A listing (merchant, filters, window) -> what it listed when last read: each
        # payment's id and version, and the same as `document_key` names them.
        self._pages: OrderedDict[Hashable, tuple[list[tuple[uuid.UUID, Version]], list[str]]] = (
            OrderedDict()
        )
        self.max_pages = max_pages
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """The bytes of the documents held."""
        return self._bytes

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
        if page in self._pages:
            return False
        self._remember(page, ([], []))
        return True

    def held_for(self, page: Hashable) -> list[str]:
        """The documents held, at the version they were listed at, of the payments `page`
        (a listing's merchant, filters and window) listed when it was last read, each as
        `document_key` names it: what that page's statement need not read again."""
        listed = self._pages.get(page)
        if listed is None:
            return []
        self._pages.move_to_end(page)
        oldest = self._clock() - self.max_age_seconds
        entries = self._entries
        held = []
        for (payment_id, version), key in zip(listed[0], listed[1], strict=True):
            entry = entries.get(payment_id)
            if entry is not None and entry[0] == version and entry[2] >= oldest:
                held.append(key)
        return held

    def listed(self, page: Hashable, payments: list[tuple[uuid.UUID, Version]]) -> None:
        """Remember what `page` listed now: each payment's id and version (the keys named
        again only when the listing changed: a page read again lists the same)."""
        before = self._pages.get(page)
        if before is not None and before[0] == payments:
            self._pages.move_to_end(page)
            return
        keys = [document_key(payment_id, *version) for payment_id, version in payments]
        self._remember(page, (payments, keys))

    def _remember(
        self, page: Hashable, listed: tuple[list[tuple[uuid.UUID, Version]], list[str]]
    ) -> None:
        self._pages[page] = listed
        self._pages.move_to_end(page)
        while len(self._pages) > self.max_pages:
            self._pages.popitem(last=False)

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
