"""`GET /v3/request-log` over HTTP (DESIGN §11 "Debugging tools"): a merchant's own requests,
redacted, newest first, filtered and paged; the sandbox server keeps the log by default."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
from e2e_helpers import assert_invalid, assert_problem, bearer
from payout_helpers import GB_IBAN, PATH, external_beneficiary, funded_merchant, payout_body

from support.api import MerchantClient, Operator
from support.waiting import wait_for


def _log(merchant: MerchantClient, **params: Any) -> httpx.Response:
    """`GET /v3/request-log` with these query parameters (one is named `path`)."""
    return merchant.http.get("/v3/request-log", params=params, headers=bearer(merchant.token()))


def _entries(merchant: MerchantClient, **params: Any) -> list[dict[str, Any]]:
    answer = _log(merchant, **params)
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


def _logged(merchant: MerchantClient, count: int, **params: Any) -> list[dict[str, Any]]:
    """The entries once at least `count` are there (they are written a moment after)."""
    return wait_for(
        lambda: items if len(items := _entries(merchant, **params)) >= count else None,
        what=f"{count} request-log entries for {params}",
    )


def _signed_payout(merchant: MerchantClient) -> tuple[dict[str, Any], str, Any]:
    body = payout_body(
        merchant, "GBP", 150, external_beneficiary(GB_IBAN, name="Jane Doe", reference="rl 1")
    )
    key = str(uuid.uuid4())
    answer = merchant.signed_post(PATH, body, idempotency_key=key)
    assert answer.status_code == 202, answer.text
    return body, key, answer


def test_a_signed_post_and_a_get_are_logged_redacted_and_only_for_their_merchant(
    operator: Operator,
) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    other = funded_merchant(operator, gbp=10_000)
    _, key, answer = _signed_payout(merchant)
    payout_id = answer.json()["id"]
    assert merchant.get(f"{PATH}/{payout_id}").status_code == 200

    items = _logged(merchant, 2)
    got, posted = items[0], items[1]  # newest first
    assert (got["method"], got["path"], got["status"]) == ("GET", f"{PATH}/{payout_id}", 200)
    assert (posted["method"], posted["path"], posted["status"]) == ("POST", PATH, 202)
    assert posted["idempotency_key"] == key
    assert posted["replayed"] is False
    assert posted["client_id"] == merchant.client_id
    assert posted["duration_ms"] >= 0
    assert posted["response"]["body"] == {"id": payout_id}
    sent = posted["request"]["body"]
    assert sent["amount_in_minor"] == 150
    assert sent["beneficiary"]["reference"] == "rl 1"
    assert sent["beneficiary"]["account_holder_name"] == "[masked]"
    assert sent["beneficiary"]["account_identifier"]["iban"] == "••••6819"
    headers = posted["request"]["headers"]
    assert headers["authorization"] == "[redacted]"
    assert headers["svc-signature"] == "[redacted]"
    assert headers["idempotency-key"] == key
    text = json.dumps(items, ensure_ascii=False)
    for secret in (
        merchant.token(),
        merchant.client_secret,
        GB_IBAN["iban"],
        "Jane Doe",
        answer.request.headers["svc-signature"],
    ):
        assert secret not in text
    assert items[0]["created_at"] >= items[1]["created_at"]

    # Another merchant sees none of it, even asking for the payout by id.
    assert _entries(other) == []
    assert _entries(other, object_id=payout_id) == []
    # Reading the log is not logged.
    assert all(item["path"] != "/v3/request-log" for item in _entries(merchant))


def test_filters_by_status_class_or_code_path_prefix_and_object(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    _, _, answer = _signed_payout(merchant)
    payout_id = answer.json()["id"]
    missing = str(uuid.uuid4())
    assert merchant.get(f"{PATH}/{missing}").status_code == 404
    assert merchant.get(f"{PATH}/{payout_id}").status_code == 200
    assert merchant.get("/v3/merchant-accounts").status_code == 200
    _logged(merchant, 4)

    assert [e["status"] for e in _entries(merchant, status="4xx")] == [404]
    assert [e["status"] for e in _entries(merchant, status="404")] == [404]
    assert [e["status"] for e in _entries(merchant, status="2xx")] == [200, 200, 202]
    assert _entries(merchant, status="5xx") == []
    assert {e["path"] for e in _entries(merchant, path="/v3/payouts")} == {
        PATH,
        f"{PATH}/{missing}",
        f"{PATH}/{payout_id}",
    }
    named = _entries(merchant, object_id=payout_id)
    assert [(e["method"], e["path"]) for e in named] == [
        ("GET", f"{PATH}/{payout_id}"),
        ("POST", PATH),  # it created the payout
    ]
    assert [e["path"] for e in _entries(merchant, object_id=missing.upper())] == [
        f"{PATH}/{missing}"
    ]

    assert_invalid(_log(merchant, status="4x"), "status")
    assert_invalid(_log(merchant, status="600"), "status")
    assert_invalid(_log(merchant, path="v3/payouts"), "path")


def test_pages_newest_first_with_a_cursor_and_refuses_a_bad_one(operator: Operator) -> None:
    merchant = funded_merchant(operator)
    for _ in range(5):
        assert merchant.get("/v3/merchant-accounts").status_code == 200
    everything = _logged(merchant, 5)
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        answer = _log(merchant, **params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert len(page["items"]) <= 2
        seen += [item["id"] for item in page["items"]]
        cursor = page["pagination"]["next_cursor"]
        if cursor is None:
            break
    assert seen == [item["id"] for item in everything]
    assert len(set(seen)) == 5

    assert_problem(_log(merchant, cursor="not-a-cursor"), 400)


def test_a_replay_and_a_refusal_after_authentication_are_logged(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    body = payout_body(merchant, "GBP", 99, external_beneficiary(GB_IBAN))
    key = str(uuid.uuid4())
    first = merchant.signed_post(PATH, body, idempotency_key=key)
    again = merchant.signed_post(PATH, body, idempotency_key=key)
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json()
    unsigned = merchant.http.post(
        PATH, json=body, headers={**bearer(merchant.token()), "Idempotency-Key": "x"}
    )
    assert unsigned.status_code == 401  # a signature refused: after the token was read

    items = _logged(merchant, 3)
    assert [(e["status"], e["replayed"]) for e in items] == [
        (401, False),
        (202, True),
        (202, False),
    ]
    assert items[1]["idempotency_key"] == items[2]["idempotency_key"] == key
    assert items[0]["response"]["body"]["status"] == 401
    assert items[0]["response"]["headers"]["content-type"].startswith("application/problem+json")


def test_a_reset_purges_the_merchants_request_log(operator: Operator) -> None:
    merchant = funded_merchant(operator)
    other = funded_merchant(operator)
    for client in (merchant, other):
        assert client.get("/v3/merchant-accounts").status_code == 200
        _logged(client, 1)

    reset = operator.post(f"/sandbox/merchants/{merchant.merchant_id}/reset", {})
    assert reset.status_code == 200, reset.text

    assert _entries(merchant) == []
    assert len(_entries(other)) == 1


def test_refusals_after_the_token_are_logged_with_their_problem(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    # 403: a client of the merchant whose token lacks the `payments` scope.
    client = operator.post(
        f"/admin/merchants/{merchant.merchant_id}/clients", {"scopes": ["payouts"]}
    )
    assert client.status_code == 201, client.text
    token = merchant.http.post(
        "/connect/token",
        data={
            "grant_type": "client_credentials",
            "client_id": client.json()["client_id"],
            "client_secret": client.json()["client_secret"],
        },
    )
    assert token.status_code == 200, token.text
    refused = merchant.http.get(PATH, headers=bearer(token.json()["access_token"]))
    assert refused.status_code == 403
    # 400: a signed payout missing its amount.
    body = payout_body(merchant, "GBP", 10, external_beneficiary(GB_IBAN))
    invalid = {k: v for k, v in body.items() if k != "amount_in_minor"}
    assert merchant.signed_post(PATH, invalid).status_code == 400
    # The key used again with another body.
    key = str(uuid.uuid4())
    assert merchant.signed_post(PATH, body, idempotency_key=key).status_code == 202
    reused = merchant.signed_post(PATH, {**body, "amount_in_minor": 11}, idempotency_key=key)
    assert reused.status_code in (409, 422), reused.text

    items = _logged(merchant, 4)
    assert [e["status"] for e in items] == [reused.status_code, 202, 400, 403]
    assert items[3]["client_id"] == client.json()["client_id"]
    assert items[3]["response"]["body"]["status"] == 403
    assert "amount_in_minor" in json.dumps(items[2]["response"]["body"])
    assert items[0]["idempotency_key"] == key
    assert [e["status"] for e in _entries(merchant, status="4xx")] == [
        reused.status_code,
        400,
        403,
    ]


def test_a_listing_is_kept_as_its_items_ids_and_its_pagination(operator: Operator) -> None:
    # Each item of a page can be read again by id; the log keeps which ones the page held.
    merchant = funded_merchant(operator, gbp=10_000)
    ids = [_signed_payout(merchant)[2].json()["id"] for _ in range(2)]
    page = merchant.get(PATH, limit=1)
    assert page.status_code == 200, page.text
    [listed] = page.json()["items"]
    assert listed["id"] in ids
    assert listed["beneficiary"]

    [entry] = _logged(merchant, 1, path=PATH, status="200")
    assert entry["method"] == "GET"
    assert entry["path"] == PATH
    assert entry["response"]["body"] == {
        "items": [{"id": listed["id"]}],
        "pagination": page.json()["pagination"],
    }
    # A single object's answer is kept whole (redacted).
    assert merchant.get(f"{PATH}/{ids[0]}").status_code == 200
    [single] = _logged(merchant, 1, path=f"{PATH}/{ids[0]}")
    kept = single["response"]["body"]
    assert kept["id"] == ids[0]
    assert kept["beneficiary"]["account_holder_name"] == "[masked]"
