"""Provider search over HTTP (spec 2.9, 4.2, 9.3; docs/api.md).

- `POST /v3/payments-providers/search` (alias `/v3/payment-providers/search`): bearer token with
  the `payments` scope, not signed, JSON body of filters.
- `GET /v3/payments-providers/{provider_id}`: one provider of the catalogue.
- `GET /v2/single-immediate-payments-providers`: the deprecated v2 search, authenticated by
  `client_id` only, answering from the same catalogue with `Deprecation` and `Link` headers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictStr
from starlette.responses import Response

from bankrail.core.problems import InvalidParameters, NotFound, invalid_field
from bankrail.http.openapi import ERRORS_AUTH, ERRORS_AUTH_NOT_FOUND, Responses
from bankrail.http.pipeline import MERCHANT, NOBODY, Call, Endpoint, routes
from bankrail.http.responses import json_response
from bankrail.http.schema_types import StrictModel
from bankrail.rails.providers import Flow, Provider, find_provider, offered, search

SEARCH_PATH = "/v3/payments-providers/search"
SEARCH_ALIAS_PATH = "/v3/payment-providers/search"
LEGACY_PATH = "/v2/single-immediate-payments-providers"
MAX_FILTER_VALUES = 50

ReleaseChannel = Literal["general_availability", "public_beta", "private_beta", "alpha"]
CustomerSegment = Literal["retail", "business", "corporate"]
CurrencyCode = Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$", description="ISO 4217")]
CountryCode = Annotated[StrictStr, Field(pattern=r"^[A-Z]{2}$", description="ISO 3166-1 alpha-2")]


# --- v3 request ---------------------------------------------------------------------------


class RedirectConfiguration(StrictModel):
    """Selects providers with the redirect flow; `return_uri` is accepted and not used."""

    return_uri: Annotated[StrictStr, Field(min_length=1, max_length=2000)] | None = None


class FormConfiguration(StrictModel):
    """Selects providers with the embedded (form) flow."""


class AuthorizationFlowConfiguration(StrictModel):
    """Which authorisation flows the caller supports: redirect, form (embedded), or both."""

    redirect: RedirectConfiguration | None = None
    form: FormConfiguration | None = None


class AuthorizationFlow(StrictModel):
    """`authorization_flow` of the search body."""

    configuration: AuthorizationFlowConfiguration | None = None


class Capability(StrictModel):
    """A capability asked for; it takes no options."""


class PaymentsCapabilityFilter(StrictModel):
    """Payment capabilities a provider must have."""

    bank_transfer: Capability | None = None


class MandatesCapabilityFilter(StrictModel):
    """Mandate capabilities a provider must have."""

    vrp_sweeping: Capability | None = None
    vrp_commercial: Capability | None = None


class CapabilitiesFilter(StrictModel):
    """`capabilities` of the search body: a provider must have every capability named."""

    payments: PaymentsCapabilityFilter | None = None
    mandates: MandatesCapabilityFilter | None = None


class ProviderSearchRequest(StrictModel):
    """`POST /v3/payments-providers/search` (spec 2.9). Every filter is optional; a list
    matches any of its values; without `release_channel` only general-availability providers
    are returned (a wider channel includes the narrower ones)."""

    currencies: Annotated[list[CurrencyCode], Field(max_length=MAX_FILTER_VALUES)] | None = None
    countries: Annotated[list[CountryCode], Field(max_length=MAX_FILTER_VALUES)] | None = None
    customer_segments: (
        Annotated[list[CustomerSegment], Field(max_length=MAX_FILTER_VALUES)] | None
    ) = None
    release_channel: ReleaseChannel | None = None
    authorization_flow: AuthorizationFlow | None = None
    capabilities: CapabilitiesFilter | None = None

    def flows(self) -> list[Flow] | None:
        """The flows asked for: redirect and/or embedded; None when any flow will do."""
        flow = self.authorization_flow
        configuration = flow.configuration if flow is not None else None
        if configuration is None:
            return None
        flows: list[Flow] = []
        if configuration.redirect is not None:
            flows.append("redirect")
        if configuration.form is not None:
            flows.append("embedded")
        return flows or None


# --- v3 answers ---------------------------------------------------------------------------


class SchemeOut(BaseModel):
    """A payment scheme the provider can use."""

    id: str


class BankTransferCapability(BaseModel):
    """Bank-transfer payments through this provider."""

    release_channel: ReleaseChannel
    schemes: list[SchemeOut]


class PaymentsCapabilities(BaseModel):
    """What the provider supports for payments."""

    bank_transfer: BankTransferCapability


class MandateCapability(BaseModel):
    """Mandates (variable recurring payments) of one type through this provider."""

    release_channel: ReleaseChannel


class MandatesCapabilities(BaseModel):
    """The mandate types the provider takes (absent: none)."""

    vrp_sweeping: MandateCapability | None = None
    vrp_commercial: MandateCapability | None = None


class ProviderCapabilities(BaseModel):
    """The provider's capabilities; `mandates` only for a provider that takes mandates."""

    payments: PaymentsCapabilities
    mandates: MandatesCapabilities | None = None


class ProviderOut(BaseModel):
    """A payments provider (a bank) the payer can authorise at."""

    id: str
    display_name: str
    icon_uri: str
    logo_uri: str
    bg_color: str
    country_code: str
    capabilities: ProviderCapabilities


class ProviderList(BaseModel):
    """The answer of the provider search."""

    items: list[ProviderOut]


# --- v2 (deprecated) answers ----------------------------------------------------------------


class V2Provider(BaseModel):
    """A provider as the deprecated v2 search describes it."""

    provider_id: str
    display_name: str
    logo_url: str
    icon_url: str
    bg_color: str
    country: str
    currencies: list[str]
    auth_flow_types: list[Literal["redirect", "embedded"]]
    release_stage: ReleaseChannel


class V2ProviderList(BaseModel):
    """`GET /v2/single-immediate-payments-providers`."""

    results: list[V2Provider]


# --- routes -------------------------------------------------------------------------------


async def search_providers(call: Call[ProviderSearchRequest | None, None]) -> Response:
    """Providers matching every given filter, in catalogue order. Not signed.

    `authorization_flow.configuration.redirect` selects redirect providers, `form` embedded
    ones, both either; without them any flow matches. An absent body is the same as `{}`.
    """
    # The catalogue is the same for every merchant.
    context, body = call.context, call.body
    request = body or ProviderSearchRequest()
    found = search(
        offered(context.settings.powers),
        currencies=request.currencies,
        countries=request.countries,
        customer_segments=request.customer_segments,
        release_channel=request.release_channel,
        flows=request.flows(),
        capabilities=(
            request.capabilities.model_dump(exclude_none=True) if request.capabilities else None
        ),
    )
    public_url = context.settings.public_url
    return json_response(200, {"items": [p.to_api(public_url) for p in found]})


async def get_provider(call: Call[None, None]) -> Response:
    """One provider this deployment offers, whatever its release channel; other ids are 404."""
    provider_id, context = call.params["provider_id"], call.context
    provider = find_provider(provider_id)
    if provider is None or provider not in offered(context.settings.powers):
        shown = provider_id if len(provider_id) <= 100 else provider_id[:100] + "..."
        raise NotFound(f"No payments provider with id {shown!r}.")
    return json_response(200, provider.to_api(context.settings.public_url))


# v2 `account_type` → the currency of the providers that can pay from such an account.
ACCOUNT_TYPE_CURRENCIES: dict[str, str] = {"sort_code_account_number": "GBP", "iban": "EUR"}
V2_AUTH_FLOW_TYPES: tuple[Flow, ...] = ("redirect", "embedded")

_LEGACY_RESPONSES: Responses = {
    200: {
        "headers": {
            "Deprecation": {
                "description": "Always `true`: this API is deprecated.",
                "schema": {"type": "string"},
            },
            "Link": {
                "description": 'The successor: `<…/v3/payments-providers/search>; rel="successor-'
                'version"`.',
                "schema": {"type": "string"},
            },
        }
    },
    400: ERRORS_AUTH[400],
}

CommaList = Annotated[
    list[str] | None,
    Field(description="Comma-separated values (the parameter may also be repeated)."),
]


def _split(raw: Iterable[str] | None) -> list[str]:
    """The values of a comma-separated (possibly repeated) query parameter, blanks dropped."""
    return [item.strip() for value in raw or () for item in value.split(",") if item.strip()]


def _code(length: int) -> Callable[[str], bool]:
    def check(value: str) -> bool:
        return len(value) == length and value.isascii() and value.isalpha() and value.isupper()

    return check


class _LegacyQuery:
    """Parses the v2 query lists, collecting every bad value before answering 400."""

    def __init__(self) -> None:
        self.errors: dict[str, list[str]] = {}

    def values(
        self, name: str, raw: list[str] | None, valid: Callable[[str], bool], expected: str
    ) -> list[str] | None:
        """The parameter's values, or None when it is absent or blank."""
        items = _split(raw)
        if not items:
            return None
        if len(items) > MAX_FILTER_VALUES:
            self.errors.setdefault(name, []).append(f"at most {MAX_FILTER_VALUES} values")
            return None
        for item in items:
            if not valid(item):
                shown = item if len(item) <= 40 else item[:40] + "..."
                self.errors.setdefault(name, []).append(f"{shown!r} is not {expected}")
        return items

    def check(self) -> None:
        """400 naming every bad parameter, if any."""
        if self.errors:
            fields = ", ".join(sorted(self.errors))
            raise InvalidParameters(f"The request is invalid: {fields}.", self.errors)


def _v2_provider(provider: Provider, public_url: str) -> dict[str, Any]:
    v3 = provider.to_api(public_url)
    return {
        "provider_id": provider.id,
        "display_name": provider.display_name,
        "logo_url": v3["logo_uri"],
        "icon_url": v3["icon_uri"],
        "bg_color": provider.bg_color,
        "country": provider.country_code,
        "currencies": list(provider.currencies),
        "auth_flow_types": [provider.flow],
        "release_stage": provider.release_channel,
    }


class LegacySearchQuery(BaseModel):
    """`GET /v2/single-immediate-payments-providers`."""

    client_id: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="An API client id; the v2 API authenticated by it alone.",
    )
    country: CommaList = None
    currency: CommaList = None
    auth_flow_type: CommaList = None
    account_type: CommaList = None
    release_channel: ReleaseChannel | None = None


async def legacy_search_providers(call: Call[None, LegacySearchQuery]) -> Response:
    """Deprecated: use `POST /v3/payments-providers/search`, which takes a JSON body and a
    bearer token instead of `client_id`. Same catalogue and provider ids.

    `account_type` `sort_code_account_number` selects GBP providers, `iban` EUR ones; combined
    with `currency`, a provider must satisfy both."""
    context, query = call.context, call.query
    client_id, country, currency = query.client_id, query.country, query.currency
    auth_flow_type, account_type = query.auth_flow_type, query.account_type
    release_channel = query.release_channel
    parsed = _LegacyQuery()
    countries = parsed.values("country", country, _code(2), "an ISO 3166-1 alpha-2 code such as GB")
    currencies = parsed.values("currency", currency, _code(3), "an ISO 4217 code such as GBP")
    flows = parsed.values(
        "auth_flow_type", auth_flow_type, V2_AUTH_FLOW_TYPES.__contains__, "redirect or embedded"
    )
    account_types = parsed.values(
        "account_type",
        account_type,
        ACCOUNT_TYPE_CURRENCIES.__contains__,
        "sort_code_account_number or iban",
    )
    parsed.check()

    if await context.clients.get(context.pool, client_id) is None:
        raise invalid_field("client_id", "no API client has this id")

    public_url = context.settings.public_url
    headers = {
        "Deprecation": "true",
        "Link": f'<{public_url}{SEARCH_PATH}>; rel="successor-version"',
    }
    wanted_currencies = set(currencies) if currencies else None
    if account_types:
        by_account = {ACCOUNT_TYPE_CURRENCIES[a] for a in account_types}
        wanted_currencies = (
            by_account if wanted_currencies is None else wanted_currencies & by_account
        )
        if not wanted_currencies:  # e.g. currency=GBP with account_type=iban: nothing fits
            return json_response(200, {"results": []}, headers)
    found = search(
        offered(context.settings.powers),
        currencies=wanted_currencies,
        countries=countries,
        release_channel=release_channel,
        flows=[f for f in V2_AUTH_FLOW_TYPES if f in flows] if flows else None,
    )
    return json_response(200, {"results": [_v2_provider(p, public_url) for p in found]}, headers)


def _search(path: str, summary: str | None = None) -> Endpoint:
    return Endpoint(
        "POST",
        path,
        search_providers,
        MERCHANT,
        body=ProviderSearchRequest,
        body_required=False,
        response_model=ProviderList,
        errors=ERRORS_AUTH,
        tags=["providers"],
        summary=summary,
    )


ROUTES = routes(
    _search(SEARCH_PATH),
    _search(SEARCH_ALIAS_PATH, "Search providers (alias of /v3/payments-providers/search)"),
    Endpoint(
        "GET",
        "/v3/payments-providers/{provider_id}",
        get_provider,
        MERCHANT,
        response_model=ProviderOut,
        errors=ERRORS_AUTH_NOT_FOUND,
        tags=["providers"],
    ),
    # Open: the v2 API authenticated by the `client_id` of its query, which the handler checks.
    Endpoint(
        "GET",
        LEGACY_PATH,
        legacy_search_providers,
        NOBODY,
        query=LegacySearchQuery,
        response_model=V2ProviderList,
        responses=_LEGACY_RESPONSES,
        tags=["providers (deprecated v2)"],
        deprecated=True,
    ),
)
"""The provider catalogue's routes, in the order of the OpenAPI document."""
