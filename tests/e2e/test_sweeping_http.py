"""Sweeping over HTTP (fidelity MA1, docs/api.md "Sweeping"): the settings as the SDKs set,
read and delete them, the destination the operator approves (a generated one in sandbox
mode), and sweeps that run on the service clock as payouts of the one payout path."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from e2e_helpers import assert_invalid, assert_problem, get_record
from pay_in_helpers import advance_clock
from payout_helpers import funded_merchant
from schwifty import IBAN
from sdk_requests import sdk_request

from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver
from support.waiting import wait_for

DAY = 86_400


def _path(merchant: MerchantClient, currency: str = "GBP") -> str:
    return f"/v3/merchant-accounts/{merchant.accounts[currency]['id']}/sweeping"


def signed_delete(merchant: MerchantClient, path: str) -> httpx.Response:
    """A signed DELETE without a body, `Idempotency-Key` in `tl_headers` (as the SDKs send)."""
    key = str(uuid.uuid4())
    headers = {
        "Authorization": f"Bearer {merchant.token()}",
        "Idempotency-Key": key,
        "Svc-Signature": merchant.sign("DELETE", path, b"", {"Idempotency-Key": key}),
    }
    return merchant.http.delete(path, headers=headers)


def _set(merchant: MerchantClient, body: dict[str, Any], currency: str = "GBP") -> None:
    answer = merchant.signed_post(_path(merchant, currency), body)
    assert answer.status_code == 200, answer.text


def _settings(merchant: MerchantClient, currency: str = "GBP") -> dict[str, Any]:
    return get_record(merchant, _path(merchant, currency))


def test_java_sets_sweeping_and_reads_it_back_with_a_generated_destination(
    operator: Operator,
) -> None:
    merchant = operator.new_merchant()
    path, body = sdk_request("java-sweeping-update", merchant)
    answer = merchant.signed_post(path, body)
    assert answer.status_code == 200, answer.text
    settings = _settings(merchant)
    assert set(settings) == {"max_amount_in_minor", "currency", "frequency", "destination"}
    assert (settings["max_amount_in_minor"], settings["currency"], settings["frequency"]) == (
        100,
        "GBP",
        "daily",
    )
    destination = settings["destination"]
    assert destination["type"] == "iban"
    iban = IBAN(destination["iban"])  # valid, or schwifty raises
    assert iban.country_code == "GB"
    assert _settings(merchant) == settings, "the generated destination is stable"


def test_rust_sets_sweeping_for_each_currency(operator: Operator) -> None:
    merchant = operator.new_merchant()
    path, body = sdk_request("rust-sweeping-setup", merchant)
    _set(merchant, body)
    settings = _settings(merchant)
    assert {k: settings[k] for k in body} == body
    _set(merchant, {"max_amount_in_minor": 5, "currency": "EUR", "frequency": "weekly"}, "EUR")
    euro = _settings(merchant, "EUR")
    assert euro["frequency"] == "weekly"
    assert IBAN(euro["destination"]["iban"]).country_code != "GB"
    assert path == _path(merchant)


def test_delete_answers_204_with_or_without_settings_and_get_is_then_404(
    operator: Operator,
) -> None:
    merchant = operator.new_merchant()
    assert_problem(merchant.get(_path(merchant)), 404)
    assert signed_delete(merchant, _path(merchant)).status_code == 204
    _set(merchant, {"max_amount_in_minor": 1, "frequency": "weekly"})
    assert _settings(merchant)["frequency"] == "weekly"
    assert signed_delete(merchant, _path(merchant)).status_code == 204
    assert_problem(merchant.get(_path(merchant)), 404)


def test_sweeping_is_set_read_and_deleted_without_the_v3_prefix(operator: Operator) -> None:
    # fidelity A: the same routes answer at the path without `/v3`, signed over the path as
    # sent, with the same answers as under `/v3`.
    merchant = operator.new_merchant()
    short = _path(merchant).removeprefix("/v3")
    answer = merchant.signed_post(short, {"max_amount_in_minor": 7, "frequency": "daily"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["max_amount_in_minor"] == 7
    assert get_record(merchant, short) == _settings(merchant) == answer.json()
    assert signed_delete(merchant, short).status_code == 204
    assert_problem(merchant.get(short), 404)
    assert_problem(merchant.get(_path(merchant)), 404)


def test_bad_settings_are_400_naming_the_field(operator: Operator) -> None:
    merchant = operator.new_merchant()
    path = _path(merchant)
    bad_currency = {"max_amount_in_minor": 1, "currency": "EUR", "frequency": "daily"}
    assert_invalid(merchant.signed_post(path, bad_currency), "currency")
    monthly = {"max_amount_in_minor": 1, "frequency": "monthly"}
    assert_invalid(merchant.signed_post(path, monthly), "frequency")
    negative = {"max_amount_in_minor": -1, "frequency": "daily"}
    assert_invalid(merchant.signed_post(path, negative), "max_amount_in_minor")
    assert_problem(merchant.get(path), 404)


@pytest.mark.parametrize("account_id", ["non-existent-merchant-account", str(uuid.uuid4())])
def test_an_unknown_or_foreign_account_is_404(operator: Operator, account_id: str) -> None:
    merchant = operator.new_merchant()
    other = operator.new_merchant()
    for target in (account_id, other.accounts["GBP"]["id"]):
        path = f"/v3/merchant-accounts/{target}/sweeping"
        assert_problem(merchant.get(path), 404)
        body = {"max_amount_in_minor": 1, "frequency": "daily"}
        assert_problem(merchant.signed_post(path, body), 404)
        assert_problem(signed_delete(merchant, path), 404)
    assert_problem(other.get(f"/v3/merchant-accounts/{other.accounts['GBP']['id']}/sweeping"), 404)


def test_the_operator_approves_the_destination(operator: Operator) -> None:
    merchant = operator.new_merchant()
    account_id = merchant.accounts["GBP"]["id"]
    admin_path = f"/admin/merchant-accounts/{account_id}/sweeping-destination"
    _set(merchant, {"max_amount_in_minor": 1, "frequency": "daily"})
    generated = _settings(merchant)["destination"]["iban"]

    assert_invalid(operator.put(admin_path, {"iban": "DE89370400440532013000"}), "iban")
    assert_invalid(operator.put(admin_path, {"iban": "GB29NWBK60161331926818"}), "iban")
    answer = operator.put(admin_path, {"iban": "gb29 nwbk 6016 1331 9268 19"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "approved_iban": "GB29NWBK60161331926819",
        "iban": "GB29NWBK60161331926819",
    }
    assert _settings(merchant)["destination"] == {"type": "iban", "iban": "GB29NWBK60161331926819"}

    answer = operator.put(admin_path, {"iban": None})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"approved_iban": None, "iban": generated}
    assert _settings(merchant)["destination"]["iban"] == generated
    assert (
        operator.put(
            f"/admin/merchant-accounts/{uuid.uuid4()}/sweeping-destination", {"iban": None}
        ).status_code
        == 404
    )


def _payouts_to(merchant: MerchantClient, iban: str) -> list[dict[str, Any]]:
    merchant.forget_token()  # the clock moved past the cached token's hour
    items = get_record(merchant, "/v3/payouts")["items"]
    return [p for p in items if p["beneficiary"].get("account_identifier", {}).get("iban") == iban]


def _executed_sweeps(merchant: MerchantClient, iban: str, count: int) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        found = _payouts_to(merchant, iban)
        done = [p for p in found if p["status"] == "executed"]
        return found if len(found) == count and len(done) == count else None

    return wait_for(check, timeout=30, what=f"{count} executed sweeps")


def test_sweeps_pay_the_excess_at_each_period_end(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, gbp=10_000)
    _set(merchant, {"max_amount_in_minor": 3_000, "frequency": "daily"})
    iban = _settings(merchant)["destination"]["iban"]

    advance_clock(operator, DAY - 60)
    assert _payouts_to(merchant, iban) == [], "no sweep before the period ends"
    advance_clock(operator, 61)
    (sweep,) = _executed_sweeps(merchant, iban, 1)
    assert sweep["amount_in_minor"] == 7_000
    assert sweep["beneficiary"]["reference"] == "sweep"
    assert sweep["scheme_id"] == "faster_payments_service"
    account = get_record(merchant, f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}")
    assert account["current_balance_in_minor"] == 3_000

    def webhook() -> dict[str, Any] | None:
        events = [r.json() for r in receiver.snapshot()]
        return next((e for e in events if e.get("payout_id") == sweep["id"]), None)

    assert wait_for(webhook, timeout=20, what="the sweep's webhook")["type"] == "payout_executed"
    listed = get_record(
        merchant, f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}/transactions"
    )["items"]
    item = next(i for i in listed if i["id"] == sweep["id"])
    assert (item["type"], item["context_code"], item["payout_id"]) == (
        "payout",
        "internal",
        sweep["id"],
    )

    # At the next period's end the balance is at the maximum: nothing to sweep. A top-up
    # above it is swept at the end of the period after.
    advance_clock(operator, DAY)
    assert operator.top_up(merchant.accounts["GBP"], 500).status_code == 201
    advance_clock(operator, DAY)
    sweeps = _executed_sweeps(merchant, iban, 2)
    assert sorted(p["amount_in_minor"] for p in sweeps) == [500, 7_000]
    ledger = operator.get("/admin/ledger/check")
    assert ledger.json()["ok"] is True, ledger.text


def test_deleted_sweeping_sweeps_no_more(operator: Operator) -> None:
    merchant = funded_merchant(operator, gbp=10_000)
    _set(merchant, {"max_amount_in_minor": 0, "frequency": "weekly"})
    iban = _settings(merchant)["destination"]["iban"]
    assert signed_delete(merchant, _path(merchant)).status_code == 204
    advance_clock(operator, 7 * DAY + 1)
    # A sweep of another merchant made after this clock move shows its jobs have run.
    other = funded_merchant(operator, gbp=200)
    _set(other, {"max_amount_in_minor": 100, "frequency": "daily"})
    others = _settings(other)["destination"]["iban"]
    advance_clock(operator, DAY + 1)
    _executed_sweeps(other, others, 1)
    assert _payouts_to(merchant, iban) == []
