"""A page of `GET /v3/payments` read through the documents the process keeps
(`payments.queries.list_payments`, `payments.documents.PaymentDocuments`) on real PostgreSQL.

Promise: each listed item is the bytes of the payment's document as `get_payment_document`
reads it now, whether it was kept or rendered: a payment changed since the page before
(its row, or only its joined payment source) is rendered again, an unchanged one is served
from what was kept; the cursor pages through every payment once, newest first; another
merchant's page lists none of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import orjson

from bankrail.core.clock import ServiceClock
from bankrail.core.jsonbody import dumps
from bankrail.core.pagination import Window
from bankrail.merchants.models import AccountIdentifiers, MerchantAccount
from bankrail.payments._store import (
    HELD_DOCUMENT_SELECT,
    get_payment_document,
    lock_payment,
    save,
    state_of,
)
from bankrail.payments.creation import NewPayment, PaymentCreation, PaymentToCreate
from bankrail.payments.documents import Held, PaymentDocuments
from bankrail.payments.queries import list_payments, payment_rows
from bankrail.payments.schemas import PaymentRequest
from bankrail.payments.sources import record_payment_source
from bankrail.security.idempotency import KeyedRequest
from support.accounts import funded_account
from support.payouts import render_problem


def _respond(payment: NewPayment) -> tuple[int, Any]:
    return 201, {"id": str(payment.id)}


async def _new_payments(
    pool: asyncpg.Pool, account: MerchantAccount, now: datetime, count: int
) -> list[uuid.UUID]:
    """`count` payments into the account, the newest last."""
    ids = []
    for n in range(count):
        body = {
            "amount_in_minor": 100 + n,
            "currency": "GBP",
            "payment_method": {
                "type": "bank_transfer",
                "provider_selection": {"type": "user_selected"},
                "beneficiary": {
                    "type": "merchant_account",
                    "merchant_account_id": str(account.id),
                },
            },
            "user": {"id": "payer-1", "name": "Payer One"},
            "metadata": {"order": f"A-{n}"},
        }
        request = PaymentToCreate(
            PaymentRequest.model_validate(body),
            account.merchant_id,
            now + timedelta(seconds=n),
            _respond,
            KeyedRequest("v3:test", str(uuid.uuid4()), orjson.dumps(body), timedelta(hours=6)),
        )
        _status, answer = await PaymentCreation(pool, render_problem).accept(request)
        ids.append(uuid.UUID(orjson.loads(answer)["id"]))
    return ids


async def _page(
    pool: asyncpg.Pool,
    merchant_id: uuid.UUID,
    documents: PaymentDocuments,
    limit: int,
    cursor: str | None = None,
) -> tuple[list[bytes], str | None]:
    async with pool.acquire() as conn:
        return await list_payments(conn, merchant_id, Window(None, None, limit, cursor), documents)


async def _document(pool: asyncpg.Pool, payment_id: uuid.UUID, merchant_id: uuid.UUID) -> bytes:
    async with pool.acquire() as conn:
        return dumps(await get_payment_document(conn, payment_id, merchant_id))


async def _every_page(
    pool: asyncpg.Pool, merchant_id: uuid.UUID, documents: PaymentDocuments, limit: int
) -> list[bytes]:
    items: list[bytes] = []
    cursor = None
    for _ in range(20):
        page, cursor = await _page(pool, merchant_id, documents, limit, cursor)
        assert len(page) <= limit
        items += page
        if cursor is None:
            return items
    raise AssertionError("the listing never reached its last page")


async def _as_read_now(
    pool: asyncpg.Pool, merchant_id: uuid.UUID, items: list[bytes]
) -> list[bytes]:
    return [
        await _document(pool, uuid.UUID(orjson.loads(item)["id"]), merchant_id) for item in items
    ]


async def test_a_changed_payment_is_rendered_again_and_the_others_are_kept(
    pool: asyncpg.Pool,
) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now)
    merchant_id = account.merchant_id
    created = await _new_payments(pool, account, now, 5)
    documents = PaymentDocuments()

    first = await _every_page(pool, merchant_id, documents, 2)
    assert [uuid.UUID(orjson.loads(item)["id"]) for item in first] == created[::-1]
    assert first == await _as_read_now(pool, merchant_id, first)
    # A listing read once keeps nothing (a walk through the history reads each page once).
    assert (documents.hits, documents.misses, len(documents)) == (0, 0, 0)

    second = await _every_page(pool, merchant_id, documents, 2)
    assert second == first
    assert (documents.hits, documents.misses, len(documents)) == (0, 5, 5)

    again = await _every_page(pool, merchant_id, documents, 2)
    assert again == first
    assert (documents.hits, documents.misses) == (5, 5)

    changed = created[2]
    async with pool.acquire() as conn, conn.transaction():
        row = await lock_payment(conn, changed)
        await save(conn, row, state_of(row).start_authorization(), now)

    after = await _every_page(pool, merchant_id, documents, 2)
    assert after == await _as_read_now(pool, merchant_id, after)
    statuses = {orjson.loads(item)["id"]: orjson.loads(item)["status"] for item in after}
    assert statuses[str(changed)] == "authorizing"
    assert after != first
    assert [a == b for a, b in zip(after, first, strict=True)] == [
        payment != changed for payment in created[::-1]
    ]
    assert (documents.hits, documents.misses) == (9, 6)


async def test_a_renamed_payment_source_renews_the_documents_that_show_it(
    pool: asyncpg.Pool,
) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now)
    merchant_id = account.merchant_id
    (payment_id,) = await _new_payments(pool, account, now, 1)
    identifiers = AccountIdentifiers("", "040004", "12345678")

    async def settle_from(holder: str) -> None:
        async with pool.acquire() as conn, conn.transaction():
            source = await record_payment_source(
                conn,
                merchant_id=merchant_id,
                merchant_account_id=account.id,
                user_id="payer-1",
                account_holder_name=holder,
                identifiers=identifiers,
                payment_id=payment_id,
                now=now,
            )
            await conn.execute(
                "UPDATE payments SET payment_source_id = $1 WHERE id = $2 AND"
                " payment_source_id IS DISTINCT FROM $1",
                source.id,
                payment_id,
            )

    documents = PaymentDocuments()
    await settle_from("Payer One")
    await _page(pool, merchant_id, documents, 50)
    (before,), _ = await _page(pool, merchant_id, documents, 50)  # kept from this read on
    assert orjson.loads(before)["payment_source"]["account_holder_name"] == "Payer One"
    assert len(documents.held_for(_FIRST_PAGE(merchant_id)).keys) == 1
    async with pool.acquire() as conn:
        version = await conn.fetchval("SELECT xmin::text FROM payments WHERE id = $1", payment_id)

    # A later settlement from the same account writes the holder's name on the source alone.
    await settle_from("P. One")
    async with pool.acquire() as conn:
        assert version == await conn.fetchval(
            "SELECT xmin::text FROM payments WHERE id = $1", payment_id
        )
    (after,), _ = await _page(pool, merchant_id, documents, 50)
    assert orjson.loads(after)["payment_source"]["account_holder_name"] == "P. One"
    assert after == await _document(pool, payment_id, merchant_id)


async def test_another_merchants_page_lists_none_of_the_kept_documents(
    pool: asyncpg.Pool,
) -> None:
    """Even told that every document of another merchant's page is held, a merchant's page
    lists none of them: the statement reads the merchant's own payments only."""
    now = ServiceClock().now()
    mine = await funded_account(pool, now)
    theirs = await funded_account(pool, now)
    await _new_payments(pool, mine, now, 3)
    documents = PaymentDocuments()
    await _page(pool, mine.merchant_id, documents, 50)
    assert len((await _page(pool, mine.merchant_id, documents, 50))[0]) == 3
    held = documents.held_for(_FIRST_PAGE(mine.merchant_id))
    assert len(held.keys) == 3
    hits = documents.hits

    told = _Told(held)
    assert await _page(pool, theirs.merchant_id, told, 50) == ([], None)
    assert told.hits == 0
    assert documents.hits == hits


async def test_postgresql_sends_only_ids_and_versions_of_the_documents_held(
    pool: asyncpg.Pool,
) -> None:
    """A page read again is one statement that reads whole only the payments not held at
    their version: the held ones come back as id, `created_at` and version, nothing else."""
    now = ServiceClock().now()
    account = await funded_account(pool, now)
    merchant_id = account.merchant_id
    created = await _new_payments(pool, account, now, 3)
    documents = PaymentDocuments()
    window = Window(None, None, 50, None)
    await _page(pool, merchant_id, documents, 50)
    await _page(pool, merchant_id, documents, 50)  # kept from the second read on
    async with pool.acquire() as conn, conn.transaction():
        row = await lock_payment(conn, created[0])
        await save(conn, row, state_of(row).start_authorization(), now)

    held = documents.held_for((merchant_id, None, None, None, window)).keys
    assert len(held) == 3  # as listed: the change is not known until the statement runs
    async with pool.acquire() as conn:
        rows, _ = await payment_rows(
            conn, merchant_id, window, select=HELD_DOCUMENT_SELECT, select_values=(held,)
        )
    by_id = {row["id"]: row for row in rows}
    assert {payment: by_id[payment]["held"] for payment in created} == {
        created[0]: False,
        created[1]: True,
        created[2]: True,
    }
    assert by_id[created[0]]["status"] == "authorizing"
    for payment in created[1:]:
        unsent = {name for name, value in by_id[payment].items() if value is None}
        assert {"status", "history", "amount_in_minor", "created_at_utc"} <= unsent
        assert by_id[payment]["created_at"] is not None
        assert by_id[payment]["version"] is not None


def _FIRST_PAGE(merchant_id: uuid.UUID) -> Hashable:  # noqa: N802
    """The listing key of a merchant's first page of 50, unfiltered."""
    return (merchant_id, None, None, None, Window(None, None, 50, None))


class _Told(PaymentDocuments):
    """Documents that say `held` is held for every listing, and keep nothing themselves:
    what the statement is told and what the cache holds once it answers can differ (another
    request's documents pushed them out meanwhile)."""

    def __init__(self, held: Held) -> None:
        super().__init__()
        self._told = held

    def first_read(self, page: Hashable) -> bool:
        return False

    def held_for(self, page: Hashable) -> Held:
        return self._told


async def test_a_held_document_dropped_meanwhile_is_served_as_it_was_vouched_for(
    pool: asyncpg.Pool,
) -> None:
    now = ServiceClock().now()
    account = await funded_account(pool, now)
    merchant_id = account.merchant_id
    await _new_payments(pool, account, now, 3)
    documents = PaymentDocuments()
    await _page(pool, merchant_id, documents, 50)
    first, _ = await _page(pool, merchant_id, documents, 50)  # kept from the second read on
    held = documents.held_for(_FIRST_PAGE(merchant_id))
    assert len(held.keys) == 3

    told = _Told(held)  # holds nothing by the time the statement answers
    again, _ = await _page(pool, merchant_id, told, 50)
    assert again == first
    assert again == await _as_read_now(pool, merchant_id, again)
    assert told.hits == 3


async def test_nothing_is_kept_or_served_inside_a_transaction(pool: asyncpg.Pool) -> None:
    """A row written twice by one transaction has one version for both writes: a page read
    inside a transaction neither keeps nor serves documents."""
    now = ServiceClock().now()
    account = await funded_account(pool, now)
    merchant_id = account.merchant_id
    await _new_payments(pool, account, now, 2)
    documents = PaymentDocuments()
    async with pool.acquire() as conn, conn.transaction():
        for _ in range(3):
            items, _ = await list_payments(
                conn, merchant_id, Window(None, None, 50, None), documents
            )
            assert len(items) == 2
    assert (len(documents), documents.hits, documents.listings) == (0, 0, 0)
