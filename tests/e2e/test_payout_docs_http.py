"""The examples of docs/api.md's "Payouts" and "Sweeping" sections, sent as written against
`bankrail serve`: every payout body of the section (open loop, with scheme selection and
sub-merchants, closed loop, to the paying account itself) is accepted and executes, and the
sweeping settings read back as shown. Only what a reader must change is changed: the
merchant account id, a closed-loop payout's payment source and user (from a settled pay-in),
and the identifiers of the account paying itself. (The verified payout's examples are run by
test_verified_payouts_http.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import get_record
from pay_in_helpers import authorised_pay_in, settled_payment
from payout_helpers import PATH, wait_payout_status

from support.api import MerchantClient, Operator

API_DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"
SELF_REFERENCE = "to our own account"


def _section(title: str, until: str) -> str:
    text = API_DOCS.read_text()
    start = text.index(f"\n{title}\n")
    return text[start : text.index(f"\n{until}\n", start)]


def _json_blocks(section: str) -> list[dict[str, Any]]:
    return [json.loads(b) for b in re.findall(r"^```json\n(.*?)^```", section, re.M | re.S)]


PAYOUT_BODIES = [
    block
    for block in _json_blocks(_section("## Payouts", "### Verified payouts"))
    if "beneficiary" in block and "status" not in block and "id" not in block
]


def test_the_section_shows_each_kind_of_payout() -> None:
    kinds = {body["beneficiary"]["type"] for body in PAYOUT_BODIES}
    assert kinds == {"external_account", "payment_source"}
    assert any("scheme_selection" in b and "sub_merchants" in b for b in PAYOUT_BODIES)
    assert any(b["beneficiary"].get("reference") == SELF_REFERENCE for b in PAYOUT_BODIES)


def _as_sent(merchant: MerchantClient, body: dict[str, Any]) -> dict[str, Any]:
    """The example as a reader sends it from their own merchant."""
    account = merchant.accounts["GBP"]
    sent = {**body, "merchant_account_id": account["id"]}
    beneficiary = dict(sent["beneficiary"])
    if beneficiary["type"] == "payment_source":
        user = {"id": beneficiary["user_id"], "name": "Docs Payer", "email": "d@example.com"}
        payment = settled_payment(merchant, authorised_pay_in(merchant, 1_000, user))
        beneficiary["payment_source_id"] = payment["payment_source"]["id"]
    elif beneficiary.get("reference") == SELF_REFERENCE:
        (own,) = [
            i for i in account["account_identifiers"] if i["type"] == "sort_code_account_number"
        ]
        beneficiary["account_identifier"] = own
    sent["beneficiary"] = beneficiary
    return sent


@pytest.mark.parametrize(
    "body",
    PAYOUT_BODIES,
    ids=[f"{b['beneficiary']['type']}-{b['beneficiary']['reference']}" for b in PAYOUT_BODIES],
)
def test_each_payout_example_is_accepted_and_executes(
    operator: Operator, body: dict[str, Any]
) -> None:
    merchant = operator.new_merchant("Docs Payouts Ltd")
    assert operator.top_up(merchant.accounts["GBP"], 10_000).status_code == 201
    sent = _as_sent(merchant, body)
    answer = merchant.signed_post(PATH, sent)
    assert answer.status_code == 202, answer.text
    assert set(answer.json()) == {"id"}
    payout = wait_payout_status(merchant, answer.json()["id"], {"executed", "failed"})
    assert payout["status"] == "executed", payout
    assert payout.get("metadata") == body.get("metadata")
    for echoed in ("scheme_selection", "sub_merchants"):
        assert payout.get(echoed) == body.get(echoed)
    if body["beneficiary"].get("reference") == SELF_REFERENCE:
        assert payout["scheme_id"] == "internal_transfer"


def test_the_sweeping_example_reads_back_as_shown(operator: Operator) -> None:
    merchant = operator.new_merchant("Docs Sweeping Ltd")
    settings, shown = _json_blocks(_section("### Sweeping", "## Payouts"))
    path = f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}/sweeping"
    answer = merchant.signed_post(path, settings)
    assert answer.status_code == 200, answer.text
    read = get_record(merchant, path)
    assert read["destination"]["type"] == shown["destination"]["type"]
    assert {k: v for k, v in read.items() if k != "destination"} == {
        k: v for k, v in shown.items() if k != "destination"
    }
    assert answer.json() == read
