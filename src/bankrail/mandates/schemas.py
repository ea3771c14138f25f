"""Request and response bodies of the mandate routes (docs/api.md "Mandates")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from bankrail.core.money import MAX_AMOUNT_IN_MINOR
from bankrail.core.timefmt import Timestamp
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
)

MandateType = Literal["sweeping", "commercial"]
PERIODS = ("day", "week", "fortnight", "month", "half_year", "year")


UseCase = Literal["financial_services", "charity", "government", "utilities"]


class MandateProviderFilter(StrictModel):
    """Which banks a payer choosing one is offered: of these countries, and of this release
    channel or a more stable one (`general_availability` when absent)."""

    countries: list[Annotated[StrictStr, Field(pattern=r"^[A-Z]{2}$")]] | None = None
    release_channel: (
        Literal["general_availability", "public_beta", "private_beta", "alpha"] | None
    ) = None


class MandateProviderSelection(StrictModel):
    """`user_selected` (the payer picks their bank, among those `filter` allows) or
    `preselected` (`provider_id`)."""

    type: Literal["user_selected", "preselected"]
    provider_id: ShortText | None = None
    filter: MandateProviderFilter | None = None


class MandateExternalAccountBeneficiary(StrictModel):
    """An account outside Bankrail that the mandate's payments pay."""

    type: Literal["external_account"]
    account_holder_name: ShortText
    account_identifier: SortCodeAccountNumber


MandateBeneficiary = Annotated[
    MerchantAccountBeneficiary | MandateExternalAccountBeneficiary, Field(discriminator="type")
]


class MandateDetails(StrictModel):
    """What the payer consents to: the type, the bank, the account paid into and, for a
    commercial mandate, its use case."""

    type: MandateType
    provider_selection: MandateProviderSelection
    beneficiary: MandateBeneficiary
    reference: Annotated[StrictStr, Field(min_length=1, max_length=18)] | None = None
    use_case: UseCase | None = None


class MandateUser(StrictModel):
    """The payer; `id` generated when absent."""

    id: ShortText | None = None
    name: ShortText | None = None
    email: ShortText | None = None
    phone: Annotated[StrictStr, Field(min_length=1, max_length=40)] | None = None
    date_of_birth: DateOfBirth | None = None
    address: Address | None = None


class SignupPlus(StrictModel):
    """Signup+ wanted with the mandate (no options)."""


class MandateRelatedProducts(StrictModel):
    """Products asked for together with the mandate."""

    signup_plus: SignupPlus | None = None


class PeriodicLimitIn(StrictModel):
    """At most `maximum_amount` per period, periods aligned on the consent or the calendar."""

    maximum_amount: Amount
    period_alignment: Literal["consent", "calendar"]


class PeriodicLimitsIn(StrictModel):
    """One limit per period length; at least one."""

    day: PeriodicLimitIn | None = None
    week: PeriodicLimitIn | None = None
    fortnight: PeriodicLimitIn | None = None
    month: PeriodicLimitIn | None = None
    half_year: PeriodicLimitIn | None = None
    year: PeriodicLimitIn | None = None

    @model_validator(mode="after")
    def _at_least_one(self) -> PeriodicLimitsIn:
        if not any(getattr(self, name) is not None for name in PERIODS):
            raise ValueError(f"give at least one periodic limit ({', '.join(PERIODS)})")
        return self


class ConstraintsIn(StrictModel):
    """The limits of every payment taken on the mandate."""

    maximum_individual_amount: Amount
    periodic_limits: PeriodicLimitsIn
    valid_from: Timestamp | None = None
    valid_to: Timestamp | None = None

    @model_validator(mode="after")
    def _ordered(self) -> ConstraintsIn:
        if (
            self.valid_from is not None
            and self.valid_to is not None
            and self.valid_to <= self.valid_from
        ):
            raise ValueError("valid_to must be later than valid_from")
        return self


class MandateRequest(StrictModel):
    """`POST /v3/mandates`."""

    mandate: MandateDetails
    currency: Currency
    user: MandateUser | None = None
    constraints: ConstraintsIn
    metadata: Metadata | None = None
    related_products: MandateRelatedProducts | None = None


class MandateCreated(BaseModel):
    """The 201 answer of `POST /v3/mandates`."""

    id: str
    user: dict[str, str]
    resource_token: str
    status: Literal["authorization_required"]


class MandateFlowRequest(StrictModel):
    """`POST /v3/mandates/{id}/authorization-flow`: `provider_selection` (`{}` or null),
    `redirect`, `consent` (declared: the payer consents after choosing a provider) and `form`
    (accepted; no mandate provider asks a form)."""

    provider_selection: dict[str, Any] | None = None
    redirect: Redirect | None = None
    consent: dict[str, Any] | None = None
    form: dict[str, Any] | None = None


class MandateProviderSubmit(StrictModel):
    """The provider the payer picked."""

    provider_id: ShortText


class MandateOut(BaseModel):
    """The mandate resource."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: str
    status: str
    currency: str


class MandateList(BaseModel):
    """`GET /v3/mandates`: one page of mandates, newest first."""

    items: list[MandateOut]
    pagination: Pagination


class FundsOut(BaseModel):
    """Whether the payer's account holds the amount now."""

    confirmed: bool
    confirmed_at: str


class PeriodOut(BaseModel):
    """The current period of a limit: what it took so far and what it has left."""

    start_date: str
    end_date: str
    current_amount: int
    maximum_available_amount: int
    period_alignment: Literal["consent", "calendar"]


class ConstraintsOut(BaseModel):
    """The constraints as they stand now (the real API's `periodic_limits` shape)."""

    model_config = ConfigDict(extra="allow")

    valid_from: str | None = None
    valid_to: str | None = None
    maximum_individual_amount: int
    periodic_limits: dict[str, PeriodOut]


class ConsentAction(StrictModel):
    """The payer's decision at the mock bank on a mandate, headless."""

    action: Literal["Authorise", "RejectAuthorisation", "Reject", "Revoke", "Cancel"]
    redirect: bool | None = None
    settlement_delay_in_seconds: Annotated[StrictInt, Field(ge=0, le=30 * 86400)] | None = None
    remitter_balance_in_minor: Annotated[StrictInt, Field(ge=0, le=MAX_AMOUNT_IN_MINOR)] | None = (
        None
    )
