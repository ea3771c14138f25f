"""Schema types that the bodies of several areas share: strict request models, amounts,
currencies, ids, metadata, addresses, redirects and the answers of a payer's journey.

They are the API's words, not one area's, so they live below the areas (DESIGN §9).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from bankrail.core.money import MAX_AMOUNT_IN_MINOR

__all__ = [
    "PROVIDER_RETURN_URL",
    "AccountNumber",
    "Address",
    "Amount",
    "AuthorizationFlowAnswer",
    "Currency",
    "DateOfBirth",
    "MerchantAccountBeneficiary",
    "Metadata",
    "Redirect",
    "ShortText",
    "SortCode",
    "SortCodeAccountNumber",
    "StrictModel",
    "Uuid",
]


class StrictModel(BaseModel):
    """Request bodies: exact JSON types, no unknown fields."""

    model_config = ConfigDict(extra="forbid", strict=True)


Amount = Annotated[StrictInt, Field(gt=0, le=MAX_AMOUNT_IN_MINOR)]
Currency = Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")]
Uuid = Annotated[
    StrictStr,
    Field(pattern=r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"),
]
Metadata = Annotated[
    dict[Annotated[str, Field(max_length=100)], Annotated[StrictStr, Field(max_length=500)]],
    Field(max_length=50),
]
ShortText = Annotated[StrictStr, Field(min_length=1, max_length=200)]
# Digits are written [0-9]: the patterns' \d would take any script's digits ("١٢٣٤٥٦").
DateOfBirth = Annotated[StrictStr, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]
SortCode = Annotated[StrictStr, Field(pattern=r"^[0-9]{6}$")]
AccountNumber = Annotated[StrictStr, Field(pattern=r"^[0-9]{8}$")]


class SortCodeAccountNumber(StrictModel):
    """A UK account: 6-digit sort code and 8-digit account number."""

    type: Literal["sort_code_account_number"]
    sort_code: SortCode
    account_number: AccountNumber


class Address(StrictModel):
    """A beneficiary's address (spec 2.4)."""

    address_line1: Annotated[StrictStr, Field(min_length=1, max_length=140)]
    address_line2: Annotated[StrictStr, Field(max_length=140)] | None = None
    city: Annotated[StrictStr, Field(min_length=1, max_length=140)]
    state: Annotated[StrictStr, Field(min_length=1, max_length=140)]
    zip: Annotated[StrictStr, Field(min_length=1, max_length=20)]
    country_code: Annotated[StrictStr, Field(pattern=r"^[A-Z]{2}$")]


class MerchantAccountBeneficiary(StrictModel):
    """The merchant account a payment pays into."""

    type: Literal["merchant_account"]
    merchant_account_id: Uuid
    account_holder_name: ShortText | None = None
    reference: Annotated[StrictStr, Field(max_length=140)] | None = None


class Redirect(StrictModel):
    """Where the payer returns after the bank."""

    return_uri: Annotated[StrictStr, Field(min_length=1, max_length=2000)]
    direct_return_uri: Annotated[StrictStr, Field(max_length=2000)] | None = None


class AuthorizationFlowAnswer(BaseModel):
    """The status and the next action of the authorisation journey."""

    model_config = ConfigDict(extra="allow")

    status: str
    authorization_flow: dict[str, Any] | None = None


# The 202 answer of the mock bank's headless actions: the provider return URL, plain text.
PROVIDER_RETURN_URL: dict[str, Any] = {
    "description": "The provider return URL: where the bank sends the payer next.",
    "content": {"text/plain": {"schema": {"type": "string", "format": "uri"}}},
}
