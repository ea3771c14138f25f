"""Request and response bodies of the pay-in routes (spec 2.5 to 2.8 and docs/api.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from bankrail.core.money import MAX_AMOUNT_IN_MINOR
from bankrail.http.listing import Pagination
from bankrail.http.schema_types import (
    Address,
    Amount,
    Currency,
    DateOfBirth,
    MerchantAccountBeneficiary,
    Metadata,
    Redirect,
    ShortText,
    SortCodeAccountNumber,
    StrictModel,
    Uuid,
)
from bankrail.mandates.models import retry_window as window_of


class ProviderExcludes(StrictModel):
    """Providers a filter leaves out."""

    provider_ids: list[ShortText] | None = None


class ProviderFilter(StrictModel):
    """Limits on the providers offered to a payer choosing one. Stored as sent and not
    checked against the payment's currency (fidelity P1.9)."""

    countries: list[Annotated[StrictStr, Field(pattern=r"^[A-Z]{2}$")]] | None = None
    release_channel: (
        Literal["general_availability", "public_beta", "private_beta", "alpha"] | None
    ) = None
    customer_segments: list[Literal["retail", "business", "corporate"]] | None = None
    provider_ids: list[ShortText] | None = None
    excludes: ProviderExcludes | None = None


class SchemeSelection(StrictModel):
    """How the scheme is chosen (the spec's `scheme_selection`): `preselected` names its
    `scheme_id`; `instant_only` and `instant_preferred` may allow a fee charged to the remitter
    and override the instant choice per provider; `user_selected` leaves it to the payer."""

    type: Literal["preselected", "instant_only", "instant_preferred", "user_selected"]
    scheme_id: ShortText | None = None
    allow_remitter_fee: StrictBool | None = None
    instant_override_provider_ids: list[ShortText] | None = None
    non_instant_override_provider_ids: list[ShortText] | None = None

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> SchemeSelection:
        instant = ("allow_remitter_fee", "instant_override_provider_ids")
        given = [
            name
            for name in (*instant, "non_instant_override_provider_ids")
            if getattr(self, name) is not None
        ]
        if given and self.type not in ("instant_only", "instant_preferred"):
            raise ValueError(
                f"{', '.join(given)} may be given only when the type is instant_only or"
                " instant_preferred"
            )
        return self


class IbanIdentifier(StrictModel):
    """An IBAN, as written (no checksum is checked: the sandbox takes the suites' values)."""

    type: Literal["iban"]
    iban: Annotated[StrictStr, Field(pattern=r"^[A-Z]{2}[0-9]{2}[A-Za-z0-9]{1,30}$")]


class BbanIdentifier(StrictModel):
    """A domestic account number (BBAN), up to 34 letters and digits."""

    type: Literal["bban"]
    bban: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9]{1,34}$")]


class NrbIdentifier(StrictModel):
    """A Polish account number (NRB): 26 digits."""

    type: Literal["nrb"]
    nrb: Annotated[StrictStr, Field(pattern=r"^[0-9]{26}$")]


AccountIdentifier = Annotated[
    SortCodeAccountNumber | IbanIdentifier | BbanIdentifier | NrbIdentifier,
    Field(discriminator="type"),
]


class Remitter(StrictModel):
    """The account the payer pays from, when the merchant knows it (preselected provider)."""

    account_holder_name: ShortText | None = None
    account_identifier: AccountIdentifier | None = None
    reference: Annotated[StrictStr, Field(min_length=1, max_length=140)] | None = None


class ProviderSelection(StrictModel):
    """`user_selected` (the payer picks) or `preselected` (the merchant picked)."""

    type: Literal["user_selected", "preselected"]
    provider_id: ShortText | None = None
    scheme_id: ShortText | None = None
    filter: ProviderFilter | None = None
    scheme_selection: SchemeSelection | None = None
    remitter: Remitter | None = None


class Verification(StrictModel):
    """Checks of the remitter that the merchant asks for (`automated`)."""

    type: Literal["automated"]
    remitter_name: StrictBool | None = None
    remitter_date_of_birth: StrictBool | None = None


class PaymentMerchantAccountBeneficiary(MerchantAccountBeneficiary):
    """The merchant account a payment pays into, with the payer's statement reference and
    the verification asked for."""

    statement_reference: Annotated[StrictStr, Field(min_length=1, max_length=35)] | None = None
    verification: Verification | None = None


class ExternalAccountBeneficiary(StrictModel):
    """An account outside Bankrail paid directly (no merchant account is credited)."""

    type: Literal["external_account"]
    account_holder_name: ShortText
    account_identifier: AccountIdentifier
    reference: Annotated[StrictStr, Field(min_length=1, max_length=140)]


Beneficiary = Annotated[
    PaymentMerchantAccountBeneficiary | ExternalAccountBeneficiary,
    Field(discriminator="type"),
]

# Currencies a payment to an external account may be in; one into a merchant account is in
# the account's currency.
EXTERNAL_ACCOUNT_CURRENCIES = frozenset({"GBP", "EUR", "PLN", "NOK"})


class PaymentRetry(StrictModel):
    """Retries of a payment on a mandate that the payer's balance cannot cover:
    `{type: "standard", for}` or `{type: "smart", for, ensure_minimum_balance_in_minor?}`,
    `for` a window such as `30m` or `90d` (docs/api.md "Payments on a mandate")."""

    model_config = ConfigDict(populate_by_name=True)

    type: Literal["standard", "smart"]
    for_: Annotated[StrictStr, Field(alias="for", pattern=r"^[0-9]{1,6}[mhd]$")]
    ensure_minimum_balance_in_minor: (
        Annotated[StrictInt, Field(ge=0, le=MAX_AMOUNT_IN_MINOR)] | None
    ) = None

    @model_validator(mode="after")
    def _of_its_type(self) -> PaymentRetry:
        window_of(self.for_)  # raises ValueError naming the rule
        if self.type == "standard" and self.ensure_minimum_balance_in_minor is not None:
            raise ValueError("ensure_minimum_balance_in_minor may be given only for smart retries")
        return self


class TransferRetry(StrictModel):
    """A bank transfer's `retry`: the empty object `{}` the SDKs send (fidelity P8); a payer
    whose authorisation was rejected may try again."""


class PaymentMethod(StrictModel):
    """A bank transfer, its provider selection and (nested form) its beneficiary; or a
    payment on an authorised mandate (`mandate_id`, optional `reference`), which has no payer
    journey: the mandate names the merchant account paid into and the payer. `retry` (an
    object, `{}`) lets a payer whose authorisation was rejected try again (fidelity P8)."""

    type: Literal["bank_transfer", "mandate"]
    provider_selection: ProviderSelection | None = None
    scheme_selection: SchemeSelection | None = None
    beneficiary: Beneficiary | None = None
    mandate_id: Uuid | None = None
    reference: Annotated[StrictStr, Field(min_length=1, max_length=18)] | None = None
    retry: PaymentRetry | TransferRetry | None = None
    user_interaction: Literal["present", "not_present"] | None = None

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> PaymentMethod:
        transfer = ("provider_selection", "scheme_selection", "beneficiary")
        mandate = ("mandate_id", "reference", "user_interaction")
        if self.type == "mandate":
            if self.mandate_id is None:
                raise ValueError("mandate_id is required when the type is mandate")
            given = [name for name in transfer if getattr(self, name) is not None]
            if isinstance(self.retry, TransferRetry):
                raise ValueError("retry on a mandate is {type: standard or smart, for}")
        else:
            given = [name for name in mandate if getattr(self, name) is not None]
            if isinstance(self.retry, PaymentRetry):
                raise ValueError("retry of a bank transfer is the empty object {}")
        if given:
            raise ValueError(f"{', '.join(given)} may not be given when the type is {self.type}")
        return self


class User(StrictModel):
    """The payer; every field optional, `id` generated when absent."""

    id: ShortText | None = None
    name: ShortText | None = None
    email: ShortText | None = None
    phone: Annotated[StrictStr, Field(min_length=1, max_length=40)] | None = None
    date_of_birth: DateOfBirth | None = None
    address: Address | None = None


class BusinessClient(StrictModel):
    """A sub-merchant that is a business client of the merchant."""

    type: Literal["business_client"]
    id: ShortText | None = None
    trading_name: ShortText
    commercial_name: ShortText | None = None
    url: Annotated[StrictStr, Field(min_length=1, max_length=2000)] | None = None
    mcc: Annotated[StrictStr, Field(pattern=r"^[0-9]{4}$")] | None = None
    registration_number: ShortText | None = None
    address: Address | None = None


class BusinessDivision(StrictModel):
    """A sub-merchant that is a division of the merchant."""

    type: Literal["business_division"]
    id: ShortText
    name: ShortText


class SubMerchants(StrictModel):
    """Who the payment is ultimately for (stored and read back)."""

    ultimate_counterparty: Annotated[BusinessClient | BusinessDivision, Field(discriminator="type")]


class RelatedProducts(StrictModel):
    """Products of the operator the payment is part of (accepted and read back)."""

    signup_plus: dict[str, Any] | None = None


class RiskAssessment(StrictModel):
    """The merchant's risk segment of the payment (accepted and kept)."""

    segment: ShortText


class HostedPage(StrictModel):
    """Ask for the hosted payment page's link in the creation's answer (fidelity P4)."""

    return_uri: Annotated[StrictStr, Field(min_length=1, max_length=2000)]
    country_code: Annotated[StrictStr, Field(pattern=r"^[A-Z]{2}$")] | None = None
    language_code: Annotated[StrictStr, Field(pattern=r"^[a-z]{2}$")] | None = None
    max_wait_for_result: Annotated[StrictInt, Field(ge=0, le=3600)] | None = None


class FormCapability(StrictModel):
    """The input types the caller can show (`form` of the start request)."""

    input_types: list[Literal["text", "select", "text_with_image"]] | None = None


class AuthorizationFlowRequest(StrictModel):
    """`POST /v3/payments/{id}/authorization-flow`, and `authorization_flow` at creation
    (which starts the journey at once, fidelity P3). `provider_selection` (any object, the
    creation's own included), `scheme_selection`, `redirect`, `consent` (declared: the payer
    consents after choosing a provider), `form` and `retry` are accepted; the payment's own
    selection and retry are the ones that count."""

    provider_selection: dict[str, Any] | None = None
    scheme_selection: SchemeSelection | None = None
    redirect: Redirect | None = None
    form: FormCapability | None = None
    consent: dict[str, Any] | None = None
    retry: dict[str, Any] | None = None


class PaymentRequest(StrictModel):
    """`POST /v3/payments`, nested form or the spec's flat form (or both, agreeing). A
    payment to an `external_account` beneficiary names no merchant account."""

    amount_in_minor: Amount
    currency: Currency
    payment_method: PaymentMethod
    merchant_account_id: Uuid | None = None
    user: User | None = None
    metadata: Metadata | None = None
    authorization_flow: AuthorizationFlowRequest | None = None
    hosted_page: HostedPage | None = None
    related_products: RelatedProducts | None = None
    risk_assessment: RiskAssessment | None = None
    sub_merchants: SubMerchants | None = None

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
        if nested is not None and self.merchant_account_id is not None:
            if not isinstance(nested, MerchantAccountBeneficiary):
                raise ValueError("merchant_account_id may not be given with an external_account")
            if nested.merchant_account_id.lower() != self.merchant_account_id.lower():
                raise ValueError("merchant_account_id and payment_method.beneficiary disagree")
        return self

    @property
    def account_id(self) -> str | None:
        """The merchant account paid into, from either form; None for an external account."""
        nested = self.payment_method.beneficiary
        if isinstance(nested, ExternalAccountBeneficiary):
            return None
        return nested.merchant_account_id if nested else str(self.merchant_account_id)

    def echo(self) -> dict[str, Any]:
        """What a later read gives back as sent (fidelity P5), nulls left out: the provider
        selection, the beneficiary, `retry`, and the objects beside the payment method."""
        method = self.payment_method
        selection = method.provider_selection or ProviderSelection(type="user_selected")
        beneficiary = method.beneficiary or MerchantAccountBeneficiary(
            type="merchant_account", merchant_account_id=str(self.merchant_account_id)
        )
        sent: dict[str, Any] = {
            "provider_selection": selection.model_dump(exclude_none=True),
            "beneficiary": beneficiary.model_dump(exclude_none=True),
        }
        if method.scheme_selection is not None and selection.scheme_selection is None:
            sent["provider_selection"]["scheme_selection"] = method.scheme_selection.model_dump(
                exclude_none=True
            )
        if method.retry is not None:
            sent["retry"] = method.retry.model_dump(by_alias=True, exclude_none=True)
        for name in ("sub_merchants", "related_products", "risk_assessment", "hosted_page"):
            value = getattr(self, name)
            if value is not None:
                sent[name] = value.model_dump(exclude_none=True)
        return sent


class PaymentCreated(BaseModel):
    """The 201 answer of `POST /v3/payments` (spec 2.6); a payment on a mandate is
    `authorized` at once (no payer journey) and carries a `resource_token` too. With
    `authorization_flow` in the request it is `authorizing` and carries the next action; with
    `hosted_page`, the page's `uri`."""

    id: str
    user: dict[str, str]
    resource_token: str | None = None
    status: Literal["authorization_required", "authorizing", "authorized"]
    authorization_flow: dict[str, Any] | None = None
    hosted_page: dict[str, str] | None = None


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
