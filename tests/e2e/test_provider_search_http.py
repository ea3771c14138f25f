"""Provider search over HTTP: v3 search and lookup, and the deprecated v2 search (spec 2.9, 4.2,
9.3; docs/api.md)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from e2e_helpers import assert_invalid, assert_problem, bearer

from support.api import MerchantClient, Operator
from support.server import RunningServer

SEARCH = "/v3/payments-providers/search"
ALIAS = "/v3/payment-providers/search"
LEGACY = "/v2/single-immediate-payments-providers"
DE_INPUTS = "mock-payments-de-redirect-additional-input-text"
GA_IDS = [
    "mock-payments-gb-redirect",
    "mock-payments-de-redirect",
    "mock-payments-fr-redirect",
    "mock-payments-de-embedded",
    "mock-payments-pl-redirect",
    "mock-payments-no-redirect",
    DE_INPUTS,
]


@pytest.fixture
def merchant(operator: Operator) -> MerchantClient:
    return operator.new_merchant()


def _search(merchant: MerchantClient, body: Any, path: str = SEARCH) -> httpx.Response:
    """An unsigned search with the merchant's bearer token."""
    return merchant.http.post(path, json=body, headers=bearer(merchant.token()))


def _ids(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    body = answer.json()
    assert set(body) == {"items"}
    return [item["id"] for item in body["items"]]


def _legacy(merchant: MerchantClient, **params: str) -> httpx.Response:
    return merchant.http.get(LEGACY, params={"client_id": merchant.client_id, **params})


def _legacy_ids(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"results"}
    return [item["provider_id"] for item in body["results"]]


def test_search_by_currency_gbp_finds_the_uk_bank(merchant: MerchantClient) -> None:
    assert _ids(_search(merchant, {"currencies": ["GBP"]})) == ["mock-payments-gb-redirect"]


def test_search_answers_the_provider_resource(
    merchant: MerchantClient, server: RunningServer
) -> None:
    answer = _search(merchant, {"currencies": ["GBP"]})
    assert _ids(answer) == ["mock-payments-gb-redirect"]
    [item] = answer.json()["items"]
    assert set(item) == {
        "id",
        "display_name",
        "icon_uri",
        "logo_uri",
        "bg_color",
        "country_code",
        "capabilities",
    }
    assert item["country_code"] == "GB"
    assert item["icon_uri"].startswith(server.base_url)
    assert item["logo_uri"].startswith(server.base_url)
    assert item["capabilities"] == {
        "payments": {
            "bank_transfer": {
                "release_channel": "general_availability",
                "schemes": [{"id": "faster_payments_service"}],
            }
        },
        # The UK bank takes both kinds of mandate (variable recurring payments).
        "mandates": {
            "vrp_sweeping": {"release_channel": "general_availability"},
            "vrp_commercial": {"release_channel": "general_availability"},
        },
    }


def test_only_the_uk_bank_shows_mandate_capabilities(merchant: MerchantClient) -> None:
    items = _search(merchant, {}).json()["items"]
    with_mandates = [item["id"] for item in items if "mandates" in item["capabilities"]]
    assert with_mandates == ["mock-payments-gb-redirect"]


def test_search_with_an_empty_body_returns_general_availability_providers(
    merchant: MerchantClient,
) -> None:
    assert _ids(_search(merchant, {})) == GA_IDS


def test_search_eur_germany_redirect(merchant: MerchantClient) -> None:
    body = {
        "currencies": ["EUR"],
        "countries": ["DE"],
        "customer_segments": ["retail"],
        "authorization_flow": {"configuration": {"redirect": {}}},
    }
    assert _ids(_search(merchant, body)) == ["mock-payments-de-redirect", DE_INPUTS]


def test_search_redirect_accepts_a_return_uri(merchant: MerchantClient) -> None:
    body = {
        "countries": ["DE"],
        "authorization_flow": {
            "configuration": {"redirect": {"return_uri": "https://shop.example/back"}}
        },
    }
    assert _ids(_search(merchant, body)) == ["mock-payments-de-redirect", DE_INPUTS]


def test_search_form_selects_embedded_providers(merchant: MerchantClient) -> None:
    body = {
        "currencies": ["EUR"],
        "countries": ["DE"],
        "authorization_flow": {"configuration": {"form": {}}},
    }
    assert _ids(_search(merchant, body)) == ["mock-payments-de-embedded"]


def test_search_with_both_flows_selects_either(merchant: MerchantClient) -> None:
    body = {
        "currencies": ["EUR"],
        "countries": ["DE"],
        "authorization_flow": {"configuration": {"redirect": {}, "form": {}}},
    }
    assert _ids(_search(merchant, body)) == [
        "mock-payments-de-redirect",
        "mock-payments-de-embedded",
        DE_INPUTS,
    ]


def test_search_by_customer_segment(merchant: MerchantClient) -> None:
    assert _ids(_search(merchant, {"customer_segments": ["business"]})) == [
        "mock-payments-gb-redirect",
        "mock-payments-de-redirect",
        "mock-payments-pl-redirect",
        "mock-payments-no-redirect",
    ]
    assert _ids(_search(merchant, {"customer_segments": ["corporate"]})) == []


def test_private_beta_providers_need_the_release_channel(merchant: MerchantClient) -> None:
    assert _ids(_search(merchant, {"countries": ["NL"]})) == []
    body = {"countries": ["NL"], "release_channel": "private_beta"}
    answer = _search(merchant, body)
    assert _ids(answer) == ["mock-payments-nl-redirect"]
    [item] = answer.json()["items"]
    assert item["capabilities"]["payments"]["bank_transfer"]["release_channel"] == "private_beta"


def test_alias_path_gives_the_same_items(merchant: MerchantClient) -> None:
    for body in ({}, {"currencies": ["EUR"], "countries": ["DE"]}, {"release_channel": "alpha"}):
        main = _search(merchant, body)
        alias = _search(merchant, body, ALIAS)
        assert _ids(alias) == _ids(main)
        assert alias.json() == main.json()


def test_search_needs_no_signature(merchant: MerchantClient) -> None:
    answer = merchant.http.post(
        SEARCH,
        json={"currencies": ["GBP"]},
        headers={**bearer(merchant.token()), "Content-Type": "application/json"},
    )
    assert "Svc-Signature" not in answer.request.headers
    assert "Idempotency-Key" not in answer.request.headers
    assert _ids(answer) == ["mock-payments-gb-redirect"]


def test_search_without_a_token_is_401(server: RunningServer) -> None:
    for path in (SEARCH, ALIAS):
        answer = httpx.post(f"{server.base_url}{path}", json={"currencies": ["GBP"]})
        assert_problem(answer, 401, "Unauthenticated")


def test_search_with_a_bad_token_is_401(merchant: MerchantClient) -> None:
    answer = merchant.http.post(SEARCH, json={}, headers=bearer("not-a-token"))
    assert_problem(answer, 401, "Unauthenticated")


def test_search_with_a_token_lacking_payments_is_403_invalid_audience(
    operator: Operator,
) -> None:
    merchant = operator.new_merchant(scopes=[])
    for path in (SEARCH, ALIAS):
        answer = _search(merchant, {"currencies": ["GBP"]}, path)
        problem = assert_problem(answer, 403, "Forbidden")
        assert "InvalidAudience" in problem["detail"]
    lookup = merchant.get("/v3/payments-providers/mock-payments-gb-redirect")
    assert "InvalidAudience" in assert_problem(lookup, 403)["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"currencies": "GBP"}, "currencies"),
        ({"currencies": ["gbp"]}, "currencies"),
        ({"countries": ["DEU"]}, "countries"),
        ({"customer_segments": ["everyone"]}, "customer_segments"),
        ({"release_channel": "beta"}, "release_channel"),
        ({"release_channel": 1}, "release_channel"),
        ({"authorization_flow": {"configuration": {"redirect": []}}}, "authorization_flow"),
        ({"authorization_flow": {"configuration": {"popup": {}}}}, "authorization_flow"),
        ({"currency": ["GBP"]}, "currency"),
    ],
)
def test_bad_search_body_is_400_naming_the_field(
    merchant: MerchantClient, body: dict[str, Any], field: str
) -> None:
    problem = assert_problem(_search(merchant, body), 400, "Invalid Parameters")
    errors = problem.get("errors")
    assert isinstance(errors, dict)
    # an item of a list is named with its index, e.g. `currencies[0]`
    assert any(key == field or key.startswith((f"{field}.", f"{field}[")) for key in errors), (
        field,
        errors,
    )
    assert field in problem["detail"]


def test_search_body_must_be_a_json_object(merchant: MerchantClient) -> None:
    answer = merchant.http.post(
        SEARCH,
        content=b'["GBP"]',
        headers={**bearer(merchant.token()), "Content-Type": "application/json"},
    )
    assert_invalid(answer)
    malformed = merchant.http.post(
        SEARCH,
        content=b'{"currencies": [',
        headers={**bearer(merchant.token()), "Content-Type": "application/json"},
    )
    assert_invalid(malformed)


def test_get_provider_by_id(merchant: MerchantClient) -> None:
    answer = merchant.get("/v3/payments-providers/mock-payments-gb-redirect")
    assert answer.status_code == 200, answer.text
    searched = _search(merchant, {"currencies": ["GBP"]}).json()["items"][0]
    assert answer.json() == searched


def test_private_beta_provider_can_be_looked_up(merchant: MerchantClient) -> None:
    answer = merchant.get("/v3/payments-providers/mock-payments-nl-redirect")
    assert answer.status_code == 200, answer.text
    assert answer.json()["country_code"] == "NL"


def test_unknown_provider_is_404(merchant: MerchantClient) -> None:
    answer = merchant.get("/v3/payments-providers/mock-payments-xx-redirect")
    assert_problem(answer, 404, "Not Found")


def test_get_provider_needs_a_token(server: RunningServer) -> None:
    answer = httpx.get(f"{server.base_url}/v3/payments-providers/mock-payments-gb-redirect")
    assert_problem(answer, 401)


def test_legacy_search_by_country(merchant: MerchantClient, server: RunningServer) -> None:
    answer = _legacy(merchant, country="GB")
    assert _legacy_ids(answer) == ["mock-payments-gb-redirect"]
    assert answer.headers["deprecation"] == "true"
    link = answer.headers["link"]
    assert 'rel="successor-version"' in link
    assert f"<{server.base_url}{SEARCH}>" in link
    [result] = answer.json()["results"]
    assert result == {
        "provider_id": "mock-payments-gb-redirect",
        "display_name": result["display_name"],
        "logo_url": result["logo_url"],
        "icon_url": result["icon_url"],
        "bg_color": result["bg_color"],
        "country": "GB",
        "currencies": ["GBP"],
        "auth_flow_types": ["redirect"],
        "release_stage": "general_availability",
    }
    v3 = merchant.get("/v3/payments-providers/mock-payments-gb-redirect").json()
    assert (result["display_name"], result["logo_url"], result["icon_url"], result["bg_color"]) == (
        v3["display_name"],
        v3["logo_uri"],
        v3["icon_uri"],
        v3["bg_color"],
    )


def test_legacy_search_needs_no_bearer_token(
    merchant: MerchantClient, server: RunningServer
) -> None:
    answer = httpx.get(
        f"{server.base_url}{LEGACY}", params={"client_id": merchant.client_id, "country": "DE"}
    )
    assert "authorization" not in answer.request.headers
    assert _legacy_ids(answer) == [
        "mock-payments-de-redirect",
        "mock-payments-de-embedded",
        DE_INPUTS,
    ]


def test_legacy_search_with_an_unknown_client_id_is_400(server: RunningServer) -> None:
    answer = httpx.get(
        f"{server.base_url}{LEGACY}", params={"client_id": "sandbox-nobody", "country": "GB"}
    )
    assert_invalid(answer, "client_id")


def test_legacy_search_without_client_id_is_400(server: RunningServer) -> None:
    answer = httpx.get(f"{server.base_url}{LEGACY}", params={"country": "GB"})
    assert_invalid(answer, "client_id")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"country": "GB,Germany"}, "country"),
        ({"currency": "GBP,euro"}, "currency"),
        ({"auth_flow_type": "redirect,popup"}, "auth_flow_type"),
        ({"account_type": "bban"}, "account_type"),
        ({"release_channel": "beta"}, "release_channel"),
    ],
)
def test_legacy_search_with_a_bad_value_is_400_naming_it(
    merchant: MerchantClient, params: dict[str, str], field: str
) -> None:
    assert_invalid(_legacy(merchant, **params), field)


def test_legacy_search_comma_separated_lists(merchant: MerchantClient) -> None:
    assert _legacy_ids(_legacy(merchant, country="GB,FR")) == [
        "mock-payments-gb-redirect",
        "mock-payments-fr-redirect",
    ]
    assert _legacy_ids(_legacy(merchant, country="DE", auth_flow_type="embedded")) == [
        "mock-payments-de-embedded"
    ]
    assert _legacy_ids(_legacy(merchant, country="DE", auth_flow_type="redirect,embedded")) == [
        "mock-payments-de-redirect",
        "mock-payments-de-embedded",
        DE_INPUTS,
    ]


def test_legacy_account_type_selects_by_currency(merchant: MerchantClient) -> None:
    assert _legacy_ids(_legacy(merchant, account_type="sort_code_account_number")) == [
        "mock-payments-gb-redirect"
    ]
    assert _legacy_ids(_legacy(merchant, account_type="iban")) == [
        "mock-payments-de-redirect",
        "mock-payments-fr-redirect",
        "mock-payments-de-embedded",
        DE_INPUTS,
    ]
    assert _legacy_ids(_legacy(merchant, account_type="iban", currency="GBP")) == []


def test_legacy_release_channel(merchant: MerchantClient) -> None:
    assert _legacy_ids(_legacy(merchant, country="NL")) == []
    answer = _legacy(merchant, country="NL", release_channel="private_beta")
    assert _legacy_ids(answer) == ["mock-payments-nl-redirect"]
    assert answer.json()["results"][0]["release_stage"] == "private_beta"


@pytest.mark.parametrize(
    ("params", "body"),
    [
        ({}, {}),
        ({"country": "GB"}, {"countries": ["GB"]}),
        ({"currency": "EUR"}, {"currencies": ["EUR"]}),
        (
            {"country": "DE", "auth_flow_type": "redirect"},
            {"countries": ["DE"], "authorization_flow": {"configuration": {"redirect": {}}}},
        ),
        (
            {"country": "DE", "auth_flow_type": "embedded"},
            {"countries": ["DE"], "authorization_flow": {"configuration": {"form": {}}}},
        ),
        (
            {"currency": "EUR", "release_channel": "private_beta"},
            {"currencies": ["EUR"], "release_channel": "private_beta"},
        ),
    ],
)
def test_provider_ids_are_the_same_in_v2_and_v3(
    merchant: MerchantClient, params: dict[str, str], body: dict[str, Any]
) -> None:
    assert _legacy_ids(_legacy(merchant, **params)) == _ids(_search(merchant, body))


def test_openapi_documents_provider_routes(server: RunningServer) -> None:
    spec = httpx.get(f"{server.base_url}/openapi.json").json()
    paths = spec["paths"]
    for path in (SEARCH, ALIAS):
        assert {"200", "400", "401", "403"} <= set(paths[path]["post"]["responses"]), path
    lookup = paths["/v3/payments-providers/{provider_id}"]["get"]["responses"]
    assert {"200", "401", "403", "404"} <= set(lookup)
    legacy = paths[LEGACY]["get"]
    assert legacy.get("deprecated") is True
    assert {"200", "400"} <= set(legacy["responses"])
