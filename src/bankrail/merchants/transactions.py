"""How `GET /v3/merchant-accounts/{id}/transactions` shows an account's movements: the real
API's item shapes (docs/api.md "Merchant account transactions").

The account's activity list (`merchants.activity`) records each movement with what its area
knew; this module renders a row of it as one item:

- a settled pay-in: `merchant_account_payment` with its `payment_source`;
- an incoming transfer (a top-up, or an internal transfer from another account here):
  `external_payment` with its `remitter`;
- a payout: `payout` with its `beneficiary`, `context_code` and `payout_id`;
- a refund: `refund` with its `refund_id` and `payment_id`.

Payouts and refunds are `pending` until `executed`; one that failed moved no money and is not
listed. Pay-ins are listed once `settled`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from schwifty import IBAN

from bankrail.core.timefmt import iso_utc
from bankrail.merchants.models import AccountIdentifiers

# The filter values of `type`: the item types, and the names the list took before (kept).
TYPE_FILTERS: dict[str, str] = {
    "merchant_account_payment": "payment",
    "payment": "payment",
    "external_payment": "topup",
    "topup": "topup",
    "payout": "payout",
    "refund": "refund",
}

# The activity rows that moved no money (a failed payout or refund) are left out.
LISTED = "NOT (a.type IN ('payout', 'refund') AND a.status = 'failed')"

# The payment source of a pay-in's row (NULL columns for the other rows).
SOURCE_JOIN = (
    " LEFT JOIN payment_sources s ON a.type = 'payment'"
    " AND s.id = (a.details ->> 'payment_source_id')::uuid"
)
SOURCE_COLUMNS = (
    "s.id AS source_id, s.user_id AS source_user_id, s.account_holder_name AS source_name,"
    " s.iban AS source_iban, s.sort_code AS source_sort_code,"
    " s.account_number AS source_account_number"
)


def remitter_identifier(name: str, iban: str | None, currency: str) -> dict[str, str]:
    """The `account_identifier` of an incoming transfer's remitter: its IBAN when the
    transfer named one, else an identifier generated from the remitter's name, stable for
    that name, of the receiving account's scheme (sort code and account number for GBP, an
    IBAN otherwise)."""
    if iban:
        return {"type": "iban", "iban": iban}
    digits = str(int(hashlib.sha256(name.strip().casefold().encode()).hexdigest(), 16))
    if currency == "GBP":
        return {
            "type": "sort_code_account_number",
            "sort_code": "04" + digits[:4],
            "account_number": digits[4:12],
        }
    generated = IBAN.generate("NL", bank_code="RMTR", account_code=digits[:10])
    return {"type": "iban", "iban": str(generated)}


def _money_status(status: str) -> str:
    """A payout's or refund's item status: `executed` once it is, else `pending`."""
    return "executed" if status == "executed" else "pending"


def render_item(row: Any) -> dict[str, Any]:
    """One activity row (with the `SOURCE_COLUMNS` of a pay-in's source) as a v3 item."""
    details: dict[str, Any] = row["details"]
    item: dict[str, Any] = {
        "id": str(row["id"]),
        "currency": row["currency"],
        "amount_in_minor": row["amount_in_minor"],
        "created_at": iso_utc(row["created_at"]),
    }
    kind = row["type"]
    if kind == "payment":
        return {**item, **_pay_in(row, details)}
    if kind == "topup":
        return {
            **item,
            "type": "external_payment",
            "status": "settled",
            "settled_at": details.get("settled_at"),
            "remitter": {
                "account_holder_name": details.get("remitter_name"),
                "account_identifier": remitter_identifier(
                    details.get("remitter_name") or "",
                    details.get("remitter_iban"),
                    row["currency"],
                ),
                "reference": details.get("reference"),
            },
        }
    status = _money_status(row["status"])
    if kind == "refund":
        item.update(type="refund", status=status, payment_id=details.get("payment_id"))
        item["refund_id"] = str(row["id"])
    else:
        item.update(type="payout", status=status, payout_id=str(row["id"]))
        item["beneficiary"] = details.get("beneficiary") or _v1_beneficiary(details)
        item["context_code"] = details.get("context_code") or "withdrawal"
    if status == "executed" and details.get("executed_at"):
        item["executed_at"] = details["executed_at"]
    return item


def _pay_in(row: Any, details: dict[str, Any]) -> dict[str, Any]:
    source = None
    if row["source_id"] is not None:
        identifiers = AccountIdentifiers(
            row["source_iban"] or "", row["source_sort_code"], row["source_account_number"]
        )
        source = {
            "id": str(row["source_id"]),
            "user_id": row["source_user_id"],
            "account_identifiers": identifiers.as_list(),
            "account_holder_name": row["source_name"],
        }
    return {
        "type": "merchant_account_payment",
        "status": "settled",
        "settled_at": details.get("settled_at"),
        "payment_id": str(row["id"]),
        "payment_source": source,
    }


def _v1_beneficiary(details: dict[str, Any]) -> dict[str, Any]:
    """The beneficiary of a payout recorded before its activity kept one."""
    return {
        "type": "external_account",
        "reference": details.get("reference"),
        "account_holder_name": details.get("beneficiary_name"),
        "account_identifier": {"type": "iban", "iban": details.get("beneficiary_iban")},
    }
