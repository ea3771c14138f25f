"""The mock provider catalogue matches docs/sandbox.md, and search filters it as documented."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from bankrail.core.powers import SANDBOX, SandboxPowers
from bankrail.core.problems import Conflict
from bankrail.payments.provider_routes import ProviderSearchRequest
from bankrail.rails.providers import (
    CATALOGUE,
    Provider,
    find_provider,
    offered,
    require_offered,
    search,
)

DE_INPUTS = "mock-payments-de-redirect-additional-input-text"
# The provider table of docs/sandbox.md, row by row.
CATALOGUE_TABLE = [
    (
        "mock-payments-gb-redirect",
        "GB",
        ("GBP",),
        ("retail", "business"),
        "general_availability",
        "redirect",
        ("faster_payments_service",),
    ),
    (
        "mock-payments-de-redirect",
        "DE",
        ("EUR",),
        ("retail", "business"),
        "general_availability",
        "redirect",
        ("sepa_credit_transfer_instant", "sepa_credit_transfer"),
    ),
    (
        "mock-payments-fr-redirect",
        "FR",
        ("EUR",),
        ("retail",),
        "general_availability",
        "redirect",
        ("sepa_credit_transfer_instant", "sepa_credit_transfer"),
    ),
    (
        "mock-payments-de-embedded",
        "DE",
        ("EUR",),
        ("retail",),
        "general_availability",
        "embedded",
        ("sepa_credit_transfer",),
    ),
    (
        "mock-payments-nl-redirect",
        "NL",
        ("EUR",),
        ("retail",),
        "private_beta",
        "redirect",
        ("sepa_credit_transfer_instant",),
    ),
    (
        "mock-payments-pl-redirect",
        "PL",
        ("PLN",),
        ("retail", "business"),
        "general_availability",
        "redirect",
        ("polish_domestic_standard",),
    ),
    (
        "mock-payments-no-redirect",
        "NO",
        ("NOK",),
        ("retail", "business"),
        "general_availability",
        "redirect",
        ("norwegian_domestic_credit_transfer",),
    ),
    (
        DE_INPUTS,
        "DE",
        ("EUR",),
        ("retail",),
        "general_availability",
        "redirect",
        ("sepa_credit_transfer", "sepa_credit_transfer_instant"),
    ),
    (
        "ob-uki-mock-bank-sbox",
        "GB",
        ("GBP",),
        ("retail", "business"),
        "private_beta",
        "redirect",
        ("faster_payments_service",),
    ),
    (
        "mock",
        "GB",
        ("GBP",),
        ("retail", "business"),
        "private_beta",
        "redirect",
        ("faster_payments_service",),
    ),
]
GA_IDS = [
    "mock-payments-gb-redirect",
    "mock-payments-de-redirect",
    "mock-payments-fr-redirect",
    "mock-payments-de-embedded",
    "mock-payments-pl-redirect",
    "mock-payments-no-redirect",
    DE_INPUTS,
]
EUR_IDS = [
    "mock-payments-de-redirect",
    "mock-payments-fr-redirect",
    "mock-payments-de-embedded",
    DE_INPUTS,
]


BUSINESS_IDS = [
    "mock-payments-gb-redirect",
    "mock-payments-de-redirect",
    "mock-payments-pl-redirect",
    "mock-payments-no-redirect",
]


def ids(providers: list[Provider]) -> list[str]:
    return [p.id for p in providers]


def test_catalogue_rows_equal_the_design_table() -> None:
    rows = [
        (
            p.id,
            p.country_code,
            p.currencies,
            p.customer_segments,
            p.release_channel,
            p.flow,
            p.schemes,
        )
        for p in CATALOGUE
    ]
    assert rows == CATALOGUE_TABLE


def test_every_provider_is_found_by_id_and_unknown_ids_are_not() -> None:
    for provider in CATALOGUE:
        assert find_provider(provider.id) is provider
    assert find_provider("mock-payments-xx-redirect") is None
    assert find_provider("") is None


def test_provider_resource_shape() -> None:
    provider = find_provider("mock-payments-de-redirect")
    assert provider is not None
    resource = provider.to_api("https://bankrail.test")
    assert resource == {
        "id": "mock-payments-de-redirect",
        "display_name": provider.display_name,
        "icon_uri": "https://bankrail.test/static/providers/mock-payments-de-redirect-icon.svg",
        "logo_uri": "https://bankrail.test/static/providers/mock-payments-de-redirect-logo.svg",
        "bg_color": provider.bg_color,
        "country_code": "DE",
        "capabilities": {
            "payments": {
                "bank_transfer": {
                    "release_channel": "general_availability",
                    "schemes": [
                        {"id": "sepa_credit_transfer_instant"},
                        {"id": "sepa_credit_transfer"},
                    ],
                }
            }
        },
    }


def test_search_without_filters_returns_general_availability_only() -> None:
    assert ids(search(CATALOGUE)) == GA_IDS


@pytest.mark.parametrize(
    ("currencies", "expected"),
    [
        (["GBP"], ["mock-payments-gb-redirect"]),
        (["EUR"], EUR_IDS),
        (["GBP", "EUR"], ["mock-payments-gb-redirect", *EUR_IDS]),
        (["USD"], []),
    ],
)
def test_search_by_currency(currencies: list[str], expected: list[str]) -> None:
    assert ids(search(CATALOGUE, currencies=currencies)) == expected


@pytest.mark.parametrize(
    ("countries", "expected"),
    [
        (["GB"], ["mock-payments-gb-redirect"]),
        (["DE"], ["mock-payments-de-redirect", "mock-payments-de-embedded", DE_INPUTS]),
        (["FR", "GB"], ["mock-payments-gb-redirect", "mock-payments-fr-redirect"]),
        (["NL"], []),
        (["US"], []),
    ],
)
def test_search_by_country(countries: list[str], expected: list[str]) -> None:
    assert ids(search(CATALOGUE, countries=countries)) == expected


@pytest.mark.parametrize(
    ("segments", "expected"),
    [
        (["business"], BUSINESS_IDS),
        (["retail"], GA_IDS),
        (["corporate"], []),
        (["corporate", "business"], BUSINESS_IDS),
    ],
)
def test_search_by_customer_segment(segments: list[str], expected: list[str]) -> None:
    assert ids(search(CATALOGUE, customer_segments=segments)) == expected


def test_search_by_flow() -> None:
    assert ids(search(CATALOGUE, countries=["DE"], flows=["redirect"])) == [
        "mock-payments-de-redirect",
        DE_INPUTS,
    ]
    assert ids(search(CATALOGUE, countries=["DE"], flows=["embedded"])) == [
        "mock-payments-de-embedded"
    ]
    assert ids(search(CATALOGUE, countries=["DE"], flows=["redirect", "embedded"])) == [
        "mock-payments-de-redirect",
        "mock-payments-de-embedded",
        DE_INPUTS,
    ]
    assert ids(search(CATALOGUE, flows=["embedded"])) == ["mock-payments-de-embedded"]


def test_filters_combine_with_and() -> None:
    found = search(CATALOGUE, currencies=["EUR"], countries=["DE"], flows=["redirect"])
    assert ids(found) == ["mock-payments-de-redirect", DE_INPUTS]
    assert search(CATALOGUE, currencies=["GBP"], countries=["DE"]) == []


def test_release_channel_default_excludes_private_beta() -> None:
    assert search(CATALOGUE, countries=["NL"]) == []
    assert search(CATALOGUE, countries=["NL"], release_channel="general_availability") == []
    assert search(CATALOGUE, countries=["NL"], release_channel="public_beta") == []


def test_private_beta_channel_includes_private_beta_and_general_availability() -> None:
    assert ids(search(CATALOGUE, countries=["NL"], release_channel="private_beta")) == [
        "mock-payments-nl-redirect"
    ]
    assert ids(search(CATALOGUE, release_channel="private_beta")) == [
        "mock-payments-gb-redirect",
        "mock-payments-de-redirect",
        "mock-payments-fr-redirect",
        "mock-payments-de-embedded",
        "mock-payments-nl-redirect",
        "mock-payments-pl-redirect",
        "mock-payments-no-redirect",
        DE_INPUTS,
        "ob-uki-mock-bank-sbox",
        "mock",
    ]


def test_capabilities_filter_keeps_providers_with_every_capability_named() -> None:
    payments = search(CATALOGUE, capabilities={"payments": {"bank_transfer": {}}})
    assert ids(payments) == GA_IDS
    sweeping = search(
        CATALOGUE, release_channel="private_beta", capabilities={"mandates": {"vrp_sweeping": {}}}
    )
    assert ids(sweeping) == ["mock-payments-gb-redirect", "ob-uki-mock-bank-sbox"]
    for provider in CATALOGUE:
        resource = provider.to_api("https://bankrail.test")
        assert resource["display_name"]
        assert resource["country_code"]
        if "mandates" in resource["capabilities"]:
            assert resource["capabilities"]["mandates"]["vrp_sweeping"]["release_channel"]
    gb = find_provider("mock-payments-gb-redirect")
    assert gb is not None
    assert gb.display_name == "Mock UK Payments - Redirect Flow"
    assert gb.schemes == ("faster_payments_service",)
    assert ids(search(CATALOGUE, release_channel="alpha")) == [p.id for p in CATALOGUE]


@pytest.mark.parametrize(
    ("configuration", "expected"),
    [
        (None, None),
        ({}, None),
        ({"redirect": {}}, ["redirect"]),
        ({"redirect": {"return_uri": "https://example.com/back"}}, ["redirect"]),
        ({"form": {}}, ["embedded"]),
        ({"redirect": {}, "form": {}}, ["redirect", "embedded"]),
    ],
)
def test_search_body_authorization_flow_selects_flows(
    configuration: dict[str, Any] | None, expected: list[str] | None
) -> None:
    body: dict[str, Any] = (
        {} if configuration is None else {"authorization_flow": {"configuration": configuration}}
    )
    assert ProviderSearchRequest.model_validate(body).flows() == expected


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"currencies": "GBP"}, "currencies"),
        ({"currencies": ["gbp"]}, "currencies"),
        ({"countries": ["GBR"]}, "countries"),
        ({"customer_segments": ["private"]}, "customer_segments"),
        ({"release_channel": "beta"}, "release_channel"),
        ({"authorization_flow": {"configuration": {"redirect": {"x": 1}}}}, "authorization_flow"),
        ({"authorization_flow": {"configuration": {"form": []}}}, "authorization_flow"),
        ({"unknown": True}, "unknown"),
    ],
)
def test_search_body_is_strict(body: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ProviderSearchRequest.model_validate(body)
    assert {str(e["loc"][0]) for e in caught.value.errors()} == {field}


def test_a_deployment_without_mock_providers_offers_none() -> None:
    production = SandboxPowers.for_deployment(sandbox=False, mock_providers=False)
    assert offered(production) == ()
    assert search(offered(production), release_channel="alpha") == []
    with pytest.raises(Conflict, match="No payment provider is available"):
        require_offered(production)
    staging = SandboxPowers.for_deployment(sandbox=False, mock_providers=True)
    assert offered(staging) == offered(SANDBOX) == CATALOGUE
    require_offered(staging)
