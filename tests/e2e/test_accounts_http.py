"""Merchant accounts and their transactions over HTTP (docs/api.md)."""

from __future__ import annotations

import uuid
from datetime import timedelta, timezone
from typing import Any

import httpx
import pytest
from e2e_helpers import assert_invalid, assert_problem, bearer, fresh_token, parse_time

from support.api import MerchantClient, Operator


class Reader:
    """GETs on behalf of a merchant with a freshly issued token."""

    def __init__(self, merchant: MerchantClient) -> None:
        self.merchant = merchant
        self.headers = bearer(fresh_token(merchant)["access_token"])

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.merchant.http.get(path, params=params, headers=self.headers)


def _transactions(reader: Reader, account_id: str, **params: Any) -> dict[str, Any]:
    answer = reader.get(f"/v3/merchant-accounts/{account_id}/transactions", **params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    assert set(body) == {"items", "pagination"}
    return body


def _all_pages(reader: Reader, account_id: str, **params: Any) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    for _ in range(20):
        query = {**params, **({"cursor": cursor} if cursor else {})}
        body = _transactions(reader, account_id, **query)
        pages.append(body["items"])
        cursor = body["pagination"].get("next_cursor")
        if not cursor:
            return pages
    raise AssertionError("pagination did not end")


@pytest.fixture
def topped_up(operator: Operator) -> tuple[MerchantClient, list[int]]:
    """A merchant whose GBP account received five top-ups, in this order."""
    merchant = operator.new_merchant()
    amounts = [101, 202, 303, 404, 505]
    for amount in amounts:
        answer = operator.top_up(merchant.accounts["GBP"], amount, reference=f"ref {amount}")
        assert answer.status_code == 201, answer.text
    return merchant, amounts


def test_merchants_see_only_their_own_accounts(operator: Operator) -> None:
    alice = operator.new_merchant("Alice Ltd")
    bob = operator.new_merchant("Bob Ltd", currencies=("EUR",))
    for merchant in (alice, bob):
        listed = Reader(merchant).get("/v3/merchant-accounts")
        assert listed.status_code == 200
        ids = {a["id"] for a in listed.json()["items"]}
        assert ids == {a["id"] for a in merchant.accounts.values()}
        for item in listed.json()["items"]:
            assert set(item) >= {
                "id",
                "currency",
                "account_identifiers",
                "account_holder_name",
                "current_balance_in_minor",
                "available_balance_in_minor",
            }
    assert Reader(bob).get("/v3/merchant-accounts").json()["items"][0]["account_holder_name"] == (
        "Bob Ltd"
    )


def test_v1_balances_list_only_the_callers_accounts(operator: Operator) -> None:
    alice = operator.new_merchant("Alice Ltd")
    bob = operator.new_merchant("Bob Ltd", currencies=("EUR",))
    operator.top_up(alice.accounts["EUR"], 50)
    results = Reader(bob).get("/v1/balances").json()["results"]
    assert len(results) == 1
    assert results[0]["currency"] == "EUR"
    assert results[0]["current_balance_in_minor"] == 0


def test_another_merchants_account_is_404(operator: Operator) -> None:
    alice = operator.new_merchant("Alice Ltd")
    bob = operator.new_merchant("Bob Ltd")
    operator.top_up(alice.accounts["GBP"], 1_000)
    alices = alice.accounts["GBP"]["id"]
    reader = Reader(bob)
    for path in (f"/v3/merchant-accounts/{alices}", f"/v3/merchant-accounts/{alices}/transactions"):
        problem = assert_problem(reader.get(path), 404, "Not Found")
        assert "1000" not in problem["detail"]
    unknown = assert_problem(reader.get(f"/v3/merchant-accounts/{uuid.uuid4()}"), 404)
    foreign = assert_problem(reader.get(f"/v3/merchant-accounts/{alices}"), 404)
    assert unknown["title"] == foreign["title"], "no difference between foreign and missing"


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "12345", "%20", "00000000-0000-0000-0000"])
def test_malformed_account_id_is_404(operator: Operator, bad_id: str) -> None:
    reader = Reader(operator.new_merchant(currencies=("GBP",)))
    for suffix in ("", "/transactions"):
        answer = reader.get(f"/v3/merchant-accounts/{bad_id}{suffix}")
        assert_problem(answer, 404)


def test_transactions_list_top_ups_oldest_first(
    topped_up: tuple[MerchantClient, list[int]],
) -> None:
    merchant, amounts = topped_up
    body = _transactions(Reader(merchant), merchant.accounts["GBP"]["id"])
    items = body["items"]
    assert [i["amount_in_minor"] for i in items] == amounts
    assert not body["pagination"].get("next_cursor")
    times = [parse_time(i["created_at"]) for i in items]
    assert times == sorted(times)
    for item in items:
        assert item["type"] == "external_payment"
        assert item["currency"] == "GBP"
        assert isinstance(item["status"], str)
        assert item["status"]
        uuid.UUID(item["id"])
    assert len({i["id"] for i in items}) == 5


def test_transactions_paginate_with_next_cursor(
    topped_up: tuple[MerchantClient, list[int]],
) -> None:
    merchant, amounts = topped_up
    pages = _all_pages(Reader(merchant), merchant.accounts["GBP"]["id"], limit=2)
    assert [len(p) for p in pages] == [2, 2, 1]
    flat = [item for page in pages for item in page]
    assert [i["amount_in_minor"] for i in flat] == amounts
    assert len({i["id"] for i in flat}) == 5
    times = [parse_time(i["created_at"]) for i in flat]
    assert times == sorted(times)


def test_pagination_of_an_exact_multiple_ends_cleanly(operator: Operator) -> None:
    merchant = operator.new_merchant(currencies=("EUR",))
    for amount in (1, 2, 3, 4):
        operator.top_up(merchant.accounts["EUR"], amount)
    pages = _all_pages(Reader(merchant), merchant.accounts["EUR"]["id"], limit=2)
    assert [len(p) for p in pages] in ([2, 2], [2, 2, 0])
    assert [i["amount_in_minor"] for p in pages for i in p] == [1, 2, 3, 4]


def test_transactions_filter_by_type(topped_up: tuple[MerchantClient, list[int]]) -> None:
    merchant, amounts = topped_up
    reader = Reader(merchant)
    account_id = merchant.accounts["GBP"]["id"]
    topups = _transactions(reader, account_id, type="topup")["items"]
    assert [i["amount_in_minor"] for i in topups] == amounts
    assert _transactions(reader, account_id, type="payout")["items"] == []
    assert _transactions(reader, account_id, type="payment")["items"] == []
    assert _transactions(reader, account_id, type="refund")["items"] == []
    assert_invalid(
        reader.get(f"/v3/merchant-accounts/{account_id}/transactions", type="chargeback"), "type"
    )


def test_transactions_from_and_to_are_inclusive(
    topped_up: tuple[MerchantClient, list[int]],
) -> None:
    merchant, amounts = topped_up
    reader = Reader(merchant)
    account_id = merchant.accounts["GBP"]["id"]
    items = _transactions(reader, account_id)["items"]
    start, end = items[1]["created_at"], items[3]["created_at"]

    ranged = _transactions(reader, account_id, **{"from": start, "to": end})["items"]
    assert [i["amount_in_minor"] for i in ranged] == amounts[1:4]
    only_one = _transactions(reader, account_id, **{"from": start, "to": start})["items"]
    assert [i["amount_in_minor"] for i in only_one] == [amounts[1]]
    since = _transactions(reader, account_id, **{"from": end})["items"]
    assert [i["amount_in_minor"] for i in since] == amounts[3:]
    until = _transactions(reader, account_id, to=start)["items"]
    assert [i["amount_in_minor"] for i in until] == amounts[:2]
    paged = _all_pages(reader, account_id, limit=1, **{"from": start, "to": end})
    assert [i["amount_in_minor"] for p in paged for i in p] == amounts[1:4]


def test_transactions_range_accepts_offsets(topped_up: tuple[MerchantClient, list[int]]) -> None:
    merchant, amounts = topped_up
    reader = Reader(merchant)
    account_id = merchant.accounts["GBP"]["id"]
    first = parse_time(_transactions(reader, account_id)["items"][0]["created_at"])
    in_paris = first.astimezone(timezone(timedelta(hours=1)))
    ranged = _transactions(reader, account_id, **{"from": in_paris.isoformat()})["items"]
    assert [i["amount_in_minor"] for i in ranged] == amounts


@pytest.mark.parametrize("cursor", ["garbage", "!!!", "Zm9vfGJhcg", "x" * 150])
def test_garbage_cursor_is_400(topped_up: tuple[MerchantClient, list[int]], cursor: str) -> None:
    merchant, _ = topped_up
    answer = Reader(merchant).get(
        f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}/transactions", cursor=cursor
    )
    assert_invalid(answer, "cursor")


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": -1}, {"limit": "ten"}, {"from": "yesterday"}, {"to": "2026-13-01"}],
)
def test_bad_transaction_query_is_400(
    topped_up: tuple[MerchantClient, list[int]], params: dict[str, Any]
) -> None:
    merchant, _ = topped_up
    answer = Reader(merchant).get(
        f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}/transactions", **params
    )
    assert_invalid(answer, next(iter(params)))


def test_transactions_of_one_account_do_not_show_on_another(
    topped_up: tuple[MerchantClient, list[int]],
) -> None:
    merchant, _ = topped_up
    assert _transactions(Reader(merchant), merchant.accounts["EUR"]["id"])["items"] == []
