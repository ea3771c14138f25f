"""The payment documents a process keeps for the pages of `GET /v3/payments`
(bankrail.payments.documents, docs/performance.md "A page of 50 payments").

Promise: a document is served only for the payment and version it was rendered from, and
not after `max_age_seconds`; at most `max_entries` entries and `max_bytes` of documents are
held, the least recently used dropped first; a page spliced from kept documents is the bytes
`dumps` gives for the same items as values.
"""

from __future__ import annotations

import uuid

import orjson

from bankrail.core.jsonbody import dumps
from bankrail.payments.documents import PaymentDocuments, page_answer


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _ids(count: int) -> list[uuid.UUID]:
    return [uuid.uuid4() for _ in range(count)]


def test_a_document_is_served_for_its_payment_and_version_only() -> None:
    documents = PaymentDocuments()
    first, second = _ids(2)
    documents.put(first, (10, None), b'{"id":"a"}')
    assert documents.get(first, (10, None)) == b'{"id":"a"}'
    assert documents.get(first, (11, None)) is None  # the payment changed
    assert documents.get(first, (10, 7)) is None  # its source joined or changed
    assert documents.get(second, (10, None)) is None  # another payment
    assert (documents.hits, documents.misses) == (1, 3)


def test_a_new_version_replaces_the_old_one() -> None:
    documents = PaymentDocuments()
    (payment,) = _ids(1)
    documents.put(payment, (10, None), b"old document")
    documents.put(payment, (12, 3), b"new")
    assert documents.get(payment, (10, None)) is None
    assert documents.get(payment, (12, 3)) == b"new"
    assert (len(documents), documents.size) == (1, 3)


def test_a_document_is_not_served_past_its_age() -> None:
    clock = _Clock()
    documents = PaymentDocuments(max_age_seconds=600, clock=clock)
    (payment,) = _ids(1)
    documents.put(payment, (10, None), b"{}")
    clock.now += 600
    assert documents.get(payment, (10, None)) == b"{}"
    clock.now += 0.001
    assert documents.get(payment, (10, None)) is None
    documents.put(payment, (10, None), b"{}")  # rendered again: young again
    assert documents.get(payment, (10, None)) == b"{}"


def test_the_least_recently_used_goes_first_past_the_entries_bound() -> None:
    documents = PaymentDocuments(max_entries=3)
    a, b, c, d = _ids(4)
    for payment in (a, b, c):
        documents.put(payment, (1, None), b"{}")
    assert documents.get(a, (1, None)) is not None  # a is now the most recently used
    documents.put(d, (1, None), b"{}")
    assert len(documents) == 3
    assert documents.get(b, (1, None)) is None
    assert all(documents.get(payment, (1, None)) for payment in (a, c, d))


def test_the_bytes_bound_holds() -> None:
    documents = PaymentDocuments(max_bytes=100)
    payments = _ids(5)
    for payment in payments:
        documents.put(payment, (1, None), b"x" * 30)
    assert documents.size == 90
    assert len(documents) == 3
    assert [documents.get(p, (1, None)) is not None for p in payments] == [False, False] + [
        True
    ] * 3
    huge = uuid.uuid4()
    documents.put(huge, (1, None), b"x" * 101)  # never held, and drops nothing
    assert documents.get(huge, (1, None)) is None
    assert (len(documents), documents.size) == (3, 90)


def test_a_spliced_page_is_the_bytes_of_its_items_as_values() -> None:
    items = [{"id": "a", "metadata": {"k": "v, w: x"}}, {"id": "b", "amount_in_minor": 1}]
    for next_cursor in (None, "Y3Vyc29y"):
        spliced = dumps(page_answer([dumps(item) for item in items], next_cursor))
        assert spliced == dumps({"items": items, "pagination": {"next_cursor": next_cursor}})
    assert orjson.loads(dumps(page_answer([], None))) == {
        "items": [],
        "pagination": {"next_cursor": None},
    }


def test_held_names_only_what_is_kept_at_the_version_listed_and_not_too_old() -> None:
    clock = _Clock()
    documents = PaymentDocuments(clock=clock, max_age_seconds=60)
    kept, changed, aged, gone = _ids(4)
    page = ("merchant", "first page")
    assert documents.first_read(page)
    assert not documents.first_read(page)  # read again: its listing is remembered
    for payment in (kept, changed, aged):
        documents.put(payment, (10, None), b"{}")
    documents.listed(page, [(p, (10, None)) for p in (kept, changed, aged, gone)])
    documents.put(changed, (11, None), b"{}")  # rendered again by another listing
    clock.now += 61
    documents.put(kept, (10, None), b'{"kept":1}')  # rendered again: young again
    held = documents.held_for(page)
    assert held.keys == [f"{kept}:10:"]
    assert held.documents == {kept: b'{"kept":1}'}
    assert documents.held_for(("merchant", "another page")).keys == []


def test_a_listing_read_again_names_its_keys_once_and_listings_are_bounded() -> None:
    documents = PaymentDocuments(max_listings=3, max_listed=5)
    payments = [(payment, (1, None)) for payment in _ids(2)]
    documents.listed("a", payments)
    named = documents._listings["a"][1]
    assert named == [f"{p}:1:" for p, _ in payments]
    documents.listed("a", list(payments))  # the same listing: its keys are not named again
    assert documents._listings["a"][1] is named
    assert documents.held_for("a").keys == []  # nothing kept yet
    documents.listed("b", payments)
    documents.listed("c", payments[:1])
    assert documents.listings == 3
    documents.listed("d", payments[:1])  # over three listings: "a" goes
    assert "a" not in documents._listings
    documents.listed("e", payments)  # over five payments listed in all: "b" goes
    assert sorted(documents._listings) == ["c", "d", "e"]


def test_listings_read_once_do_not_push_out_those_read_again() -> None:
    documents = PaymentDocuments(max_listings=2, max_first_reads=3)
    for page in ("hot", "hot"):
        documents.first_read(page)
    documents.listed("hot", [])
    for n in range(10):  # a walk through the history: each page read once
        assert documents.first_read(("walk", n))
    assert documents.listings == 1
    assert not documents.first_read("hot")
    assert documents.first_read(("walk", 0))  # forgotten: only the last three are remembered
