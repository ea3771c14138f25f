"""Request and response bodies of the payout routes (spec 2.2 to 2.4, docs/api.md)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator

from bankrail.http.listing import Pagination
from bankrail.http.schema_types import (
    Address,
    Amount,
    Currency,
    DateOfBirth,
    SortCodeAccountNumber,
    StrictModel,
    Uuid,
)


class V1PayoutRequest(StrictModel):
    """`POST /v1/payouts` (spec 2.2)."""

    transaction_id: Uuid
    beneficiary_name: Annotated[StrictStr, Field(min_length=1, max_length=18)]
    beneficiary_iban: Annotated[StrictStr, Field(min_length=1, max_length=64)]
    beneficiary_reference: Annotated[StrictStr, Field(min_length=1, max_length=18)]
    currency: Currency
    amount_in_minor: Amount
    context_code: Literal["withdrawal", "service_payment", "internal"] = "withdrawal"


class V1PayoutAccepted(BaseModel):
    """The 202 answer of `POST /v1/payouts`."""

    transaction_id: str


class V1Transaction(BaseModel):
    """A v1 transaction record (spec 2.3); top-ups carry remitter fields instead."""

    model_config = ConfigDict(extra="allow")

    transaction_id: str
    type: Literal["payout", "topup"]
    amount_in_minor: int
    currency: str
    status: str


class V1TransactionList(BaseModel):
    """`GET /v1/transactions`."""

    results: list[V1Transaction]
    next_cursor: str | None = None


class PayoutIbanIdentifier(StrictModel):
    """An account by IBAN."""

    type: Literal["iban"]
    iban: Annotated[StrictStr, Field(min_length=5, max_length=64)]


AccountIdentifier = Annotated[
    SortCodeAccountNumber | PayoutIbanIdentifier, Field(discriminator="type")
]
Reference = Annotated[StrictStr, Field(min_length=1, max_length=140)]


class ExternalAccount(StrictModel):
    """Open loop: pay any account."""

    type: Literal["external_account"]
    reference: Reference
    account_holder_name: Annotated[StrictStr, Field(min_length=1, max_length=140)]
    account_identifier: AccountIdentifier
    date_of_birth: DateOfBirth | None = None
    address: Address | None = None

    @field_validator("date_of_birth")
    @classmethod
    def _real_past_date(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            born = dt.date.fromisoformat(value)
        except ValueError as exc:
            raise ValueError("must be a real date (YYYY-MM-DD)") from exc
        if born > dt.datetime.now(dt.UTC).date() or born.year < 1800:
            raise ValueError("must be a date in the past")
        return value


class PaymentSourceBeneficiary(StrictModel):
    """Closed loop: pay back a user's payment source."""

    type: Literal["payment_source"]
    user_id: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    payment_source_id: Uuid
    reference: Reference


class PayoutUser(StrictModel):
    """The payee of a verified payout, as the merchant knows them."""

    id: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None
    name: Annotated[StrictStr, Field(min_length=1, max_length=140)]
    email: Annotated[StrictStr, Field(min_length=3, max_length=254)] | None = None
    phone: Annotated[StrictStr, Field(min_length=1, max_length=40)] | None = None
    date_of_birth: DateOfBirth | None = None
    address: Address | None = None


class TransactionSearchCriteria(StrictModel):
    """An earlier pay-in the payee's account must show (transaction-search verification)."""

    tokens: Annotated[
        list[Annotated[StrictStr, Field(min_length=1, max_length=140)]],
        Field(min_length=1, max_length=20),
    ]
    amount_in_minor: Amount
    currency: Currency
    created_at: Annotated[StrictStr, Field(min_length=10, max_length=40)]

    @field_validator("created_at")
    @classmethod
    def _date_or_timestamp(cls, value: str) -> str:
        # A date, or a timestamp of that date with an offset (fidelity PO2): kept as the date.
        try:
            if len(value) == 10:
                return dt.date.fromisoformat(value).isoformat()
            moment = dt.datetime.fromisoformat(value)
        except ValueError as exc:
            raise ValueError("must be a date (YYYY-MM-DD) or a timestamp with an offset") from exc
        if moment.tzinfo is None:
            raise ValueError("a timestamp must carry an offset")
        return moment.date().isoformat()


class PayoutVerification(StrictModel):
    """What the payee must prove of the account they choose."""

    verify_name: bool
    transaction_search_criteria: TransactionSearchCriteria | None = None


class PayoutProviderFilter(StrictModel):
    """The providers a payee may choose among."""

    countries: list[Annotated[StrictStr, Field(pattern=r"^[A-Z]{2}$")]] | None = None
    provider_ids: list[Annotated[StrictStr, Field(min_length=1, max_length=100)]] | None = None


class UserSelectedProvider(StrictModel):
    """The payee chooses the provider, among those the filter allows."""

    type: Literal["user_selected"]
    filter: PayoutProviderFilter | None = None


class PreselectedScheme(StrictModel):
    """The scheme the merchant chose (rails/schemes.py lists each currency's); for a verified
    payout, the scheme its preselected provider pays over."""

    type: Literal["preselected"]
    scheme_id: Annotated[StrictStr, Field(min_length=1, max_length=100)]


class PreselectedProvider(StrictModel):
    """The merchant chose the provider."""

    type: Literal["preselected"]
    provider_id: Annotated[StrictStr, Field(min_length=1, max_length=100)]
    scheme_selection: PreselectedScheme | None = None


class UserDetermined(StrictModel):
    """Verified payout: the payee chooses and proves their account at the payout page."""

    type: Literal["user_determined"]
    reference: Reference
    user: PayoutUser
    verification: PayoutVerification
    provider_selection: Annotated[
        UserSelectedProvider | PreselectedProvider, Field(discriminator="type")
    ]


Beneficiary = Annotated[
    ExternalAccount | PaymentSourceBeneficiary | UserDetermined, Field(discriminator="type")
]


class InstantOnly(StrictModel):
    """Only an instant scheme may carry the payout."""

    type: Literal["instant_only"]


class InstantPreferred(StrictModel):
    """An instant scheme when one reaches the payee, else a standard one."""

    type: Literal["instant_preferred"]


SchemeSelection = Annotated[
    InstantOnly | InstantPreferred | PreselectedScheme, Field(discriminator="type")
]
ShortText = Annotated[StrictStr, Field(min_length=1, max_length=140)]


class UltimateCounterparty(StrictModel):
    """The business a payout is ultimately made for (read back as sent)."""

    type: Literal["business_client"]
    trading_name: ShortText
    registration_number: ShortText | None = None
    commercial_name: ShortText | None = None
    url: Annotated[StrictStr, Field(min_length=1, max_length=2048)] | None = None
    mcc: Annotated[StrictStr, Field(pattern=r"^[0-9]{4}$")] | None = None
    address: Address | None = None


class PayoutSubMerchants(StrictModel):
    """`sub_merchants`: whom a payment service provider pays out on behalf of."""

    ultimate_counterparty: UltimateCounterparty


class V3PayoutRequest(StrictModel):
    """`POST /v3/payouts` (spec 4.2)."""

    merchant_account_id: Uuid
    amount_in_minor: Amount
    currency: Currency
    beneficiary: Beneficiary
    metadata: (
        dict[Annotated[str, Field(max_length=100)], Annotated[StrictStr, Field(max_length=500)]]
        | None
    ) = Field(default=None, max_length=50)
    scheme_selection: SchemeSelection | None = None
    sub_merchants: PayoutSubMerchants | None = None


class PayoutCreated(BaseModel):
    """The 202 answer of `POST /v3/payouts`; a verified payout's also carries `status`,
    `resource_token` and `user`."""

    model_config = ConfigDict(extra="allow")

    id: str
    status: Literal["authorization_required"] | None = None
    resource_token: str | None = None
    user: dict[str, str] | None = None


class PayoutOut(BaseModel):
    """A v3 payout record (spec 2.4)."""

    model_config = ConfigDict(extra="allow")

    id: str
    merchant_account_id: str
    amount_in_minor: int
    currency: str
    beneficiary: dict[str, object]
    scheme_id: str
    status: Literal[
        "authorization_required", "authorizing", "pending", "authorized", "executed", "failed"
    ]
    created_at: str
    authorized_at: str | None = None
    executed_at: str | None = None
    failed_at: str | None = None
    failure_reason: str | None = None
    metadata: dict[str, str] | None = None
    scheme_selection: dict[str, str] | None = None
    sub_merchants: dict[str, object] | None = None


class PayoutList(BaseModel):
    """`GET /v3/payouts`: one page of payouts, newest first."""

    items: list[PayoutOut]
    pagination: Pagination
