"""Request and response bodies of the refund routes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from bankrail.http.schema_types import Amount, Metadata, StrictModel

# The longest refund reference. The SDKs set no limit and their suites send 22 characters
# ("Payment refund request"); 140 is the remittance information a SEPA transfer carries, the
# longest reference of the schemes a refund travels (docs/api.md "Refunds").
MAX_REFUND_REFERENCE = 140


class RefundRequest(StrictModel):
    """`POST /v3/payments/{payment_id}/refunds`; without `amount_in_minor`, all that is left
    to refund of the payment."""

    amount_in_minor: Amount | None = None
    reference: Annotated[StrictStr, Field(min_length=1, max_length=MAX_REFUND_REFERENCE)]
    metadata: Metadata | None = None


class RefundCreated(BaseModel):
    """The id of the accepted refund."""

    id: str


class RefundOut(BaseModel):
    """A refund: `failure_reason` when it failed; the time of each status reached."""

    model_config = ConfigDict(extra="allow")

    id: str
    payment_id: str
    amount_in_minor: int
    currency: str
    reference: str
    metadata: dict[str, str]
    status: Literal["pending", "authorized", "executed", "failed"]
    created_at: str
    authorized_at: str | None = None
    executed_at: str | None = None
    failed_at: str | None = None
    failure_reason: str | None = None


class RefundList(BaseModel):
    """Every refund of a payment, oldest first."""

    items: list[RefundOut]
