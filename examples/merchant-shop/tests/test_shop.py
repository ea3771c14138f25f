"""The shop against a real Bankrail: the plugin's server, merchant, client and webhooks."""

from __future__ import annotations

import time
import uuid
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from shop import Shop, ShopError


def pay_at_the_bank(client: httpx.Client, payment_id: str, bank_page: str) -> None:
    """The customer approves the payment at the mock bank (its headless API)."""
    token = parse_qs(urlsplit(bank_page).fragment)["token"][0]
    answer = client.post(
        f"/mock-bank/api/single-immediate-payments/{payment_id}/action",
        json={"action": "Execute"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 202, answer.text


def deposit(shop: Shop, webhooks, user_id: str, amount: int) -> dict:
    payment_id, bank_page = shop.start_deposit(user_id, amount)
    pay_at_the_bank(shop.client, payment_id, bank_page)
    settled = webhooks.wait_for("payment_settled", timeout=30, payment_id=payment_id)
    assert shop.handle_webhook(settled)
    return settled


def test_a_deposit_credits_the_wallet_once_however_often_its_webhook_comes(
    shop, bankrail_webhooks, bankrail_operator
):
    user_id = str(uuid.uuid4())
    settled = deposit(shop, bankrail_webhooks, user_id, 2_500)
    assert shop.wallets[user_id] == 2_500

    # Bankrail delivers at least once: replay the delivery, as a retry would send it again.
    deliveries = bankrail_operator.get(
        "/admin/webhook-deliveries", params={"event_id": settled["event_id"]}
    ).json()["items"]
    delivery = f"/admin/webhook-deliveries/{deliveries[0]['id']}"
    # The shop has the webhook; Bankrail refuses a replay (409) until it has recorded how that
    # attempt ended, so wait for that first.
    deadline = time.monotonic() + 30
    while bankrail_operator.get(delivery).json()["status"] != "delivered":
        assert time.monotonic() < deadline, "the delivery was never recorded as delivered"
        time.sleep(0.05)
    replayed = bankrail_operator.post(f"{delivery}/replay")
    assert replayed.status_code == 202, replayed.text
    first, again = bankrail_webhooks.wait_for_all(
        "payment_settled", 2, timeout=30, event_id=settled["event_id"]
    )
    assert again == first
    assert not shop.handle_webhook(again)
    assert shop.wallets[user_id] == 2_500


def test_a_withdrawal_pays_back_the_account_the_customer_paid_from(
    shop, bankrail_webhooks, bankrail_client
):
    user_id = str(uuid.uuid4())
    settled = deposit(shop, bankrail_webhooks, user_id, 3_000)
    payout_id = shop.withdraw(user_id, 1_000)
    assert shop.wallets[user_id] == 2_000

    executed = bankrail_webhooks.wait_for("payout_executed", timeout=30, payout_id=payout_id)
    assert shop.handle_webhook(executed)
    assert shop.withdrawals[payout_id].status == "executed"
    payout = bankrail_client.get(f"/v3/payouts/{payout_id}").json()
    assert payout["beneficiary"]["payment_source_id"] == settled["payment_source"]["id"]


def test_a_failed_withdrawal_gives_the_money_back(shop, bankrail_webhooks):
    user_id = str(uuid.uuid4())
    deposit(shop, bankrail_webhooks, user_id, 1_500)
    # The sandbox fails a payout whose reference carries this token.
    payout_id = shop.withdraw(user_id, 1_500, reference="fail:scheme_error")
    assert shop.wallets[user_id] == 0

    failed = bankrail_webhooks.wait_for("payout_failed", timeout=30, payout_id=payout_id)
    assert failed["failure_reason"] == "scheme_error"
    assert shop.handle_webhook(failed)
    assert shop.withdrawals[payout_id].status == "failed"
    assert shop.wallets[user_id] == 1_500


def test_no_withdrawal_beyond_the_wallet(shop, bankrail_webhooks):
    user_id = str(uuid.uuid4())
    deposit(shop, bankrail_webhooks, user_id, 500)
    with pytest.raises(ShopError):
        shop.withdraw(user_id, 501)
    assert shop.withdrawals == {}
