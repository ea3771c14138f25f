"""Sandbox bank transfers and the service clock over HTTP (docs/operations.md, spec 2.1 and 4.1)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from e2e_helpers import (
    account_by_currency,
    assert_invalid,
    assert_problem,
    bearer,
    fresh_token,
    identifier,
    is_uuid,
    parse_time,
    service_now,
)

from support.api import MerchantClient, Operator

MAX_AMOUNT = 2**63 - 1


def _transfer(account: dict[str, Any], amount: int = 1_000, **extra: Any) -> dict[str, Any]:
    return {
        "iban": identifier(account, "iban")["iban"],
        "amount_in_minor": amount,
        "currency": account["currency"],
        "remitter_name": "Remitter Ltd",
        "reference": "invoice 42",
        **extra,
    }


def _balances(merchant: MerchantClient) -> dict[str, tuple[int, int]]:
    """(current, available) per currency, read through GET /v3/merchant-accounts."""
    token = fresh_token(merchant)["access_token"]
    listed = merchant.http.get("/v3/merchant-accounts", headers=bearer(token))
    assert listed.status_code == 200
    return {
        a["currency"]: (a["current_balance_in_minor"], a["available_balance_in_minor"])
        for a in listed.json()["items"]
    }


def _v1_balances(merchant: MerchantClient) -> list[dict[str, Any]]:
    token = fresh_token(merchant)["access_token"]
    answer = merchant.http.get("/v1/balances", headers=bearer(token))
    assert answer.status_code == 200, answer.text
    results: list[dict[str, Any]] = answer.json()["results"]
    return results


def test_transfer_by_iban_credits_the_account_at_once(operator: Operator) -> None:
    merchant = operator.new_merchant()
    gbp = merchant.accounts["GBP"]
    answer = operator.post("/sandbox/bank-transfers", _transfer(gbp, 12_345))
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert is_uuid(body["id"])
    assert body["merchant_account_id"] == gbp["id"]

    account = account_by_currency(merchant, "GBP")
    assert account["current_balance_in_minor"] == 12_345
    assert account["available_balance_in_minor"] == 12_345
    assert _balances(merchant)["EUR"] == (0, 0), "only the addressed account is credited"

    results = _v1_balances(merchant)
    assert len(results) == 2
    for entry in results:
        assert set(entry) >= {
            "currency",
            "iban",
            "status",
            "current_balance_in_minor",
            "available_balance_in_minor",
        }
        assert entry["status"] == "enabled"
        assert entry["iban"] == identifier(merchant.accounts[entry["currency"]], "iban")["iban"]
    by_currency = {e["currency"]: e for e in results}
    assert by_currency["GBP"]["current_balance_in_minor"] == 12_345
    assert by_currency["GBP"]["available_balance_in_minor"] == 12_345
    assert by_currency["EUR"]["current_balance_in_minor"] == 0


def test_transfer_by_sort_code_and_account_number_credits_the_gbp_account(
    operator: Operator,
) -> None:
    merchant = operator.new_merchant()
    gbp = merchant.accounts["GBP"]
    scan = identifier(gbp, "sort_code_account_number")
    answer = operator.post(
        "/sandbox/bank-transfers",
        {
            "sort_code": scan["sort_code"],
            "account_number": scan["account_number"],
            "amount_in_minor": 777,
            "currency": "GBP",
            "remitter_name": "Faster Payer",
            "reference": "by scan",
        },
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["merchant_account_id"] == gbp["id"]
    assert _balances(merchant)["GBP"] == (777, 777)


def test_transfers_add_up_and_eur_accounts_are_credited_too(operator: Operator) -> None:
    merchant = operator.new_merchant()
    eur = merchant.accounts["EUR"]
    for amount in (100, 250, 1):
        assert operator.post("/sandbox/bank-transfers", _transfer(eur, amount)).status_code == 201
    assert _balances(merchant)["EUR"] == (351, 351)


def test_formatted_iban_reaches_the_account(operator: Operator) -> None:
    merchant = operator.new_merchant()
    gbp = merchant.accounts["GBP"]
    compact = identifier(gbp, "iban")["iban"]
    spaced = " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))
    answer = operator.post("/sandbox/bank-transfers", _transfer(gbp, 5, iban=spaced))
    assert answer.status_code == 201, answer.text
    assert _balances(merchant)["GBP"] == (5, 5)


def test_transfer_with_remitter_iban_is_accepted(operator: Operator) -> None:
    merchant = operator.new_merchant()
    gbp = merchant.accounts["GBP"]
    answer = operator.post(
        "/sandbox/bank-transfers", _transfer(gbp, 10, remitter_iban="GB33BUKB20201555555555")
    )
    assert answer.status_code == 201, answer.text
    bad = operator.post("/sandbox/bank-transfers", _transfer(gbp, 10, remitter_iban="GB00XX"))
    assert_invalid(bad, "remitter_iban")
    assert _balances(merchant)["GBP"] == (10, 10)


def test_unknown_iban_is_400_and_credits_nothing(operator: Operator) -> None:
    merchant = operator.new_merchant()
    body = _transfer(merchant.accounts["GBP"], 500, iban="GB33BUKB20201555555555")
    assert_invalid(operator.post("/sandbox/bank-transfers", body), "iban")
    assert _balances(merchant) == {"GBP": (0, 0), "EUR": (0, 0)}
    assert operator.get("/admin/ledger/check").json()["ok"] is True


def test_unknown_sort_code_and_account_number_is_400(operator: Operator) -> None:
    merchant = operator.new_merchant()
    answer = operator.post(
        "/sandbox/bank-transfers",
        {
            "sort_code": "000000",
            "account_number": "00000000",
            "amount_in_minor": 500,
            "currency": "GBP",
            "remitter_name": "Nobody",
            "reference": "lost",
        },
    )
    assert_problem(answer, 400, "Invalid Parameters")
    assert _balances(merchant)["GBP"] == (0, 0)


def test_iban_with_a_bad_checksum_is_400_naming_iban(operator: Operator) -> None:
    merchant = operator.new_merchant()
    gbp = merchant.accounts["GBP"]
    real = identifier(gbp, "iban")["iban"]
    wrong_check = f"{real[:2]}{(int(real[2:4]) + 1) % 97:02d}{real[4:]}"
    for iban in (wrong_check, "GB00BUKB20201555555555", "not an iban"):
        assert_invalid(
            operator.post("/sandbox/bank-transfers", _transfer(gbp, 1, iban=iban)), "iban"
        )
    assert _balances(merchant)["GBP"] == (0, 0)


@pytest.mark.parametrize(
    "amount", [0, -1, -500, MAX_AMOUNT + 1, 2**64, "100", 10.0, 10.5, None, True]
)
def test_amount_must_be_a_positive_integer_in_range(operator: Operator, amount: object) -> None:
    merchant = operator.new_merchant(currencies=("GBP",))
    body = _transfer(merchant.accounts["GBP"], amount=amount)  # type: ignore[arg-type]
    assert_invalid(operator.post("/sandbox/bank-transfers", body), "amount_in_minor")
    assert _balances(merchant)["GBP"] == (0, 0)


def test_currency_mismatch_is_400_and_credits_nothing(operator: Operator) -> None:
    merchant = operator.new_merchant()
    to_gbp_in_eur = _transfer(merchant.accounts["GBP"], 100, currency="EUR")
    assert_invalid(operator.post("/sandbox/bank-transfers", to_gbp_in_eur), "currency")
    to_eur_in_gbp = _transfer(merchant.accounts["EUR"], 100, currency="GBP")
    assert_invalid(operator.post("/sandbox/bank-transfers", to_eur_in_gbp), "currency")
    usd = _transfer(merchant.accounts["GBP"], 100, currency="USD")
    assert_invalid(operator.post("/sandbox/bank-transfers", usd), "currency")
    assert _balances(merchant) == {"GBP": (0, 0), "EUR": (0, 0)}


@pytest.mark.parametrize(
    "change",
    [
        {"iban": None},
        {"remitter_name": None},
        {"reference": 42},
        {"colour": "blue"},
        {"sort_code": "608371", "account_number": "12345678"},
    ],
    ids=["no-destination", "no-remitter", "reference-type", "unknown-field", "two-destinations"],
)
def test_malformed_transfer_is_400(operator: Operator, change: dict[str, Any]) -> None:
    merchant = operator.new_merchant(currencies=("GBP",))
    body = {**_transfer(merchant.accounts["GBP"], 100), **change}
    body = {k: v for k, v in body.items() if v is not None}
    assert_invalid(operator.post("/sandbox/bank-transfers", body))
    assert _balances(merchant)["GBP"] == (0, 0)


def test_idempotent_transfer_is_replayed_byte_for_byte_and_credits_once(
    operator: Operator,
) -> None:
    merchant = operator.new_merchant()
    gbp = merchant.accounts["GBP"]
    key = str(uuid.uuid4())
    body = _transfer(gbp, 4_200)
    first = operator.post("/sandbox/bank-transfers", body, **{"Idempotency-Key": key})
    assert first.status_code == 201, first.text
    second = operator.post("/sandbox/bank-transfers", body, **{"Idempotency-Key": key})
    assert second.status_code == 201
    assert second.content == first.content
    assert _balances(merchant)["GBP"] == (4_200, 4_200)

    changed = operator.post(
        "/sandbox/bank-transfers", _transfer(gbp, 4_201), **{"Idempotency-Key": key}
    )
    problem = assert_problem(changed, 422, "Idempotency-Key Reuse")
    assert problem["type"].endswith("/errors#idempotency-key-reuse")
    assert _balances(merchant)["GBP"] == (4_200, 4_200)

    other_key = operator.post(
        "/sandbox/bank-transfers", body, **{"Idempotency-Key": str(uuid.uuid4())}
    )
    assert other_key.status_code == 201
    assert other_key.json()["id"] != first.json()["id"]
    assert _balances(merchant)["GBP"] == (8_400, 8_400)


def test_transfers_without_a_key_are_never_deduplicated(operator: Operator) -> None:
    merchant = operator.new_merchant(currencies=("EUR",))
    body = _transfer(merchant.accounts["EUR"], 10)
    ids = {operator.post("/sandbox/bank-transfers", body).json()["id"] for _ in range(3)}
    assert len(ids) == 3
    assert _balances(merchant)["EUR"] == (30, 30)


def test_clock_reads_and_advances(operator: Operator) -> None:
    read = operator.get("/sandbox/clock")
    assert read.status_code == 200
    assert set(read.json()) == {"now"}
    before = parse_time(read.json()["now"])

    advanced = operator.post("/sandbox/clock/advance", {"seconds": 60})
    assert advanced.status_code == 200, advanced.text
    moved = parse_time(advanced.json()["now"])
    assert moved - before >= timedelta(seconds=60)
    assert moved - before < timedelta(seconds=60 + 30)
    assert service_now(operator) >= moved

    zero = operator.post("/sandbox/clock/advance", {"seconds": 0})
    assert zero.status_code == 200
    fractional = operator.post("/sandbox/clock/advance", {"seconds": 0.5})
    assert fractional.status_code == 200
    assert parse_time(fractional.json()["now"]) >= moved + timedelta(seconds=0.5)


@pytest.mark.parametrize("seconds", [-1, -0.5, "60", None, [60]])
def test_clock_advance_needs_a_non_negative_number(operator: Operator, seconds: object) -> None:
    before = service_now(operator)
    assert_invalid(operator.post("/sandbox/clock/advance", {"seconds": seconds}), "seconds")
    assert service_now(operator) - before < timedelta(seconds=30)


def test_clock_advance_needs_seconds(operator: Operator) -> None:
    assert_invalid(operator.post("/sandbox/clock/advance", {}), "seconds")


def test_transfers_are_timestamped_by_the_service_clock(operator: Operator) -> None:
    merchant = operator.new_merchant(currencies=("GBP",))
    gbp = merchant.accounts["GBP"]
    advanced = operator.post("/sandbox/clock/advance", {"seconds": 120})
    assert advanced.status_code == 200
    after_advance = parse_time(advanced.json()["now"])
    assert operator.post("/sandbox/bank-transfers", _transfer(gbp, 3)).status_code == 201
    token = fresh_token(merchant)["access_token"]
    listed = merchant.http.get(
        f"/v3/merchant-accounts/{gbp['id']}/transactions", headers=bearer(token)
    )
    assert listed.status_code == 200
    (item,) = listed.json()["items"]
    assert parse_time(item["created_at"]) >= after_advance


def test_largest_amount_is_credited(operator: Operator) -> None:
    merchant = operator.new_merchant("Whale", currencies=("GBP",))
    answer = operator.post(
        "/sandbox/bank-transfers", _transfer(merchant.accounts["GBP"], MAX_AMOUNT)
    )
    assert answer.status_code == 201, answer.text
    assert _balances(merchant)["GBP"] == (MAX_AMOUNT, MAX_AMOUNT)


def test_one_merchants_huge_top_ups_do_not_block_other_merchants(operator: Operator) -> None:
    for name in ("Whale One", "Whale Two"):
        whale = operator.new_merchant(name, currencies=("EUR",))
        answer = operator.post(
            "/sandbox/bank-transfers", _transfer(whale.accounts["EUR"], MAX_AMOUNT)
        )
        assert answer.status_code == 201, answer.text
    minnow = operator.new_merchant("Minnow", currencies=("EUR",))
    answer = operator.post("/sandbox/bank-transfers", _transfer(minnow.accounts["EUR"], 1_000))
    assert answer.status_code == 201, answer.text
    assert _balances(minnow)["EUR"] == (1_000, 1_000)


def test_top_up_past_the_largest_balance_is_a_client_error(operator: Operator) -> None:
    merchant = operator.new_merchant("Full", currencies=("GBP",))
    account = merchant.accounts["GBP"]
    assert (
        operator.post("/sandbox/bank-transfers", _transfer(account, MAX_AMOUNT)).status_code == 201
    )
    key = {"Idempotency-Key": str(uuid.uuid4())}
    overflow = operator.post("/sandbox/bank-transfers", _transfer(account, 1_000), **key)
    assert 400 <= overflow.status_code < 500, overflow.text
    assert_problem(overflow, overflow.status_code)
    assert _balances(merchant)["GBP"] == (MAX_AMOUNT, MAX_AMOUNT)
    again = operator.post("/sandbox/bank-transfers", _transfer(account, 1_000), **key)
    assert again.status_code == overflow.status_code
    assert _balances(merchant)["GBP"] == (MAX_AMOUNT, MAX_AMOUNT)
    assert operator.get("/admin/ledger/check").json() == {"ok": True, "violations": []}
