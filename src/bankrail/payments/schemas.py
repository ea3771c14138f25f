"""Request and response bodies of the pay-in routes (spec 2.5 to 2.8 and docs/api.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from bankrail.http.listing import Pagination
from bankrail.http.schema_types import (
    Address,
    Amount,
    Currency,
    MerchantAccountBeneficiary,
    Metadata,
    Redirect,
    ShortText,
    StrictModel,
    Uuid,
)


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


class PaymentMethod(StrictModel):
    """A bank transfer, its provider selection and (nested form) its beneficiary; or a
    payment on an authorised mandate (`mandate_id`, optional `reference`), which has no payer
    journey: the mandate names the merchant account paid into and the payer."""

    type: Literal["bank_transfer", "mandate"]
    provider_selection: ProviderSelection | None = None
    scheme_selection: SchemeSelection | None = None
    beneficiary: MerchantAccountBeneficiary | None = None
    mandate_id: Uuid | None = None
    reference: Annotated[StrictStr, Field(min_length=1, max_length=18)] | None = None

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> PaymentMethod:
        transfer = ("provider_selection", "scheme_selection", "beneficiary")
        mandate = ("mandate_id", "reference")
        if self.type == "mandate":
            if self.mandate_id is None:
                raise ValueError("mandate_id is required when the type is mandate")
            given = [name for name in transfer if getattr(self, name) is not None]
        else:
            given = [name for name in mandate if getattr(self, name) is not None]
        if given:
            raise ValueError(f"{', '.join(given)} may not be given when the type is {self.type}")
        return self


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
        if self.payment_method.type == "mandate":
            if self.merchant_account_id is not None:
                raise ValueError("a payment on a mandate pays into the mandate's account")
            return self
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
    """The 201 answer of `POST /v3/payments` (spec 2.6); a payment on a mandate is
    `authorized` at once and has no `resource_token` (no payer journey)."""

    id: str
    user: dict[str, str]
    resource_token: str | None = None
    status: Literal["authorization_required", "authorized"]


class FormCapability(StrictModel):
    """The input types the caller can show (`form` of the start request)."""

    input_types: list[Literal["text", "select", "text_with_image"]] | None = None


class AuthorizationFlowRequest(StrictModel):
    """`POST /v3/payments/{id}/authorization-flow`: `provider_selection` (`{}`, null, or the
    selection sent at creation: the payment's own selection stands), `scheme_selection`,
    `redirect`, `consent` (declared: the payer consents after choosing a provider), `form`
    and `retry` (accepted; what a retry does is the payment's)."""

    provider_selection: dict[str, Any] | None = None
    scheme_selection: dict[str, Any] | None = None
    redirect: Redirect | None = None
    consent: dict[str, Any] | None = None
    form: FormCapability | None = None
    retry: dict[str, Any] | None = None


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
    redirect: bool | None = None  # the real sandbox's: false answers the URL (always so here)
    execution_delay_in_seconds: Annotated[StrictInt, Field(ge=0, le=30 * 86400)] | None = None
    settlement_delay_in_seconds: Annotated[StrictInt, Field(ge=0, le=30 * 86400)] | None = None


class PaymentOut(BaseModel):
    """The payment resource."""

    model_config = ConfigDict(extra="allow")

    id: str
    status: str
    amount_in_minor: int
    currency: str


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
