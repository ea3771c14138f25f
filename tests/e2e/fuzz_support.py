"""Real credentials for the Schemathesis fuzz test: who may call each route, the objects its
path parameters name, a valid request per route, and a `requests` auth that signs the exact
bytes Schemathesis sends."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import jsonschema_rs
import requests
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from e2e_helpers import wait_for
from mandate_helpers import (
    authorised_mandate,
    create_mandate,
    mandate_body,
    redirected_mandate,
)
from pay_in_helpers import EMBEDDED_FIRST_FORM, bank_token, next_action, payment_body

from bankrail.security import signing
from support.api import MerchantClient, Operator
from support.receiver import WebhookReceiver

GB_REDIRECT = "mock-payments-gb-redirect"
DE_EMBEDDED = "mock-payments-de-embedded"
RETURN_URI = "https://merchant.example/return"
JSON = "application/json"


class Caller(StrEnum):
    """The credentials a route is called with."""

    PUBLIC = "public"  # no credentials
    MERCHANT = "merchant"  # Bearer access token
    SIGNED = "signed"  # access token, Svc-Signature (tl_version 2) over a fresh Idempotency-Key
    SIGNED_V1 = "signed_v1"  # access token, X-SVC-Signature (tl_version 2, no Idempotency-Key)
    BODY_ONLY = "body_only"  # access token, X-SVC-Signature as a detached JWS over the body alone
    RESOURCE = "resource_token"  # the payment's resource token, unsigned
    OPERATOR = "operator"  # the admin token
    BANK = "bank_token"  # the mock bank token of the payment's redirect uri


class Stage(StrEnum):
    """The state a fresh payment is brought to before a payment action is fuzzed on it."""

    CREATED = "created"  # authorization_required
    PICKING = "picking"  # authorizing, waiting for the payer's provider selection
    FORM = "form"  # authorizing at the embedded provider, waiting for its form
    REDIRECT = "redirect"  # authorizing at a redirect provider, at the mock bank
    CONSENT = "consent"  # authorizing at a redirect provider, waiting for the payer's consent
    SETTLED = "settled"  # payment_settled: refundable
    # The states a fresh mandate is brought to before a mandate action is fuzzed on it.
    MANDATE_CREATED = "mandate_created"  # authorization_required
    MANDATE_PICKING = "mandate_picking"  # authorizing, waiting for the payer's provider
    MANDATE_REDIRECT = "mandate_redirect"  # authorizing, at the mock bank's consent page
    MANDATE_AUTHORIZED = "mandate_authorized"  # authorized
    MANDATE_CONSENT = "mandate_consent"  # authorizing, waiting for the payer's consent


@dataclass(frozen=True)
class FreshPayment:
    """A payment made for one generated case."""

    id: str
    resource_token: str
    bank_token: str | None = None
    param: str = "payment_id"  # the path parameter that names it


def _private_key(merchant: MerchantClient) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(merchant.private_key_pem.encode(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def body_only_signature(merchant: MerchantClient, body: bytes) -> str:
    """The standard detached JWS (no `tl_version`) over the body alone, as v1 clients send it."""
    header = signing.b64url_encode(f'{{"alg":"ES512","kid":"{merchant.kid}"}}'.encode())
    der = _private_key(merchant).sign(
        header + b"." + signing.b64url_encode(body), ec.ECDSA(hashes.SHA512())
    )
    r, s = decode_dss_signature(der)
    raw = r.to_bytes(66, "big") + s.to_bytes(66, "big")
    return str((header + b".." + signing.b64url_encode(raw)).decode())


def tl_signature(
    merchant: MerchantClient, method: str, path: str, body: bytes, headers: dict[str, str]
) -> str:
    """A tl_version 2 signature made with the public library, which takes the body as text; for
    a body that is not UTF-8 (negative fuzzing sends such bytes), the service's own signer."""
    try:
        body.decode()
    except UnicodeDecodeError:
        return str(
            signing.sign_request(
                _private_key(merchant),
                merchant.kid,
                method=method,
                path=path,
                headers=list(headers.items()),
                body=body,
            )
        )
    return str(merchant.sign(method, path, body, headers))


@dataclass
class CallerAuth(requests.auth.AuthBase):
    """Adds the caller's credentials to the prepared request, after `requests` has encoded the
    body, so a signature covers exactly the bytes and Idempotency-Key that go on the wire."""

    caller: Caller
    token: str | None
    merchant: MerchantClient | None = None
    fresh_key: bool = False  # set Idempotency-Key to a new UUID
    # Lower-cased credential headers a negative case is about: sent as generated (or left out).
    withheld: frozenset[str] = frozenset()

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        if self.token is not None and "authorization" not in self.withheld:
            request.headers["Authorization"] = f"Bearer {self.token}"
        if self.withheld & {"svc-signature", "x-svc-signature"}:
            return request
        if self.fresh_key:
            request.headers["Idempotency-Key"] = str(uuid.uuid4())
        body = request.body or b""
        raw = body.encode() if isinstance(body, str) else body
        assert isinstance(raw, bytes), type(body)
        if self.caller in (Caller.SIGNED, Caller.SIGNED_V1):
            assert self.merchant is not None
            key = request.headers.get("Idempotency-Key")
            if isinstance(key, bytes):
                key = key.decode("latin-1")
            signed = {} if key is None else {"Idempotency-Key": key}
            path = (request.path_url or "/").split("?", 1)[0]
            name = "Svc-Signature" if self.caller is Caller.SIGNED else "X-SVC-Signature"
            method = str(request.method)
            request.headers[name] = tl_signature(self.merchant, method, path, raw, signed)
        elif self.caller is Caller.BODY_ONLY:
            assert self.merchant is not None
            request.headers["X-SVC-Signature"] = body_only_signature(self.merchant, raw)
        return request


def _v3_payout(account_id: str) -> dict[str, Any]:
    return {
        "merchant_account_id": account_id,
        "amount_in_minor": 100,
        "currency": "GBP",
        "beneficiary": {
            "type": "external_account",
            "reference": "fuzz",
            "account_holder_name": "Jane Doe",
            "account_identifier": {"type": "iban", "iban": "GB29NWBK60161331926819"},
        },
    }


@dataclass
class World:
    """A merchant with money, a payout, a payment and a webhook delivery on a server, and the
    operator's token: what the fuzzed routes act on."""

    operator: Operator
    admin_token: str
    merchant: MerchantClient
    path_values: dict[str, str]

    @classmethod
    def build(cls, base_url: str, admin_token: str, receiver: WebhookReceiver) -> World:
        """Make the merchant and its objects through the operator and merchant APIs."""
        operator = Operator(base_url, admin_token)
        merchant = operator.new_merchant(name="Fuzz Merchant")
        hooks = {"payments_uri": f"{receiver.url}/in", "payouts_uri": f"{receiver.url}/out"}
        answer = operator.put(f"/admin/merchants/{merchant.merchant_id}/webhooks", hooks)
        assert answer.status_code == 200, answer.text
        for account in merchant.accounts.values():
            answer = operator.top_up(account, 10_000_000)
            assert answer.status_code == 201, answer.text
        gbp = merchant.accounts["GBP"]["id"]
        payout = merchant.signed_post("/v3/payouts", _v3_payout(gbp))
        assert payout.status_code == 202, payout.text
        # Sweeping settings for the sweeping GET to read (nothing to sweep below 10^15).
        sweeping = {"max_amount_in_minor": 10**15, "frequency": "fortnightly"}
        answer = merchant.signed_post(f"/v3/merchant-accounts/{gbp}/sweeping", sweeping)
        assert answer.status_code == 200, answer.text
        deliveries = wait_for(
            lambda: operator.get(
                "/admin/webhook-deliveries", merchant_id=merchant.merchant_id
            ).json()["items"],
            what="a webhook delivery for the fuzz merchant",
        )
        # The operator's merchant routes act on a merchant of their own: fuzzed webhook URIs
        # must not receive (and slow the shared delivery worker with) this merchant's events.
        bystander = operator.post("/admin/merchants", {"name": "Fuzz Operator Target"})
        assert bystander.status_code == 201, bystander.text
        target_id = bystander.json()["id"]
        # Something for the revocations to revoke (once; then they answer 404).
        revocable_key = operator.post(
            f"/admin/merchants/{target_id}/signing-keys",
            {"public_key_pem": signing.public_key_pem(signing.generate_private_key().public_key())},
        )
        assert revocable_key.status_code == 201, revocable_key.text
        revocable_client = operator.post(f"/admin/merchants/{target_id}/clients", {})
        assert revocable_client.status_code == 201, revocable_client.text
        world = cls(operator, admin_token, merchant, {})
        # A settled payment with a refund: the payment and refund routes read these.
        refunded = world.fresh_payment(Stage.SETTLED)
        refund = merchant.signed_post(
            f"/v3/payments/{refunded.id}/refunds", {"amount_in_minor": 100, "reference": "fuzz"}
        )
        assert refund.status_code == 201, refund.text
        world.path_values = {
            "mandate_id": authorised_mandate(merchant)[0],
            "merchant_id": target_id,
            "kid": revocable_key.json()["kid"],
            "client_id": revocable_client.json()["client_id"],
            "merchant_account_id": gbp,
            "payout_id": payout.json()["id"],
            "payment_id": refunded.id,
            "delivery_id": deliveries[0]["id"],
            "provider_id": GB_REDIRECT,
            "refund_id": refund.json()["id"],
        }
        return world

    def close(self) -> None:
        """Close the HTTP clients."""
        self.operator.close()

    def fresh_mandate(self, stage: Stage) -> FreshPayment:
        """A new mandate brought to `stage` through the merchant's own (signed) calls."""
        merchant = self.merchant
        if stage is Stage.MANDATE_REDIRECT:
            mandate_id, token = redirected_mandate(merchant)
            return FreshPayment(mandate_id, "", token, param="mandate_id")
        if stage is Stage.MANDATE_AUTHORIZED:
            mandate_id, token = authorised_mandate(merchant)
            return FreshPayment(mandate_id, "", token, param="mandate_id")
        if stage is Stage.MANDATE_CONSENT:
            mandate_id = str(create_mandate(merchant)["id"])
            flow = merchant.signed_post(
                f"/v3/mandates/{mandate_id}/authorization-flow", {"consent": {}}
            )
            assert next_action(flow.json())["type"] == "consent", flow.text
            return FreshPayment(mandate_id, "", param="mandate_id")
        body = mandate_body(merchant, provider_id=None)
        created = create_mandate(merchant, body)
        mandate = FreshPayment(created["id"], created["resource_token"], param="mandate_id")
        if stage is Stage.MANDATE_PICKING:
            flow = merchant.signed_post(f"/v3/mandates/{mandate.id}/authorization-flow", {})
            assert next_action(flow.json())["type"] == "provider_selection", flow.text
        return mandate

    def fresh_payment(self, stage: Stage) -> FreshPayment:
        """A new payment (or mandate) brought to `stage` through the merchant's own (signed)
        calls."""
        if stage.value.startswith("mandate_"):
            return self.fresh_mandate(stage)
        currency, provider = {
            Stage.CREATED: ("GBP", None),
            Stage.PICKING: ("GBP", None),
            Stage.FORM: ("EUR", DE_EMBEDDED),
            Stage.REDIRECT: ("GBP", GB_REDIRECT),
            Stage.CONSENT: ("GBP", GB_REDIRECT),
            Stage.SETTLED: ("GBP", GB_REDIRECT),
        }[stage]
        created = self.merchant.signed_post(
            "/v3/payments", payment_body(self.merchant, currency, provider_id=provider)
        )
        assert created.status_code == 201, created.text
        payment = FreshPayment(created.json()["id"], created.json()["resource_token"])
        if stage is Stage.CREATED:
            return payment
        flow = self.merchant.signed_post(
            f"/v3/payments/{payment.id}/authorization-flow",
            {
                "provider_selection": {},
                "redirect": {"return_uri": RETURN_URI},
                **({"consent": {}} if stage is Stage.CONSENT else {}),
            },
        )
        assert flow.status_code == 200, flow.text
        action = next_action(flow.json())
        expected = {
            Stage.PICKING: "provider_selection",
            Stage.FORM: "form",
            Stage.CONSENT: "consent",
        }.get(stage, "redirect")
        if stage is Stage.CONSENT:
            assert action["type"] == expected, action
            return payment
        assert action["type"] == expected, action
        if stage is Stage.REDIRECT:
            return FreshPayment(payment.id, payment.resource_token, bank_token(action["uri"]))
        if stage is Stage.SETTLED:
            executed = self.merchant.http.post(
                f"/mock-bank/api/single-immediate-payments/{payment.id}/action",
                json={"action": "Execute"},
                headers={"Authorization": f"Bearer {bank_token(action['uri'])}"},
            )
            assert executed.status_code == 202, executed.text
            wait_for(
                lambda: (
                    self.merchant.get(f"/v3/payments/{payment.id}").json()["status"]
                    == "payment_settled"
                ),
                what=f"payment {payment.id} to settle",
            )
        return payment

    def auth(
        self,
        caller: Caller,
        payment: FreshPayment | None,
        *,
        fresh_key: bool,
        withheld: frozenset[str] = frozenset(),
    ) -> CallerAuth:
        """The credentials `caller` sends (for a payment route, those of `payment`)."""
        if caller is Caller.PUBLIC:
            return CallerAuth(caller, None)
        if caller is Caller.OPERATOR:
            return CallerAuth(caller, self.admin_token, withheld=withheld)
        if caller is Caller.RESOURCE:
            assert payment is not None
            return CallerAuth(caller, payment.resource_token, withheld=withheld)
        if caller is Caller.BANK:
            assert payment is not None
            return CallerAuth(caller, payment.bank_token, withheld=withheld)
        return CallerAuth(
            caller, self.merchant.token(), self.merchant, fresh_key=fresh_key, withheld=withheld
        )

    def valid_request(self, path: str, payment: FreshPayment | None) -> dict[str, Any] | None:
        """A request the route accepts (arguments of `APIOperation.Case`), for the routes whose
        random valid-by-schema input rarely passes the business rules; None for the others."""
        merchant = self.merchant
        gbp = merchant.accounts["GBP"]
        iban = next(i["iban"] for i in gbp["account_identifiers"] if i["type"] == "iban")
        bodies: dict[str, Any] = {
            "/v3/payouts": _v3_payout(gbp["id"]),
            "/v1/payouts": {
                "transaction_id": str(uuid.uuid4()),
                "beneficiary_name": "Jane Doe",
                "beneficiary_iban": "DE89370400440532013000",
                "beneficiary_reference": "fuzz",
                "currency": "EUR",
                "amount_in_minor": 100,
                "context_code": "withdrawal",
            },
            "/v3/payments": payment_body(merchant, user={"name": "Fuzz Payer"}),
            "/payments": payment_body(merchant, metadata={"order": "fuzz-1"}),
            "/v1/users/deposits": {
                "user_id": "fuzz-user",
                "deposit": {
                    "deposit_id": str(uuid.uuid4()),
                    "amount_in_minor": 100,
                    "currency": "GBP",
                },
                "auth_flow": {"type": "redirect", "return_uri": RETURN_URI},
            },
            "/sandbox/bank-transfers": {
                "iban": iban,
                "amount_in_minor": 100,
                "currency": "GBP",
                "remitter_name": "Fuzz Payer",
                "reference": "fuzz",
            },
            "/admin/merchants/{merchant_id}/return-uris": {"uris": [RETURN_URI]},
            "/v3/payments/{payment_id}/refunds": {"amount_in_minor": 100, "reference": "fuzz"},
            "/admin/merchants/{merchant_id}/signing-keys": {
                "public_key_pem": signing.public_key_pem(
                    signing.generate_private_key().public_key()
                )
            },
        }
        paid = payment.id if payment else self.path_values["payment_id"]
        bodies["/v3/payments-provider-return"] = {"query": f"payment_id={paid}"}
        bodies["/payments-provider-return"] = {"fragment": f"payment_id={paid}"}
        actions = "/v3/payments/{payment_id}/authorization-flow/actions"
        bodies[f"{actions}/provider-selection"] = {"provider_id": GB_REDIRECT}
        bodies[f"{actions}/form"] = EMBEDDED_FIRST_FORM
        bodies["/mock-bank/api/single-immediate-payments/{payment_id}/action"] = {
            "action": "Execute"
        }
        mandates = "/v3/mandates/{mandate_id}"
        bodies["/v3/mandates"] = mandate_body(merchant)
        bodies[f"{mandates}/authorization-flow"] = {
            "provider_selection": {},
            "redirect": {"return_uri": RETURN_URI},
        }
        bodies[f"{mandates}/authorization-flow/actions/provider-selection"] = {
            "provider_id": GB_REDIRECT
        }
        bodies["/mock-bank/api/vrp-consents/{mandate_id}/action"] = {"action": "Authorise"}
        if path == f"{mandates}/funds":
            return {"query": {"amount_in_minor": 1, "currency": "GBP"}}
        if path == "/connect/token":
            form = {
                "grant_type": "client_credentials",
                "client_id": merchant.client_id,
                "client_secret": merchant.client_secret,
            }
            return {"body": form, "media_type": "application/x-www-form-urlencoded"}
        path = path.replace(
            "/submit-provider-selection", "/authorization-flow/actions/provider-selection"
        )
        if path.startswith("/payments/"):
            path = "/v3" + path  # the unversioned aliases
        if path not in bodies:
            return None
        return {"body": bodies[path], "media_type": JSON}


def _closed(node: Any) -> Any:
    """A copy of a JSON Schema in which every object that lists its properties, and does not
    say otherwise, allows no others."""
    if isinstance(node, list):
        return [_closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: {name: _closed(sub) for name, sub in value.items()}
        if key == "properties" and isinstance(value, dict)
        else _closed(value)
        for key, value in node.items()
    }
    if isinstance(node.get("properties"), dict) and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


def body_is_documented(case: Any) -> bool:
    """Whether the case's JSON body is valid by the schema of its operation's request body."""
    spec = case.operation.schema.raw_schema
    content = case.operation.definition.raw.get("requestBody", {}).get("content", {})
    schema = content.get(JSON, {}).get("schema")
    if schema is None:
        return False
    return bool(
        jsonschema_rs.validator_for({**schema, "components": spec.get("components", {})}).is_valid(
            case.body
        )
    )


_VALIDATORS: dict[tuple[int, str, str, str, str], tuple[Any, Any]] = {}


def undocumented_fields(_ctx: Any, response: Any, case: Any) -> bool | None:
    """A Schemathesis check: a JSON response carries no field its schema does not name (unless
    the schema allows more), so nothing undocumented, like an internal column or a secret,
    leaks (OWASP API3). Type and required-field errors are left to the schema check."""
    content_type = (response.headers.get("content-type") or [""])[0].split(";")[0].strip()
    spec = case.operation.schema.raw_schema
    method = str(case.method).lower()
    key = (id(spec), case.operation.path, method, str(response.status_code), content_type)
    if key not in _VALIDATORS:
        responses = spec["paths"][case.operation.path][method]["responses"]
        documented = responses.get(str(response.status_code), {}).get("content", {})
        schema = documented.get(content_type, {}).get("schema")
        if schema is None or not content_type.endswith("json"):
            _VALIDATORS[key] = (None, None)
        else:
            components = spec.get("components", {})
            _VALIDATORS[key] = (
                jsonschema_rs.validator_for({**schema, "components": components}),
                jsonschema_rs.validator_for({**_closed(schema), "components": _closed(components)}),
            )
    as_documented, closed = _VALIDATORS[key]
    if as_documented is None:
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    if as_documented.is_valid(body) and not closed.is_valid(body):
        extra = "; ".join(
            f"{'/'.join(map(str, error.instance_path)) or '(root)'}: {error.message}"
            for error in closed.iter_errors(body)
        )
        raise AssertionError(f"Undocumented response field(s): {extra}")
    return None
