"""Request and response bodies of the merchant-account and operator routes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from bankrail.http.schema_types import StrictModel
from bankrail.merchants.return_uris import MAX_RETURN_URIS, MAX_URI_LENGTH


class AccountIdentifier(BaseModel):
    """An account identifier (spec 2.4.1)."""

    type: Literal["sort_code_account_number", "iban"]
    sort_code: str | None = None
    account_number: str | None = None
    iban: str | None = None


class MerchantAccountOut(BaseModel):
    """A merchant account with its balances."""

    id: str
    currency: str
    account_identifiers: list[AccountIdentifier]
    account_holder_name: str
    current_balance_in_minor: int
    available_balance_in_minor: int
    balance_threshold_in_minor: int | None = None


class MerchantAccountList(BaseModel):
    """`GET /v3/merchant-accounts`."""

    items: list[MerchantAccountOut]


class BalanceEntry(BaseModel):
    """A v1 balance entry (spec 2.1)."""

    currency: str
    iban: str
    status: str
    current_balance_in_minor: int
    available_balance_in_minor: int


class BalanceList(BaseModel):
    """`GET /v1/balances`."""

    results: list[BalanceEntry]


class AccountTransaction(BaseModel):
    """One movement on a merchant account."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: Literal["merchant_account_payment", "external_payment", "payout", "refund"]
    amount_in_minor: int
    currency: str
    status: Literal["settled", "pending", "executed"]
    created_at: str


class AccountTransactionsPagination(BaseModel):
    """Where the next page starts (absent when this is the last page)."""

    next_cursor: str | None = None


class AccountTransactionList(BaseModel):
    """`GET /v3/merchant-accounts/{id}/transactions`."""

    items: list[AccountTransaction]
    pagination: AccountTransactionsPagination


Name = Annotated[StrictStr, Field(min_length=1, max_length=200)]


class NewMerchant(StrictModel):
    """`POST /admin/merchants`."""

    name: Name


class MerchantOut(BaseModel):
    """A merchant."""

    id: str
    name: str


class ClosedMerchantOut(BaseModel):
    """A closed merchant: its clients and keys revoked, its console users disabled."""

    id: str
    name: str
    closed_at: str


class NewClient(StrictModel):
    """`POST /admin/merchants/{id}/clients`."""

    scopes: list[Annotated[StrictStr, Field(min_length=1, max_length=100)]] | None = None


class ClientCredentials(BaseModel):
    """New client credentials; the secret is shown only once."""

    client_id: str
    client_secret: str
    scopes: list[str]


class NewSigningKey(StrictModel):
    """`POST /admin/merchants/{id}/signing-keys`."""

    public_key_pem: Annotated[StrictStr, Field(min_length=1, max_length=10_000)]
    kid: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None


class SigningKeyOut(BaseModel):
    """A registered key's id."""

    kid: str


class NewConsoleUser(StrictModel):
    """`POST /admin/merchants/{id}/console-users`: who signs in to the console, and the
    scopes they act with there (default: every scope of the API)."""

    email: Annotated[StrictStr, Field(min_length=3, max_length=254, pattern=r"^[^@\s]+@[^@\s]+$")]
    scopes: list[Annotated[StrictStr, Field(min_length=1, max_length=100)]] | None = None


class ConsoleUserOut(BaseModel):
    """A console user just created, with the link where they set their password (it works
    once, until `set_password_expires_at`)."""

    id: str
    merchant_id: str
    email: str
    scopes: list[str]
    set_password_url: str
    set_password_expires_at: str


class WebhookSettings(StrictModel):
    """`PUT /admin/merchants/{id}/webhooks`: a field given as null clears that URI."""

    payments_uri: Annotated[StrictStr, Field(max_length=2000)] | None = None
    payouts_uri: Annotated[StrictStr, Field(max_length=2000)] | None = None


class WebhookSettingsOut(BaseModel):
    """The webhook URIs now configured."""

    payments_uri: str | None
    payouts_uri: str | None


class ReturnUris(StrictModel):
    """`PUT /admin/merchants/{id}/return-uris`: the whole allow-list (an empty list clears it).

    Each is an absolute https URI without query or fragment; in production mode a payer's
    `return_uri` must have the same scheme, host and port as one of them and a path under its
    path (on a segment boundary)."""

    uris: Annotated[
        list[Annotated[StrictStr, Field(max_length=MAX_URI_LENGTH)]],
        Field(max_length=MAX_RETURN_URIS),
    ]


class ReturnUrisOut(BaseModel):
    """The merchant's allowed return URIs now stored."""

    uris: list[str]


class NewMerchantAccount(StrictModel):
    """`POST /admin/merchants/{id}/merchant-accounts`."""

    currency: Literal["GBP", "EUR"]
    account_holder_name: Name | None = None


class BalanceThreshold(StrictModel):
    """`PUT /admin/merchant-accounts/{id}/balance-threshold` (null clears)."""

    threshold_in_minor: Annotated[StrictInt, Field(ge=0, le=2**63 - 1)] | None


class ScreeningList(StrictModel):
    """`POST /admin/screening-list`: the names that AML screening rejects."""

    names: list[Annotated[StrictStr, Field(min_length=1, max_length=200)]]


class ScreeningListOut(BaseModel):
    """The screening list now in force."""

    names: list[str]


class SweepingRequest(StrictModel):
    """`POST /v3/merchant-accounts/{id}/sweeping`."""

    max_amount_in_minor: Annotated[StrictInt, Field(ge=0, le=2**63 - 1)]
    currency: Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")] | None = None
    frequency: Literal["daily", "weekly", "fortnightly"]


class SweepingDestination(BaseModel):
    """Where sweeps are paid: the account's approved IBAN."""

    type: Literal["iban"]
    iban: str


class SweepingOut(BaseModel):
    """`GET /v3/merchant-accounts/{id}/sweeping`."""

    max_amount_in_minor: int
    currency: str
    frequency: Literal["daily", "weekly", "fortnightly"]
    destination: SweepingDestination


class SweepingDestinationRequest(StrictModel):
    """`PUT /admin/merchant-accounts/{id}/sweeping-destination` (null withdraws it)."""

    iban: Annotated[StrictStr, Field(min_length=5, max_length=64)] | None


class SweepingDestinationOut(BaseModel):
    """The account's sweeping destination as the operator sees it: the approved IBAN (null
    when none is), and the IBAN sweeps go to (in sandbox mode, the generated one when none
    is approved)."""

    approved_iban: str | None
    iban: str | None
