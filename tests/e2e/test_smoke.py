"""A newcomer's first steps: token, accounts, top-up, balances."""

from __future__ import annotations

from support.api import Operator


def test_token_then_merchant_accounts_then_top_up(operator: Operator) -> None:
    merchant = operator.new_merchant()
    listed = merchant.get("/v3/merchant-accounts")
    assert listed.status_code == 200
    assert {a["currency"] for a in listed.json()["items"]} == {"GBP", "EUR"}
    gbp = merchant.accounts["GBP"]
    assert operator.top_up(gbp, 12_345).status_code == 201
    account = merchant.get(f"/v3/merchant-accounts/{gbp['id']}").json()
    assert account["current_balance_in_minor"] == 12_345
    assert account["available_balance_in_minor"] == 12_345
    assert operator.get("/admin/ledger/check").json() == {"ok": True, "violations": []}
