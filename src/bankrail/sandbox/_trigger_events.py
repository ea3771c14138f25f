"""The events `bankrail trigger` can make happen (`EVENTS`), each with its recipe: the real
objects to create over HTTP (pay-ins through the mock bank, payouts, refunds, mandates,
balance thresholds, bank transfers) and the webhook payload that shows the event came."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bankrail.sandbox._trigger_session import Session, Triggered, TriggerError
from bankrail.testing import OperatorError, mock_bank_pay_in

__all__ = ["EVENTS", "Event"]

# Payees of the payouts made here (valid identifiers outside Bankrail).
_SORT_CODE = {
    "type": "sort_code_account_number",
    "sort_code": "040004",
    "account_number": "12345678",
}
_IBANS = {"GBP": "GB29NWBK60161331926819", "EUR": "DE89370400440532013000"}
_AMOUNT = 1_000
_PROVIDER_GB = "mock-payments-gb-redirect"
_RETURN_URI = "https://merchant.example/return"


def _v3(field_name: str, value: str) -> Callable[[dict[str, Any]], bool]:
    return lambda payload: "type" in payload and payload.get(field_name) == value


def _v1(field_name: str, value: str) -> Callable[[dict[str, Any]], bool]:
    return lambda payload: (
        "event_type" in payload and (payload.get("event_body") or {}).get(field_name) == value
    )


def _pay_in(action: str) -> Callable[[Session, str, float], Triggered]:
    def run(session: Session, event: str, timeout: float) -> Triggered:
        account = session.account("GBP", "EUR")
        try:
            payment_id = mock_bank_pay_in(
                session.client, account["id"], _AMOUNT, account["currency"], action=action
            )
        except OperatorError as exc:
            raise TriggerError(str(exc)) from None
        created = {"payment_id": payment_id, "merchant_account_id": account["id"]}
        delivery = session.wait_event(event, _v3("payment_id", payment_id), timeout)
        return Triggered(event, session.merchant_id, created, delivery)

    return run


def _v3_payout(reference: str) -> Callable[[Session, str, float], Triggered]:
    def run(session: Session, event: str, timeout: float) -> Triggered:
        account = session.account("GBP", "EUR")
        currency = account["currency"]
        session.top_up(account, _AMOUNT, "trigger funding")
        identifier = _SORT_CODE if currency == "GBP" else {"type": "iban", "iban": _IBANS["EUR"]}
        body = {
            "merchant_account_id": account["id"],
            "amount_in_minor": _AMOUNT,
            "currency": currency,
            "beneficiary": {
                "type": "external_account",
                "reference": reference,
                "account_holder_name": "Trigger Payee",
                "account_identifier": identifier,
            },
        }
        payout_id = session.ok(session.client.post("/v3/payouts", json=body), 202)["id"]
        created = {"payout_id": payout_id, "merchant_account_id": account["id"]}
        delivery = session.wait_event(event, _v3("payout_id", payout_id), timeout)
        return Triggered(event, session.merchant_id, created, delivery)

    return run


def _refund(reference: str) -> Callable[[Session, str, float], Triggered]:
    def run(session: Session, event: str, timeout: float) -> Triggered:
        account = session.account("GBP", "EUR")
        try:
            payment_id = mock_bank_pay_in(
                session.client, account["id"], _AMOUNT, account["currency"]
            )
        except OperatorError as exc:
            raise TriggerError(str(exc)) from None
        session.wait_event("payment_settled", _v3("payment_id", payment_id), timeout)
        body = {"amount_in_minor": _AMOUNT, "reference": reference}
        path = f"/v3/payments/{payment_id}/refunds"
        refund_id = session.ok(session.client.post(path, json=body), 201)["id"]
        created = {
            "payment_id": payment_id,
            "refund_id": refund_id,
            "merchant_account_id": account["id"],
        }
        delivery = session.wait_event(event, _v3("refund_id", refund_id), timeout)
        return Triggered(event, session.merchant_id, created, delivery)

    return run


def _mandate(action: str, *, revoke: bool = False) -> Callable[[Session, str, float], Triggered]:
    def run(session: Session, event: str, timeout: float) -> Triggered:
        account = session.account("GBP")
        body = {
            "mandate": {
                "type": "commercial",
                "provider_selection": {"type": "preselected", "provider_id": _PROVIDER_GB},
                "beneficiary": {"type": "merchant_account", "merchant_account_id": account["id"]},
                "reference": "trigger",
            },
            "currency": "GBP",
            "user": {"id": f"trigger-{uuid.uuid4().hex[:12]}", "name": "Trigger Payer"},
            "constraints": {
                "maximum_individual_amount": _AMOUNT,
                "periodic_limits": {
                    "month": {"maximum_amount": 10 * _AMOUNT, "period_alignment": "calendar"}
                },
            },
        }
        mandate_id = session.ok(session.client.post("/v3/mandates", json=body), 201)["id"]
        flow = {"provider_selection": {}, "redirect": {"return_uri": _RETURN_URI}}
        path = f"/v3/mandates/{mandate_id}/authorization-flow"
        started = session.ok(session.client.post(path, json=flow), 200)
        uri = started["authorization_flow"]["actions"]["next"]["uri"]
        token = parse_qs(urlsplit(uri).fragment)["token"][0]
        session.ok(
            session.client.post(
                f"/mock-bank/api/vrp-consents/{mandate_id}/action",
                json={"action": action},
                headers={"Authorization": f"Bearer {token}"},
            ),
            202,
        )
        if revoke:
            session.wait_event("mandate_authorized", _v3("mandate_id", mandate_id), timeout)
            session.ok(session.client.post(f"/v3/mandates/{mandate_id}/revoke"), 204)
        created = {"mandate_id": mandate_id, "merchant_account_id": account["id"]}
        delivery = session.wait_event(event, _v3("mandate_id", mandate_id), timeout)
        return Triggered(event, session.merchant_id, created, delivery)

    return run


def _balance_notification(session: Session, event: str, timeout: float) -> Triggered:
    account = session.account("GBP", "EUR")
    path = f"/admin/merchant-accounts/{account['id']}/balance-threshold"
    previous = account.get("balance_threshold_in_minor")
    available = session.available(account)
    # Cleared, then just above the available balance: the account is below it at once.
    session.ok(session.operator.put(path, json={"threshold_in_minor": None}), 200)
    threshold = max(available, 0) + 1
    session.ok(session.operator.put(path, json={"threshold_in_minor": threshold}), 200)
    try:
        delivery = session.wait_event(
            event,
            lambda p: (
                p.get("merchant_account_id") == account["id"]
                and p.get("threshold_in_minor") == threshold
            ),
            timeout,
        )
    finally:
        session.ok(session.operator.put(path, json={"threshold_in_minor": previous}), 200)
    created = {
        "merchant_account_id": account["id"],
        "balance_threshold_in_minor": f"{threshold} (then set back to {previous})",
    }
    return Triggered(event, session.merchant_id, created, delivery)


def _topup(session: Session, event: str, timeout: float) -> Triggered:
    account = session.account("EUR", "GBP")
    reference = f"trigger {uuid.uuid4().hex[:12]}"
    transfer = session.top_up(account, _AMOUNT, reference)
    created = {"bank_transfer_id": transfer["id"], "merchant_account_id": account["id"]}
    delivery = session.wait_event(event, _v1("reference", reference), timeout)
    return Triggered(event, session.merchant_id, created, delivery)


def _v1_payout(reference: str, *, rejected: bool = False) -> Callable[..., Triggered]:
    def run(session: Session, event: str, timeout: float) -> Triggered:
        account = session.account("EUR", "GBP")
        currency = account["currency"]
        if rejected:
            amount = session.available(account) + 1  # more than the account has
        else:
            session.top_up(account, _AMOUNT, "trigger funding")
            amount = _AMOUNT
        transaction_id = str(uuid.uuid4())
        body = {
            "transaction_id": transaction_id,
            "beneficiary_name": "Trigger Payee",
            "beneficiary_iban": _IBANS[currency],
            "beneficiary_reference": reference,
            "currency": currency,
            "amount_in_minor": amount,
        }
        session.ok(session.client.post("/v1/payouts", json=body), 202)
        created = {"transaction_id": transaction_id, "merchant_account_id": account["id"]}
        event_type = event.removeprefix("v1.")
        delivery = session.wait_event(event_type, _v1("transaction_id", transaction_id), timeout)
        return Triggered(event, session.merchant_id, created, delivery)

    return run


@dataclass(frozen=True)
class Event:
    """An event `bankrail trigger` can make happen."""

    name: str
    api: str
    how: str
    run: Callable[[Session, str, float], Triggered]


EVENTS: dict[str, Event] = {
    e.name: e
    for e in (
        Event(
            "payment_executed",
            "v3",
            "a pay-in the payer executes at the mock bank",
            _pay_in("Execute"),
        ),
        Event(
            "payment_settled",
            "v3",
            "a pay-in the payer executes at the mock bank",
            _pay_in("Execute"),
        ),
        Event(
            "payment_failed",
            "v3",
            "a pay-in the payer rejects at the mock bank",
            _pay_in("RejectAuthorisation"),
        ),
        Event(
            "payout_executed",
            "v3",
            "a funded v3 payout to an external account",
            _v3_payout("trigger"),
        ),
        Event(
            "payout_failed",
            "v3",
            "a funded v3 payout with the sandbox token fail:scheme_error",
            _v3_payout("fail:scheme_error"),
        ),
        Event(
            "refund_executed",
            "v3",
            "a settled pay-in through the mock bank, then a refund of it",
            _refund("trigger"),
        ),
        Event(
            "refund_failed",
            "v3",
            "a settled pay-in, then a refund with the sandbox token fail:scheme_error",
            _refund("fail:scheme_error"),
        ),
        Event(
            "mandate_authorized",
            "v3",
            "a commercial mandate the payer authorises at the mock bank",
            _mandate("Authorise"),
        ),
        Event(
            "mandate_failed",
            "v3",
            "a commercial mandate the payer rejects at the mock bank",
            _mandate("Reject"),
        ),
        Event(
            "mandate_revoked",
            "v3",
            "an authorised commercial mandate the merchant then revokes",
            _mandate("Authorise", revoke=True),
        ),
        Event(
            "balance_notification",
            "v3",
            "a balance threshold just above the available balance (then set back)",
            _balance_notification,
        ),
        Event("topup_received", "v1", "a sandbox bank transfer into a merchant account", _topup),
        Event("payout_authorised", "v1", "a funded v1 payout", _v1_payout("trigger")),
        Event("payout_submitted", "v1", "a funded v1 payout", _v1_payout("trigger")),
        Event("payout_settled", "v1", "a funded v1 payout", _v1_payout("trigger")),
        Event(
            "payout_rejected",
            "v1",
            "a v1 payout of more than the available balance",
            _v1_payout("trigger", rejected=True),
        ),
        Event(
            "v1.payout_failed",
            "v1",
            "a funded v1 payout with the sandbox token fail:scheme_error",
            _v1_payout("fail:scheme_error"),
        ),
    )
}
