"""The authorisation flow as the official SDKs drive it, over HTTP against `bankrail serve`
(contract fidelity.md F1-F3, MB1-MB3, PR1; docs/api.md "Authorization flow"): the start
request's every field, the consent action of payments and mandates, the providers' forms in
the real input shape and the embedded provider's three forms ending in `wait`, the mock bank's
login uri and headless actions answering the provider return URL as plain text, and the
provider return of payments and mandates. Every body is one the SDKs send
(tests/fixtures/sdk-bodies)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from e2e_helpers import assert_invalid, assert_problem, bearer, wait_record_status
from mandate_helpers import create_mandate, mandate_body
from pay_in_helpers import merchant_with_webhooks, next_action, payment_body
from sdk_bodies import sdk_names, sdk_request

from support.api import MerchantClient, Operator

PAYMENTS = "/v3/payments"
MANDATES = "/v3/mandates"
GB_REDIRECT = "mock-payments-gb-redirect"
DE_EMBEDDED = "mock-payments-de-embedded"
DE_INPUTS = "mock-payments-de-redirect-additional-input-text"
SETTLED = {"payment_settled", "payment_failed"}


@pytest.fixture
def merchant(operator: Operator) -> MerchantClient:
    return merchant_with_webhooks(operator)


def _payment(merchant: MerchantClient, currency: str = "GBP", **extra: Any) -> str:
    answer = merchant.signed_post(PAYMENTS, payment_body(merchant, currency, **extra))
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def _flow_step(merchant: MerchantClient, path: str, body: Any) -> dict[str, Any]:
    answer = merchant.signed_post(path, body)
    assert answer.status_code == 200, answer.text
    flow: dict[str, Any] = answer.json()
    assert flow["status"] == "authorizing", flow
    return next_action(flow)


def _sdk_step(merchant: MerchantClient, name: str, **ids: str) -> dict[str, Any]:
    path, body = sdk_request(name, **ids)
    return _flow_step(merchant, path, body)


def _login_token(uri: str, resource_id: str) -> str:
    """The redirect uri is `{public_url}/mock-bank/login/{id}#token={token}`: its token."""
    parts = urlsplit(uri)
    assert parts.scheme in {"http", "https"}, uri
    assert parts.path == f"/mock-bank/login/{resource_id}", uri
    assert not parts.query, uri
    assert parts.fragment.startswith("token="), uri
    return parts.fragment.removeprefix("token=")


def _headless(http: httpx.Client, name: str, resource_id: str, token: str) -> str:
    """One SDK's headless mock bank action; the provider return URL it answers."""
    kind = "mandate" if "consent" in name else "payment"
    path, body = sdk_request(name, **{kind: resource_id})
    answer = http.post(path, json=body, headers=bearer(token))
    assert answer.status_code == 202, answer.text
    assert answer.headers["content-type"].startswith("text/plain"), answer.headers
    url = answer.text
    assert url == url.strip(), url
    assert "\n" not in url, url
    assert not url.startswith('"'), url
    assert urlsplit(url).scheme in {"http", "https"}, url
    return url


def _provider_return(merchant: MerchantClient, query: str, fragment: str | None) -> httpx.Response:
    body: dict[str, Any] = {"query": query}
    if fragment is not None:
        body["fragment"] = fragment
    return merchant.http.post(f"{PAYMENTS}-provider-return", json=body)


# --- F1: the start request -----------------------------------------------------------------


@pytest.mark.parametrize("name", sdk_names("*-authorization-flow-start*"))
def test_every_sdk_start_request_is_accepted(merchant: MerchantClient, name: str) -> None:
    if name.endswith("-mandate"):
        resource = str(create_mandate(merchant, mandate_body(merchant, provider_id=None))["id"])
        step = _sdk_step(merchant, name, mandate=resource)
    else:
        step = _sdk_step(merchant, name, payment=_payment(merchant))
    # A user_selected resource: the provider comes first, whatever the start request sent.
    assert step["type"] == "provider_selection", step
    assert GB_REDIRECT in {p["id"] for p in step["providers"]}


def test_consent_declared_for_a_preselected_provider_comes_right_after_the_start(
    merchant: MerchantClient,
) -> None:
    payment_id = _payment(merchant, provider_id=GB_REDIRECT)
    step = _sdk_step(merchant, "java-authorization-flow-start-consent", payment=payment_id)
    assert step == {"type": "consent", "subsequent_action_hint": "redirect"}
    # Without consent declared the redirect comes at once.
    other = _payment(merchant, provider_id=GB_REDIRECT)
    step = _sdk_step(merchant, "java-authorization-flow-start-direct-return", payment=other)
    assert step["type"] == "redirect"
    _login_token(step["uri"], other)


def test_a_journey_started_at_creation_takes_the_same_steps_and_get_shows_the_last(
    merchant: MerchantClient,
) -> None:
    """Creation with `authorization_flow` (fidelity P3) asks the declared consent first, then
    the provider's form, then the login uri; GET shows what the last step answered (P6)."""
    start = {"redirect": {"return_uri": "https://shop.example/back"}, "consent": {}}
    body = payment_body(merchant, "EUR", provider_id=DE_INPUTS, authorization_flow=start)
    created = merchant.signed_post(PAYMENTS, body)
    assert created.status_code == 201, created.text
    payment_id = created.json()["id"]
    assert next_action(created.json()) == {"type": "consent", "subsequent_action_hint": "form"}
    path = f"{PAYMENTS}/{payment_id}"
    assert next_action(merchant.get(path).json())["type"] == "consent"
    step = _flow_step(merchant, f"{path}/authorization-flow/actions/consent", {})
    assert step["type"] == "form"
    assert next_action(merchant.get(path).json()) == step
    inputs = {"psu-branch-code": "123", "psu-account-number": "1234567", "psu-sub-account": "01"}
    step = _flow_step(merchant, f"{path}/authorization-flow/actions/form", {"inputs": inputs})
    _login_token(step["uri"], payment_id)
    assert next_action(merchant.get(path).json()) == step


def test_start_request_refuses_unknown_input_types(merchant: MerchantClient) -> None:
    payment_id = _payment(merchant)
    answer = merchant.signed_post(
        f"{PAYMENTS}/{payment_id}/authorization-flow",
        {"provider_selection": {}, "form": {"input_types": ["voice"]}},
    )
    assert_invalid(answer, "form")


# --- F2, MB1-MB3, PR1: a payment through consent, the mock bank and the provider return ----


@pytest.mark.parametrize(
    ("action", "return_shape"),
    [("java-mock-bank-action", "java"), ("dotnet-mock-bank-action", "dotnet")],
)
def test_payment_with_consent_through_the_headless_mock_bank(
    merchant: MerchantClient, action: str, return_shape: str
) -> None:
    payment_id = _payment(merchant)
    step = _sdk_step(merchant, "java-authorization-flow-start-consent", payment=payment_id)
    assert step["type"] == "provider_selection"
    step = _sdk_step(merchant, "java-authorization-flow-provider-selection", payment=payment_id)
    assert step == {"type": "consent", "subsequent_action_hint": "redirect"}
    step = _sdk_step(merchant, "java-authorization-flow-consent", payment=payment_id)
    assert step["type"] == "redirect"
    token = _login_token(step["uri"], payment_id)
    # The consent is given once.
    again = merchant.signed_post(f"{PAYMENTS}/{payment_id}/authorization-flow/actions/consent", {})
    assert_problem(again, 409)

    url = _headless(merchant.http, action, payment_id, token)
    parts = urlsplit(url)
    query = f"?{parts.query}" if return_shape == "dotnet" else parts.query
    fragment = f"#{parts.fragment}" if return_shape == "dotnet" else None
    answer = _provider_return(merchant, query, fragment)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"resource": {"type": "payment", "payment_id": payment_id}}
    settled = wait_record_status(merchant, f"{PAYMENTS}/{payment_id}", SETTLED)
    assert settled["status"] == "payment_settled", settled


def test_cancel_at_the_bank_fails_the_payment_not_authorized(merchant: MerchantClient) -> None:
    payment_id = _payment(merchant, provider_id=GB_REDIRECT)
    step = _sdk_step(merchant, "java-authorization-flow-start", payment=payment_id)
    token = _login_token(step["uri"], payment_id)
    answer = merchant.http.post(
        f"/mock-bank/api/single-immediate-payments/{payment_id}/action",
        json={"action": "Cancel", "redirect": False},
        headers=bearer(token),
    )
    assert answer.status_code == 202, answer.text
    failed = wait_record_status(merchant, f"{PAYMENTS}/{payment_id}", {"payment_failed"})
    assert (failed["failure_stage"], failed["failure_reason"]) == ("authorizing", "not_authorized")


def test_a_start_without_return_uri_gets_the_mock_banks_own_return_url(
    merchant: MerchantClient,
) -> None:
    payment_id = _payment(merchant, provider_id=GB_REDIRECT)
    step = _flow_step(merchant, f"{PAYMENTS}/{payment_id}/authorization-flow", {})
    token = _login_token(step["uri"], payment_id)
    url = _headless(merchant.http, "java-mock-bank-action", payment_id, token)
    answer = _provider_return(merchant, urlsplit(url).query, "")
    assert answer.json() == {"resource": {"type": "payment", "payment_id": payment_id}}
    page = merchant.http.get(url)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")


def test_provider_return_without_an_id_names_the_query(merchant: MerchantClient) -> None:
    for query, fragment in (("", ""), ("?", "#"), ("state=1", None)):
        assert_invalid(_provider_return(merchant, query, fragment), "query")


def test_mock_bank_login_page_answers_html_directly(merchant: MerchantClient) -> None:
    payment_id = _payment(merchant, provider_id=GB_REDIRECT)
    step = _sdk_step(merchant, "java-authorization-flow-start", payment=payment_id)
    page = merchant.http.get(step["uri"], follow_redirects=False)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    # The page posts the fragment's token to itself; that opens the consent page.
    token = _login_token(step["uri"], payment_id)
    opened = merchant.http.post(f"/mock-bank/login/{payment_id}", data={"token": token})
    assert opened.status_code == 200
    assert 'action="/mock-bank/authorize"' in opened.text
    forged = merchant.http.post(f"/mock-bank/login/{payment_id}", data={"token": "x"})
    assert forged.status_code == 401


# --- F3: forms -------------------------------------------------------------------------------


def _check_input_shape(item: dict[str, Any]) -> None:
    assert item["type"] in {"text", "select", "text_with_image"}
    assert isinstance(item["mandatory"], bool)
    assert set(item["display_text"]) == {"key", "default"}
    if item["type"] == "select":
        for option in item["options"]:
            assert set(option["display_text"]) == {"key", "default"}
        return
    assert item["format"] in {
        "account_number",
        "alphabetical",
        "alphanumerical",
        "any",
        "email",
        "iban",
        "numerical",
        "sort_code",
    }
    assert isinstance(item["sensitive"], bool)
    assert 0 < item["min_length"] <= item["max_length"]
    for rule in item["regexes"]:
        assert set(rule["message"]) == {"key", "default"}
    if item["type"] == "text_with_image":
        assert item["image"]["type"] in {"uri", "base64"}


def _form_ids(step: dict[str, Any]) -> list[str]:
    assert step["type"] == "form", step
    for item in step["inputs"]:
        _check_input_shape(item)
    return [item["id"] for item in step["inputs"]]


def test_embedded_provider_asks_three_forms_then_waits(merchant: MerchantClient) -> None:
    payment_id = _payment(merchant, "EUR")
    flow = f"{PAYMENTS}/{payment_id}/authorization-flow"
    step = _sdk_step(merchant, "java-authorization-flow-start-consent-form", payment=payment_id)
    step = _flow_step(merchant, f"{flow}/actions/provider-selection", {"provider_id": DE_EMBEDDED})
    assert step == {"type": "consent", "subsequent_action_hint": "form"}
    step = _sdk_step(merchant, "java-authorization-flow-consent", payment=payment_id)
    assert _form_ids(step) == ["remitter-name", "remitter-iban", "psu-id", "psu-password"]
    bad = merchant.signed_post(f"{flow}/actions/form", {"inputs": {"remitter-name": "A"}})
    assert_invalid(bad, "inputs.remitter-iban", "inputs.psu-id", "inputs.psu-password")
    step = _sdk_step(merchant, "java-authorization-flow-form", payment=payment_id)
    assert _form_ids(step) == ["embedded-auth-flow-sca-select"]
    assert [o["id"] for o in step["inputs"][0]["options"]] == ["Sms"]
    step = _flow_step(
        merchant, f"{flow}/actions/form", {"inputs": {"embedded-auth-flow-sca-select": "Sms"}}
    )
    assert _form_ids(step) == ["embedded-auth-flow-sms-input"]
    assert step["inputs"][0]["type"] == "text_with_image"
    answer = merchant.signed_post(
        f"{flow}/actions/form", {"inputs": {"embedded-auth-flow-sms-input": "test_executed"}}
    )
    assert answer.status_code == 200, answer.text
    assert next_action(answer.json()) == {"type": "wait"}
    settled = wait_record_status(merchant, f"{PAYMENTS}/{payment_id}", SETTLED)
    assert settled["status"] == "payment_settled", settled


def test_the_sms_code_picks_the_outcome(merchant: MerchantClient) -> None:
    payment_id = _payment(merchant, "EUR", provider_id=DE_EMBEDDED)
    flow = f"{PAYMENTS}/{payment_id}/authorization-flow"
    step = _sdk_step(merchant, "java-authorization-flow-start", payment=payment_id)
    assert step["type"] == "form"  # no consent declared: the first form at once
    _sdk_step(merchant, "java-authorization-flow-form", payment=payment_id)
    _flow_step(
        merchant, f"{flow}/actions/form", {"inputs": {"embedded-auth-flow-sca-select": "Sms"}}
    )
    merchant.signed_post(
        f"{flow}/actions/form",
        {"inputs": {"embedded-auth-flow-sms-input": "test_authorisation_failed"}},
    )
    failed = wait_record_status(merchant, f"{PAYMENTS}/{payment_id}", {"payment_failed"})
    assert failed["failure_reason"] == "authorization_failed"


def test_redirect_provider_with_additional_inputs_asks_a_form_then_redirects(
    merchant: MerchantClient,
) -> None:
    payment_id = _payment(merchant, "EUR")
    flow = f"{PAYMENTS}/{payment_id}/authorization-flow"
    step = _sdk_step(merchant, "rust-authorization-flow-start-form", payment=payment_id)
    assert DE_INPUTS in {p["id"] for p in step["providers"]}
    step = _flow_step(merchant, f"{flow}/actions/provider-selection", {"provider_id": DE_INPUTS})
    assert step == {"type": "consent", "subsequent_action_hint": "form"}
    step = _flow_step(merchant, f"{flow}/actions/consent", {})
    assert _form_ids(step) == ["psu-branch-code", "psu-account-number", "psu-sub-account"]
    wrong = {"psu-branch-code": "12", "psu-account-number": "1234567", "psu-sub-account": "01"}
    assert_invalid(merchant.signed_post(f"{flow}/actions/form", {"inputs": wrong}), "inputs")
    inputs = {**wrong, "psu-branch-code": "123"}
    step = _flow_step(merchant, f"{flow}/actions/form", {"inputs": inputs})
    token = _login_token(step["uri"], payment_id)
    _headless(merchant.http, "java-mock-bank-action", payment_id, token)
    settled = wait_record_status(merchant, f"{PAYMENTS}/{payment_id}", SETTLED)
    assert settled["status"] == "payment_settled", settled


def test_a_form_before_the_consent_or_for_a_plain_redirect_is_409(
    merchant: MerchantClient,
) -> None:
    payment_id = _payment(merchant, provider_id=GB_REDIRECT)
    _sdk_step(merchant, "java-authorization-flow-start-consent", payment=payment_id)
    _, body = sdk_request("rust-authorization-flow-form")
    form = f"{PAYMENTS}/{payment_id}/authorization-flow/actions/form"
    assert_problem(merchant.signed_post(form, body), 409)
    _sdk_step(merchant, "java-authorization-flow-consent", payment=payment_id)
    assert_problem(merchant.signed_post(form, body), 409)


# --- mandates: consent, the consent page's uri, headless consent, provider return ----------


@pytest.mark.parametrize(
    "action", ["java-mock-bank-action-consent", "dotnet-mock-bank-action-consent"]
)
def test_mandate_with_consent_through_the_headless_mock_bank(
    merchant: MerchantClient, action: str
) -> None:
    mandate_id = str(create_mandate(merchant, mandate_body(merchant, provider_id=None))["id"])
    step = _sdk_step(
        merchant, "dotnet-authorization-flow-start-consent-mandate", mandate=mandate_id
    )
    assert step["type"] == "provider_selection"
    step = _sdk_step(
        merchant, "java-authorization-flow-provider-selection-mandate", mandate=mandate_id
    )
    assert step == {"type": "consent", "subsequent_action_hint": "redirect"}
    # .NET's consent: signed, no body, no Content-Type.
    path = f"{MANDATES}/{mandate_id}/authorization-flow/actions/consent"
    answer = merchant.signed_post(path, None, raw=b"")
    assert answer.status_code == 200, answer.text
    step = next_action(answer.json())
    token = _login_token(step["uri"], mandate_id)

    url = _headless(merchant.http, action, mandate_id, token)
    query = urlsplit(url).query
    assert query, url
    assert "mandate-" not in query, url
    assert parse_qs(query)["mandate_id"] == [mandate_id]
    for sent in (query, query.replace("mandate-", "", 1), query.replace("mandate-", "")):
        answer = _provider_return(merchant, sent, None)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"resource": {"type": "mandate", "mandate_id": mandate_id}}
    authorised = wait_record_status(merchant, f"{MANDATES}/{mandate_id}", {"authorized"})
    assert authorised["status"] == "authorized"


def test_mandate_cancel_and_reject_at_the_bank(merchant: MerchantClient) -> None:
    for action, reason in (
        ("Cancel", "not_authorized"),
        ("RejectAuthorisation", "authorization_failed"),
    ):
        mandate_id = str(create_mandate(merchant, mandate_body(merchant))["id"])
        step = _sdk_step(merchant, "java-authorization-flow-start-mandate", mandate=mandate_id)
        token = _login_token(step["uri"], mandate_id)
        answer = merchant.http.post(
            f"/mock-bank/api/vrp-consents/{mandate_id}/action",
            json={"action": action, "redirect": False},
            headers=bearer(token),
        )
        assert answer.status_code == 202, answer.text
        failed = wait_record_status(merchant, f"{MANDATES}/{mandate_id}", {"failed"})
        assert failed["failure_reason"] == reason


# --- C1, C2, PS1: the catalogue and its search as the SDKs read them -------------------------


def test_java_search_signed_with_capabilities_and_the_new_providers(
    merchant: MerchantClient,
) -> None:
    path, body = sdk_request("java-provider-search")
    answer = merchant.signed_post(path, body)  # Java signs it, with an Idempotency-Key
    assert answer.status_code == 200, answer.text
    assert GB_REDIRECT in {p["id"] for p in answer.json()["items"]}
    for name in sdk_names("dotnet-provider-search-*"):
        path, body = sdk_request(name)
        found = merchant.http.post(path, json=body, headers=bearer(merchant.token()))
        assert found.status_code == 200, found.text
        for item in found.json()["items"]:
            assert item["display_name"]
            assert item["country_code"]
            if "mandates" in item["capabilities"]:
                assert item["capabilities"]["mandates"]["vrp_sweeping"]["release_channel"]
    gb = merchant.get(f"/v3/payments-providers/{GB_REDIRECT}").json()
    assert gb["display_name"] == "Mock UK Payments - Redirect Flow"
    assert gb["capabilities"]["payments"]["bank_transfer"] == {
        "release_channel": "general_availability",
        "schemes": [{"id": "faster_payments_service"}],
    }
    uki = merchant.get("/v3/payments-providers/ob-uki-mock-bank-sbox").json()
    assert uki["country_code"] == "GB"
    assert uki["capabilities"]["mandates"]["vrp_sweeping"]["release_channel"]
    schemes = merchant.get(f"/v3/payments-providers/{DE_INPUTS}").json()["capabilities"]
    assert {"id": "sepa_credit_transfer"} in schemes["payments"]["bank_transfer"]["schemes"]
    for provider_id in ("mock-payments-pl-redirect", "mock-payments-no-redirect", "mock"):
        assert merchant.get(f"/v3/payments-providers/{provider_id}").status_code == 200


def test_another_merchants_payment_is_404_to_every_action_sent_beside_the_owners(
    operator: Operator, merchant: MerchantClient
) -> None:
    # The payments of the actions committed together are read and locked in one statement:
    # the merchant's scope is still each action's own.
    intruder = merchant_with_webhooks(operator)
    payment_id = _payment(merchant)
    base = f"{PAYMENTS}/{payment_id}"
    start = (f"{base}/authorization-flow", {"redirect": {"return_uri": "https://example.com/b"}})
    actions = [
        start,
        (f"{base}/authorization-flow/actions/provider-selection", {"provider_id": GB_REDIRECT}),
        (f"{base}/authorization-flow/actions/consent", {}),
        (f"{base}/actions/cancel", {}),
    ]
    with ThreadPoolExecutor(max_workers=len(actions) + 1) as sent:
        owners = sent.submit(merchant.signed_post, *start)
        refused = [sent.submit(intruder.signed_post, path, body) for path, body in actions]
        assert owners.result().status_code == 200, owners.result().text
        for answer in refused:
            assert_problem(answer.result(), 404)
    assert next_action(owners.result().json())["type"] == "provider_selection"
    # None of the intruder's actions took: the payer still chooses the bank, and can.
    assert merchant.get(base).json()["status"] == "authorizing"
    chosen = _flow_step(merchant, actions[1][0], actions[1][1])
    assert chosen["type"] == "redirect", chosen
