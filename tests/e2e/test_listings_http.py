"""`GET /v3/payments` and `GET /v3/payouts` over HTTP: the merchant's own items, newest first,
each as its single GET shows it, with filters and cursor paging (docs/api.md "Listings")."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest
from e2e_helpers import assert_invalid, get_record, service_now, wait_record_status
from pay_in_helpers import authorised_pay_in, payment_body, settled_payment
from payout_helpers import (
    DE_IBAN,
    SORT_CODE,
    create_payout,
    external_beneficiary,
    funded_merchant,
    payout_body,
    wait_payout_status,
)

from support.api import MerchantClient, Operator


def _page(merchant: MerchantClient, path: str, **params: Any) -> dict[str, Any]:
    answer = merchant.get(path, **params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    assert set(body) == {"items", "pagination"}
    assert set(body["pagination"]) == {"next_cursor"}
    return body


def _every_page(merchant: MerchantClient, path: str, **params: Any) -> list[list[dict[str, Any]]]:
    pages = []
    cursor = None
    for _ in range(50):
        body = _page(merchant, path, **params, **({"cursor": cursor} if cursor else {}))
        pages.append(body["items"])
        cursor = body["pagination"]["next_cursor"]
        if cursor is None:
            return pages
    raise AssertionError("the listing never reached its last page")


def _ids(items: list[dict[str, Any]]) -> list[str]:
    return [item["id"] for item in items]


def test_payouts_are_listed_newest_first_in_pages_as_their_single_get(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=100_000, eur=100_000)
    created = []
    for n in range(5):
        beneficiary = external_beneficiary(SORT_CODE, reference=f"listed {n}")
        created.append(create_payout(merchant, payout_body(merchant, "GBP", 100 + n, beneficiary)))
    created.append(
        create_payout(merchant, payout_body(merchant, "EUR", 300, external_beneficiary(DE_IBAN)))
    )
    for payout_id in created:
        wait_payout_status(merchant, payout_id, {"executed"})

    pages = _every_page(merchant, "/v3/payouts", limit=2)
    assert [len(page) for page in pages] == [2, 2, 2]
    listed = [item for page in pages for item in page]
    assert _ids(listed) == list(reversed(created))
    for item in listed:
        assert item == get_record(merchant, f"/v3/payouts/{item['id']}")

    eur = merchant.accounts["EUR"]["id"]
    only_eur = _page(merchant, "/v3/payouts", merchant_account_id=eur)["items"]
    assert _ids(only_eur) == [created[-1]]
    assert _ids(_page(merchant, "/v3/payouts", status="executed")["items"]) == _ids(listed)
    assert _page(merchant, "/v3/payouts", status="pending")["items"] == []


def test_a_payout_listing_filters_by_status_and_creation_time(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=100_000)
    before = service_now(operator)
    failing = create_payout(
        merchant,
        payout_body(
            merchant, "GBP", 100, external_beneficiary(SORT_CODE, reference="fail:scheme_error")
        ),
    )
    wait_payout_status(merchant, failing, {"failed"})
    between = service_now(operator)
    ok = create_payout(merchant, payout_body(merchant, "GBP", 100, external_beneficiary(SORT_CODE)))
    wait_payout_status(merchant, ok, {"executed"})

    assert _ids(_page(merchant, "/v3/payouts", status="failed")["items"]) == [failing]
    assert _ids(_page(merchant, "/v3/payouts", status="executed")["items"]) == [ok]
    since = _page(merchant, "/v3/payouts", **{"from": between.isoformat()})["items"]
    assert _ids(since) == [ok]
    until = _page(merchant, "/v3/payouts", to=between.isoformat())["items"]
    assert _ids(until) == [failing]
    window = {"from": before.isoformat(), "to": service_now(operator).isoformat()}
    assert _ids(_page(merchant, "/v3/payouts", **window)["items"]) == [ok, failing]


def test_payments_are_listed_newest_first_with_filters(operator: Operator) -> None:
    merchant = funded_merchant(operator)
    alice = [
        merchant.signed_post("/v3/payments", payment_body(merchant, user={"id": "alice"})).json()[
            "id"
        ]
        for _ in range(3)
    ]
    settled = authorised_pay_in(merchant, 2_500, {"id": "bob", "name": "Bob Payer"})
    settled_payment(merchant, settled)
    eur = merchant.signed_post("/v3/payments", payment_body(merchant, "EUR", 700)).json()["id"]
    created = [*alice, settled, eur]

    pages = _every_page(merchant, "/v3/payments", limit=2)
    listed = [item for page in pages for item in page]
    assert [len(page) for page in pages] == [2, 2, 1]
    assert _ids(listed) == list(reversed(created))
    for item in listed:
        assert item == get_record(merchant, f"/v3/payments/{item['id']}")
    bob = next(item for item in listed if item["id"] == settled)
    assert bob["status"] == "payment_settled"
    assert bob["payment_source"]["account_holder_name"]

    assert _ids(_page(merchant, "/v3/payments", user_id="alice")["items"]) == alice[::-1]
    assert _ids(_page(merchant, "/v3/payments", status="payment_settled")["items"]) == [settled]
    by_account = _page(merchant, "/v3/payments", merchant_account_id=merchant.accounts["EUR"]["id"])
    assert _ids(by_account["items"]) == [eur]
    assert _ids(_page(merchant, "/payments", user_id="bob")["items"]) == [settled]


def test_a_payment_changed_between_two_page_reads_is_listed_as_it_is_now(
    operator: Operator,
) -> None:
    # The server keeps the documents a page rendered (payments/documents.py): a payment that
    # changed since is rendered again, here its status and, after a refund, its amount.
    merchant = funded_merchant(operator)
    settled = authorised_pay_in(merchant, 2_500, {"id": "bob", "name": "Bob Payer"})
    settled_payment(merchant, settled)
    waiting = [
        merchant.signed_post("/v3/payments", payment_body(merchant)).json()["id"] for _ in range(4)
    ]
    created = [settled, *waiting]

    for _ in range(3):  # kept from the second read on, served from the third
        first = [item for page in _every_page(merchant, "/v3/payments", limit=2) for item in page]
        assert _ids(first) == list(reversed(created))
    for item in first:
        assert item == get_record(merchant, f"/v3/payments/{item['id']}")

    started = merchant.signed_post(
        f"/v3/payments/{waiting[1]}/authorization-flow",
        {"provider_selection": {}, "redirect": {"return_uri": "https://shop.example/back"}},
    )
    assert started.status_code == 200, started.text
    refund = merchant.signed_post(
        f"/v3/payments/{settled}/refunds", {"amount_in_minor": 1_000, "reference": "refund"}
    )
    assert refund.status_code == 201, refund.text
    wait_record_status(
        merchant, f"/v3/payments/{settled}/refunds/{refund.json()['id']}", {"executed"}
    )

    pages = _every_page(merchant, "/v3/payments", limit=2)
    assert [len(page) for page in pages] == [2, 2, 1]
    listed = [item for page in pages for item in page]
    assert _ids(listed) == list(reversed(created))
    for item in listed:
        assert item == get_record(merchant, f"/v3/payments/{item['id']}")
    now = {item["id"]: item for item in listed}
    assert now[waiting[1]]["status"] == "authorizing"
    assert now[settled]["refunded_amount_in_minor"] == 1_000
    before = {item["id"]: item for item in first}
    assert before[waiting[1]]["status"] == "authorization_required"
    assert before[settled]["refunded_amount_in_minor"] == 0
    assert [now[i] == before[i] for i in created] == [False, True, False, True, True]


def test_a_merchant_lists_only_its_own_payments_and_payouts(operator: Operator) -> None:
    mine = funded_merchant(operator, gbp=10_000)
    theirs = funded_merchant(operator, gbp=10_000)
    create_payout(mine, payout_body(mine, "GBP", 100, external_beneficiary(SORT_CODE)))
    mine.signed_post("/v3/payments", payment_body(mine))
    assert _page(theirs, "/v3/payouts")["items"] == []
    assert _page(theirs, "/v3/payments")["items"] == []
    foreign_account = mine.accounts["GBP"]["id"]
    assert _page(theirs, "/v3/payouts", merchant_account_id=foreign_account)["items"] == []


def test_a_bad_filter_is_a_400_naming_it(operator: Operator) -> None:
    merchant = funded_merchant(operator)
    for path in ("/v3/payouts", "/v3/payments"):
        assert_invalid(merchant.get(path, status="settled_somehow"), "status")
        assert_invalid(merchant.get(path, limit=0), "limit")
        assert_invalid(merchant.get(path, limit=201), "limit")
        assert_invalid(merchant.get(path, **{"from": "yesterday"}), "from")
        assert_invalid(merchant.get(path, cursor="not-a-cursor"), "cursor")
        assert_invalid(merchant.get(path, merchant_account_id="nope"), "merchant_account_id")
        assert_invalid(
            merchant.get(path, **{"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}),
            "from",
        )


def _forged_cursor(moment: str) -> str:
    raw = f"{moment}|{uuid.uuid4()}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "moment",
    # Valid RFC 3339 text whose instant, in UTC, falls outside the years 1 to 9999.
    ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"],
)
def test_a_forged_cursor_with_an_out_of_range_time_is_a_400_on_every_listing(
    operator: Operator, moment: str
) -> None:
    merchant = funded_merchant(operator)
    account_id = merchant.accounts["GBP"]["id"]
    cursor = _forged_cursor(moment)
    for path in (
        "/v3/payments",
        "/v3/payouts",
        "/v3/mandates",
        "/v1/transactions",
        f"/v3/merchant-accounts/{account_id}/transactions",
    ):
        assert_invalid(merchant.get(path, cursor=cursor), "cursor")
