"""The payment resource as `GET /v3/payments/{id}` and each item of `GET /v3/payments` write
it (bankrail.payments._store `render_row`, docs/api.md "Payments API v3 — pay-ins"), from a
row as the one statement (`DOCUMENT_SELECT`) reads it: timestamps already in the API's format,
the payment source joined (the statement itself:
tests/integration/payments/test_payment_document_db.py)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from bankrail.core.jsonbody import dumps
from bankrail.merchants.models import AccountIdentifiers
from bankrail.payments._store import render_row
from bankrail.payments.sources import PaymentSource

PAYMENT_ID = uuid.UUID("01a2205a-adcd-7ce7-bad6-9363bb73a09a")
ACCOUNT_ID = "01a2205a-9b73-728b-9026-4784930b7a73"
SOURCE_ID = uuid.UUID("01a2205a-b7b8-7422-bea9-61551ac05008")
HISTORY = [
    {"at": "2026-11-28T04:12:23.361488Z", "status": "authorized"},
    {"at": "2026-11-28T04:12:25.902305Z", "status": "payment_executed"},
    {"at": "2026-11-28T04:12:30.000000Z", "status": "payment_settled"},
]


def _settled_row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": PAYMENT_ID,
        "merchant_account_id": ACCOUNT_ID,
        "amount_in_minor": 100,
        "currency": "GBP",
        "user_id": "payer-1",
        "selection_type": "user_selected",
        "selection_filter": None,
        "provider_id": "mock-payments-gb-redirect",
        "scheme_id": "faster_payments_service",
        "metadata": {"order": "A, 1: first"},
        "status": "payment_settled",
        "failure_stage": None,
        "failure_reason": None,
        "history": HISTORY,
        "refunded_amount_in_minor": 0,
        "mandate_id": None,
        "mandate_reference": None,
        "mandate_retry": None,
        "user_interaction": None,
        "sent": {
            "provider_selection": {"type": "user_selected"},
            "beneficiary": {"type": "merchant_account", "merchant_account_id": ACCOUNT_ID},
        },
        "next_action": None,
        "created_at_utc": "2026-11-28T04:12:23.361488Z",
        "authorized_at_utc": "2026-11-28T04:12:23.361488Z",
        "executed_at_utc": "2026-11-28T04:12:25.902305Z",
        "settled_at_utc": "2026-11-28T04:12:30.000000Z",
        "failed_at_utc": None,
        "source_id": str(SOURCE_ID),
        "source_holder": "Sandbox Payer",
        "source_iban": "GB04MOCK04000462878312",
        "source_sort_code": "040004",
        "source_account_number": "62878312",
    }
    row.update(changes)
    return row


def test_the_status_history_is_written_as_read() -> None:
    body = dumps(render_row(_settled_row()))

    assert b'"status_history":' + dumps(HISTORY) + b',"metadata"' in body
    assert json.loads(body)["status_history"] == HISTORY


def test_a_settled_payment_shows_its_timestamps_and_its_payment_source() -> None:
    payment = json.loads(dumps(render_row(_settled_row())))

    source = PaymentSource(
        SOURCE_ID,
        "payer-1",
        "Sandbox Payer",
        AccountIdentifiers("GB04MOCK04000462878312", "040004", "62878312"),
    )
    assert payment["payment_source"] == source.to_api()
    assert payment["metadata"] == {"order": "A, 1: first"}
    assert payment["settled_at"] == payment["creditable_at"] == "2026-11-28T04:12:30.000000Z"
    assert "failed_at" not in payment
    assert payment["merchant_account_id"] == ACCOUNT_ID
    assert payment["payment_method"]["provider_selection"] == {
        "type": "user_selected",
        "provider_id": "mock-payments-gb-redirect",
        "scheme_id": "faster_payments_service",
    }


def test_a_payment_without_a_source_has_no_payment_source() -> None:
    payment = render_row(_settled_row(status="authorization_required", source_id=None))

    assert "payment_source" not in payment
