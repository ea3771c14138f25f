"""A merchant's view of a running Bankrail: tokens and requests signed with the public
`truelayer-signing` library, exactly as a merchant integration would send them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import truelayer_signing
from truelayer_signing import HttpMethod

from bankrail.security import signing

if TYPE_CHECKING:
    from support.server import RunningServer


class Operator:
    """Calls the operator and sandbox API with the admin token."""

    def __init__(self, base_url: str, admin_token: str) -> None:
        self.http = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=30
        )
        self._merchants: list[MerchantClient] = []

    def close(self) -> None:
        """Close this client and those of the merchants it made."""
        for merchant in self._merchants:
            merchant.http.close()
        self.http.close()

    def post(self, path: str, body: Any, **headers: str) -> httpx.Response:
        """POST JSON as the operator."""
        return self.http.post(path, json=body, headers=headers)

    def put(self, path: str, body: Any) -> httpx.Response:
        """PUT JSON as the operator."""
        return self.http.put(path, json=body)

    def get(self, path: str, **params: Any) -> httpx.Response:
        """GET as the operator."""
        return self.http.get(path, params=params)

    def new_merchant(
        self,
        name: str = "Test Merchant",
        currencies: tuple[str, ...] = ("GBP", "EUR"),
        scopes: list[str] | None = None,
    ) -> MerchantClient:
        """A merchant with client credentials, a registered key, and accounts."""
        merchant = self.post("/admin/merchants", {"name": name}).json()
        body = {} if scopes is None else {"scopes": scopes}
        client = self.post(f"/admin/merchants/{merchant['id']}/clients", body).json()
        key = signing.generate_private_key()
        kid = self.post(
            f"/admin/merchants/{merchant['id']}/signing-keys",
            {"public_key_pem": signing.public_key_pem(key.public_key())},
        ).json()["kid"]
        accounts = {
            c: self.post(
                f"/admin/merchants/{merchant['id']}/merchant-accounts", {"currency": c}
            ).json()
            for c in currencies
        }
        made = MerchantClient(
            base_url=str(self.http.base_url),
            merchant_id=merchant["id"],
            client_id=client["client_id"],
            client_secret=client["client_secret"],
            kid=kid,
            private_key_pem=signing.private_key_pem(key),
            accounts=accounts,
        )
        self._merchants.append(made)
        return made

    def top_up(self, account: dict[str, Any], amount: int, **extra: Any) -> httpx.Response:
        """Send an incoming bank transfer to the account's IBAN."""
        iban = next(i["iban"] for i in account["account_identifiers"] if i["type"] == "iban")
        body = {
            "iban": iban,
            "amount_in_minor": amount,
            "currency": account["currency"],
            "remitter_name": "Top Up Ltd",
            "reference": "top-up",
            **extra,
        }
        return self.post("/sandbox/bank-transfers", body)


@contextmanager
def operator_of(server: RunningServer) -> Iterator[Operator]:
    """The operator API of a running server (its admin token), closed afterwards with the
    merchants it made."""
    client = Operator(server.base_url, server.admin_token)
    try:
        yield client
    finally:
        client.close()


@dataclass
class MerchantClient:
    """One merchant's credentials and accounts, and signed calls on its behalf."""

    base_url: str
    merchant_id: str
    client_id: str
    client_secret: str
    kid: str
    private_key_pem: str
    accounts: dict[str, dict[str, Any]]

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.base_url, timeout=30)
        self._token: str | None = None

    def token(self, scope: str | None = None) -> str:
        """An access token from /connect/token (cached for the default scope)."""
        if scope is None and self._token:
            return self._token
        form = {
            "grant_type": "client_credentials",
            "client_id": self.client_id,
            "client_secret": self.client_secret,
        }
        if scope is not None:
            form["scope"] = scope
        answer = self.http.post("/connect/token", data=form)
        answer.raise_for_status()
        token = str(answer.json()["access_token"])
        if scope is None:
            self._token = token
        return token

    def forget_token(self) -> None:
        """Fetch a new token next time (the cached one expired, say, as the clock moved)."""
        self._token = None

    def get(self, path: str, **params: Any) -> httpx.Response:
        """An authenticated GET."""
        return self.http.get(
            path, params=params, headers={"Authorization": f"Bearer {self.token()}"}
        )

    def sign(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> str:
        """A Svc-Signature made with the public truelayer-signing library."""
        signer = truelayer_signing.sign_with_pem(self.kid, self.private_key_pem)
        signer = signer.set_method(HttpMethod(method)).set_path(path).set_body(body.decode())
        for name, value in headers.items():
            signer = signer.add_header(name, value)
        return signer.sign()

    def signed_post(
        self,
        path: str,
        body: Any,
        *,
        idempotency_key: str | None = "new",
        signature_header: str = "Svc-Signature",
        token: str | None = None,
        raw: bytes | None = None,
    ) -> httpx.Response:
        """POST JSON signed over the Idempotency-Key header (a fresh key by default)."""
        content = raw if raw is not None else json.dumps(body).encode()
        signed: dict[str, str] = {}
        if idempotency_key is not None:
            signed["Idempotency-Key"] = (
                str(uuid.uuid4()) if idempotency_key == "new" else idempotency_key
            )
        headers = {
            "Authorization": f"Bearer {token or self.token()}",
            "Content-Type": "application/json",
            signature_header: self.sign("POST", path, content, signed),
            **signed,
        }
        return self.http.post(path, content=content, headers=headers)
