"""Request and response bodies of the pay-in routes (spec 2.5 to 2.8 and docs/api.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from bankrail.http.listing import Pagination
from bankrail.merchants.schemas import StrictModel
from bankrail.payouts.schemas import Address, Amount, Currency, Metadata, Uuid

ShortText = Annotated[StrictStr, Field(min_length=1, max_length=200)]


class ProviderFilter(StrictModel):
    """Limits on the providers offered to a payer choosing one."""

    countries: list[Annotated[StrictStr, Field(pattern=r"^[A-Z]{2}$")]] | None = None
    release_channel: (
        Literal["general_availability", "public_beta", "private_beta", "alpha"] | None
    ) = None
    customer_segments: list[Literal["retail", "business", "corporate"]] | None = None
    provider_ids: list[ShortText] | None = None


class SchemeSelection(StrictModel):
    """How the scheme is chosen (the spec's `scheme_selection`)."""

    type: Literal["preselected", "instant_only", "instant_preferred", "user_selected"]
    scheme_id: ShortText | None = None


class ProviderSelection(StrictModel):
    """`user_selected` (the payer picks) or `preselected` (the merchant picked)."""

    type: Literal["user_selected", "preselected"]
    provider_id: ShortText | None = None
    scheme_id: ShortText | None = None
    filter: ProviderFilter | None = None
    scheme_selection: SchemeSelection | None = None


class MerchantAccountBeneficiary(StrictModel):
    """The merchant account a payment pays into."""

    type: Literal["merchant_account"]
    merchant_account_id: Uuid
    account_holder_name: ShortText | None = None
    reference: Annotated[StrictStr, Field(max_length=140)] | None = None


class PaymentMethod(StrictModel):
    """A bank transfer, its provider selection and (nested form) its beneficiary."""

    type: Literal["bank_transfer"]
    provider_selection: ProviderSelection | None = None
    scheme_selection: SchemeSelection | None = None
    beneficiary: MerchantAccountBeneficiary | None = None


class User(StrictModel):
    """The payer; every field optional, `id` generated when absent."""

    id: ShortText | None = None
    name: ShortText | None = None
    email: ShortText | None = None
    phone: Annotated[StrictStr, Field(min_length=1, max_length=40)] | None = None
    date_of_birth: Annotated[StrictStr, Field(pattern=r"^\d{4}-\d{2}-\d{2}$")] | None = None
    address: Address | None = None


class PaymentRequest(StrictModel):
    """`POST /v3/payments`, nested form or the spec's flat form (or both, agreeing)."""

    amount_in_minor: Amount
    currency: Currency
    payment_method: PaymentMethod
    merchant_account_id: Uuid | None = None
    user: User | None = None
    metadata: Metadata | None = None

    @model_validator(mode="after")
    def _one_beneficiary(self) -> PaymentRequest:
        nested = self.payment_method.beneficiary
        if nested is None and self.merchant_account_id is None:
            raise ValueError(
                "give merchant_account_id, or payment_method.beneficiary of type merchant_account"
            )
        if (
            nested is not None
            and self.merchant_account_id is not None
            and nested.merchant_account_id.lower() != self.merchant_account_id.lower()
        ):
            raise ValueError("merchant_account_id and payment_method.beneficiary disagree")
        return self

    @property
    def account_id(self) -> str:
        """The merchant account paid into, from either form."""
        nested = self.payment_method.beneficiary
        return nested.merchant_account_id if nested else str(self.merchant_account_id)


class PaymentCreated(BaseModel):
    """The 201 answer of `POST /v3/payments` (spec 2.6)."""

    id: str
    user: dict[str, str]
    resource_token: str
    status: Literal["authorization_required"]


class Redirect(StrictModel):
    """Where the payer returns after the bank."""

    return_uri: Annotated[StrictStr, Field(min_length=1, max_length=2000)]
    direct_return_uri: Annotated[StrictStr, Field(max_length=2000)] | None = None


class AuthorizationFlowRequest(StrictModel):
    """`POST /v3/payments/{id}/authorization-flow`."""

    provider_selection: dict[str, Any] | None = None
    redirect: Redirect | None = None
    form: dict[str, Any] | None = None


class ProviderSelectionSubmit(StrictModel):
    """The provider the payer picked."""

    provider_id: ShortText
    scheme_id: ShortText | None = None


class FormSubmit(StrictModel):
    """The embedded flow's form answers."""

    inputs: dict[Annotated[str, Field(max_length=100)], Annotated[StrictStr, Field(max_length=200)]]


class ProviderReturn(StrictModel):
    """`POST /v3/payments-provider-return`: what the payer's browser came back with."""

    query: Annotated[StrictStr, Field(max_length=4000)] | None = None
    fragment: Annotated[StrictStr, Field(max_length=4000)] | None = None


class BankAction(StrictModel):
    """The mock bank's headless action."""

    action: Literal["Execute", "RejectAuthorisation", "RejectExecution", "Cancel"]
    execution_delay_in_seconds: Annotated[StrictInt, Field(ge=0, le=30 * 86400)] | None = None
    settlement_delay_in_seconds: Annotated[StrictInt, Field(ge=0, le=30 * 86400)] | None = None


class AuthorizationFlowAnswer(BaseModel):
    """The status and the next action of the authorisation journey."""

    model_config = ConfigDict(extra="allow")

    status: str
    authorization_flow: dict[str, Any] | None = None


class PaymentOut(BaseModel):
    """The payment resource."""

    model_config = ConfigDict(extra="allow")

    id: str
    status: str
    amount_in_minor: int
    currency: str


class RedirectAnswer(BaseModel):
    """Where the mock bank sends the payer next."""

    redirect_uri: str


class PaymentSourceOut(BaseModel):
    """A payment source (spec 2.8)."""

    id: str
    user_id: str
    account_holder_name: str
    account_identifiers: list[dict[str, str]]


class PaymentSourceList(BaseModel):
    """Sources usable for closed-loop payouts."""

    items: list[PaymentSourceOut]


class ProviderReturnAnswer(BaseModel):
    """The resource the payer came back for."""

    resource: dict[str, str]


class PaymentList(BaseModel):
    """`GET /v3/payments`: one page of payments, newest first."""

    items: list[PaymentOut]
    pagination: Pagination
