"""The webhook payloads, as pydantic models: the `webhooks` of the OpenAPI document.

Payments API v3 events go to a merchant's payments URI as `{type, event_version, event_id,
...}`; payouts API v1 events to its payouts URI as `{event_type, event_schema_version,
event_id, event_body}` (docs/webhooks.md). These models document what is sent; the senders
build the bodies in their own modules.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class _V3Event(BaseModel):
    event_version: Literal[1]
    event_id: str


class WebhookPaymentMethod(BaseModel):
    """How a pay-in was made."""

    type: Literal["bank_transfer"]
    provider_id: str | None = None
    scheme_id: str | None = None


class WebhookPaymentSource(BaseModel):
    """The account a pay-in came from (closed-loop payouts can pay it back)."""

    id: str
    account_holder_name: str
    account_identifiers: list[dict[str, str]]


class PaymentExecutedEvent(_V3Event):
    """The bank executed a pay-in."""

    type: Literal["payment_executed"]
    payment_id: str
    payment_method: WebhookPaymentMethod
    metadata: dict[str, str]
    executed_at: str


class PaymentSettledEvent(_V3Event):
    """A pay-in reached the merchant account."""

    type: Literal["payment_settled"]
    payment_id: str
    payment_method: WebhookPaymentMethod
    metadata: dict[str, str]
    settled_at: str
    user_id: str
    payment_source: WebhookPaymentSource | None


class PaymentFailedEvent(_V3Event):
    """A pay-in failed at `failure_stage`."""

    type: Literal["payment_failed"]
    payment_id: str
    payment_method: WebhookPaymentMethod
    metadata: dict[str, str]
    failed_at: str
    failure_stage: str
    failure_reason: str | None


class PayoutExecutedEvent(_V3Event):
    """A v3 payout was executed."""

    type: Literal["payout_executed"]
    payout_id: str
    merchant_account_id: str
    scheme_id: str
    beneficiary: dict[str, object]
    metadata: dict[str, str]
    executed_at: str


class PayoutFailedEvent(_V3Event):
    """A v3 payout failed."""

    type: Literal["payout_failed"]
    payout_id: str
    merchant_account_id: str
    scheme_id: str
    beneficiary: dict[str, object]
    metadata: dict[str, str]
    failed_at: str
    failure_reason: str


class RefundExecutedEvent(_V3Event):
    """A refund of a pay-in was executed: the payer's account was paid back."""

    type: Literal["refund_executed"]
    refund_id: str
    payment_id: str
    scheme_id: str
    metadata: dict[str, str]
    executed_at: str


class RefundFailedEvent(_V3Event):
    """A refund of a pay-in failed; its hold went back to the available balance."""

    type: Literal["refund_failed"]
    refund_id: str
    payment_id: str
    scheme_id: str
    metadata: dict[str, str]
    failed_at: str
    failure_reason: str


class BalanceNotificationEvent(_V3Event):
    """A merchant account's available balance crossed its threshold."""

    type: Literal["balance_notification"]
    merchant_account_id: str
    status: Literal["approaching_threshold", "below_threshold", "recovered"]
    threshold_in_minor: int
    current_balance_in_minor: int
    available_balance_in_minor: int


class TopupReceivedBody(BaseModel):
    """A bank transfer credited a merchant account."""

    iban: str | None
    currency: str
    amount_in_minor: int
    remitter_name: str
    remitter_iban: str | None
    reference: str
    received_at: str


class PayoutAuthorisedBody(BaseModel):
    """A v1 payout was authorised."""

    transaction_id: str
    authorised_at: str


class PayoutSubmittedBody(BaseModel):
    """A v1 payout was submitted to the scheme."""

    transaction_id: str
    submitted_at: str


class PayoutSettledBody(BaseModel):
    """A v1 payout settled."""

    transaction_id: str
    settled_at: str


class PayoutRejectedBody(BaseModel):
    """A v1 payout was rejected."""

    transaction_id: str
    rejected_at: str
    reason: Literal["insufficient_funds", "aml_check_failed"]


class PayoutFailedBody(BaseModel):
    """A v1 payout failed after submission."""

    transaction_id: str
    failed_at: str
    reason: Literal["scheme_error", "server_error"]


class _V1Event(BaseModel):
    event_schema_version: Literal[1]
    event_id: str


class TopupReceivedEvent(_V1Event):
    """v1 envelope of `topup_received`."""

    event_type: Literal["topup_received"]
    event_body: TopupReceivedBody


class PayoutAuthorisedEvent(_V1Event):
    """v1 envelope of `payout_authorised`."""

    event_type: Literal["payout_authorised"]
    event_body: PayoutAuthorisedBody


class PayoutSubmittedEvent(_V1Event):
    """v1 envelope of `payout_submitted`."""

    event_type: Literal["payout_submitted"]
    event_body: PayoutSubmittedBody


class PayoutSettledEvent(_V1Event):
    """v1 envelope of `payout_settled`."""

    event_type: Literal["payout_settled"]
    event_body: PayoutSettledBody


class PayoutRejectedEvent(_V1Event):
    """v1 envelope of `payout_rejected`."""

    event_type: Literal["payout_rejected"]
    event_body: PayoutRejectedBody


class V1PayoutFailedEvent(_V1Event):
    """v1 envelope of `payout_failed`."""

    event_type: Literal["payout_failed"]
    event_body: PayoutFailedBody


# The `webhooks` of the OpenAPI document: name → (where it is sent, payload model).
WEBHOOKS: dict[str, tuple[str, type[BaseModel]]] = {
    "payment_executed": ("payments URI", PaymentExecutedEvent),
    "payment_settled": ("payments URI", PaymentSettledEvent),
    "payment_failed": ("payments URI", PaymentFailedEvent),
    "payout_executed": ("payments URI", PayoutExecutedEvent),
    "payout_failed": ("payments URI", PayoutFailedEvent),
    "balance_notification": ("payments URI", BalanceNotificationEvent),
    "refund_executed": ("payments URI", RefundExecutedEvent),
    "refund_failed": ("payments URI", RefundFailedEvent),
    "topup_received": ("payouts URI (v1)", TopupReceivedEvent),
    "payout_authorised": ("payouts URI (v1)", PayoutAuthorisedEvent),
    "payout_submitted": ("payouts URI (v1)", PayoutSubmittedEvent),
    "payout_settled": ("payouts URI (v1)", PayoutSettledEvent),
    "payout_rejected": ("payouts URI (v1)", PayoutRejectedEvent),
    "v1.payout_failed": ("payouts URI (v1)", V1PayoutFailedEvent),
}
