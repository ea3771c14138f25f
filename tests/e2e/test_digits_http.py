"""Numbers written in identifiers are ASCII digits: a sort code, an account number or a date
of birth written in another script's digits ("١٢٣٤٥٦") is refused with a 400 naming the field.
Over HTTP here for a payout, a mandate, a payment and a sandbox transfer; the other schema
fields and the console's form fields in tests/unit/http/test_ascii_digits.py."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

from e2e_helpers import assert_invalid
from pay_in_helpers import payment_body
from payout_helpers import external_beneficiary, payout_body

from support.api import Operator

ARABIC_INDIC = "١٢٣٤٥٦"  # six digits, as Python's and pydantic's \d match them
SDK_BODIES = Path(__file__).parents[1] / "fixtures" / "sdk-bodies"


def _scan(sort_code: str) -> dict[str, str]:
    return {
        "type": "sort_code_account_number",
        "sort_code": sort_code,
        "account_number": "10003957",
    }


def test_a_payouts_sort_code_is_ascii_digits(operator: Operator) -> None:
    merchant = operator.new_merchant()

    def payout(sort_code: str) -> dict[str, Any]:
        return payout_body(merchant, "GBP", 100, external_beneficiary(_scan(sort_code)))

    answer = merchant.signed_post("/v3/payouts", payout(ARABIC_INDIC))
    assert_invalid(answer, "beneficiary.account_identifier")
    assert merchant.signed_post("/v3/payouts", payout("140662")).status_code == 202


def test_a_mandates_sort_code_is_ascii_digits(operator: Operator) -> None:
    merchant = operator.new_merchant()
    fixture = json.loads((SDK_BODIES / "dotnet-mandate-sweeping-preselected.json").read_text())
    body = copy.deepcopy(fixture["body"])
    body["mandate"]["beneficiary"]["account_identifier"] = _scan(ARABIC_INDIC)
    assert_invalid(merchant.signed_post("/v3/mandates", body), "mandate.beneficiary")
    body["mandate"]["beneficiary"]["account_identifier"] = _scan("140662")
    assert merchant.signed_post("/v3/mandates", body).status_code == 201


def test_a_payers_date_of_birth_is_ascii_digits(operator: Operator) -> None:
    merchant = operator.new_merchant()
    user = {"id": str(uuid.uuid4()), "name": "Ada", "date_of_birth": "١٩٩٠-01-01"}
    body = payment_body(merchant, user=user)
    assert_invalid(merchant.signed_post("/v3/payments", body), "user.date_of_birth")
    user["date_of_birth"] = "1990-01-01"
    assert merchant.signed_post("/v3/payments", body).status_code == 201


def test_a_sandbox_transfers_sort_code_is_ascii_digits(operator: Operator) -> None:
    operator.new_merchant()
    transfer = {
        "sort_code": ARABIC_INDIC,
        "account_number": "10003957",
        "amount_in_minor": 100,
        "currency": "GBP",
        "remitter_name": "Ada",
        "reference": "digits",
    }
    answer = operator.post("/sandbox/bank-transfers", transfer, **{"Idempotency-Key": "d1"})
    assert_invalid(answer, "sort_code")
