"""`BankrailAuth`: an `httpx.Auth` that gets access tokens and signs requests as Bankrail
requires. Usable outside tests, with `httpx.Client` or `httpx.AsyncClient`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Generator

import httpx

from bankrail.testing._jws import sign

__all__ = ["BankrailAuth"]

# Renew a token this long before the server says it expires.
_TOKEN_MARGIN_SECONDS = 60.0


def _is_merchant_api(path: str) -> bool:
    """Whether `path` belongs to the payouts v1 or payments v3 API (which take the token)."""
    return path.startswith(("/v1/", "/v3/")) or path == "/payments" or path.startswith("/payments/")


class BankrailAuth(httpx.Auth):
    """Authenticates a merchant's requests to Bankrail.

    - Every request to `/v1/...`, `/v3/...` or `/payments...` without an `Authorization`
      header gets `Bearer <token>`; the token comes from `POST /connect/token`
      (client credentials), is kept, renewed before it expires, and fetched again once if the
      server answers 401 (the sandbox clock may have moved past its expiry).
    - Every call to those APIs but a GET (POST and DELETE alike) is signed (ES512 detached
      JWS, `tl_version` 2): `X-SVC-Signature` on `/v1`, `Svc-Signature` elsewhere, unless the
      request already carries one. A v3 call without an `Idempotency-Key` gets a new one (a
      UUID); the key, when present, is among the signed headers (`tl_headers`).

    Requests elsewhere (`/mock-bank`, `/admin`, `/sandbox`) are sent untouched.
    """

    requires_request_body = True
    requires_response_body = True

    def __init__(
        self,
        client_id: str,
        client_secret: str,
        kid: str,
        private_key_pem: str,
        *,
        scope: str | None = None,
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.kid = kid
        self.private_key_pem = private_key_pem
        self.scope = scope
        self._token: str | None = None
        self._token_valid_until = 0.0

    def signature(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes) -> str:
        """The signature of a request: over `METHOD path`, `headers` (in order) and `body`."""
        return sign(
            self.private_key_pem, self.kid, method=method, path=path, headers=headers, body=body
        )

    def _token_request(self, request: httpx.Request) -> httpx.Request:
        form = {
            "grant_type": "client_credentials",
            "client_id": self.client_id,
            "client_secret": self.client_secret,
        }
        if self.scope is not None:
            form["scope"] = self.scope
        url = request.url.copy_with(path="/connect/token", query=None, fragment=None)
        return httpx.Request("POST", url, data=form)

    def _keep_token(self, response: httpx.Response) -> None:
        if response.status_code != 200:
            raise httpx.HTTPStatusError(
                f"POST /connect/token answered {response.status_code}: {response.text}",
                request=response.request,
                response=response,
            )
        body = response.json()
        self._token = str(body["access_token"])
        lifetime = float(body.get("expires_in", 3600))
        self._token_valid_until = time.monotonic() + max(lifetime - _TOKEN_MARGIN_SECONDS, 0.0)

    def _sign(self, request: httpx.Request) -> None:
        path = request.url.path
        v1 = path.startswith("/v1/")
        if not v1 and "idempotency-key" not in request.headers:
            request.headers["Idempotency-Key"] = str(uuid.uuid4())
        header = "X-SVC-Signature" if v1 else "Svc-Signature"
        if "svc-signature" in request.headers or "x-svc-signature" in request.headers:
            return
        covered = (
            [("Idempotency-Key", request.headers["idempotency-key"])]
            if "idempotency-key" in request.headers
            else []
        )
        request.headers[header] = self.signature(request.method, path, covered, request.content)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """httpx's hook: token first when needed, then the signed request."""
        if not _is_merchant_api(request.url.path):
            yield request
            return
        ours = "authorization" not in request.headers
        if ours:
            if self._token is None or time.monotonic() >= self._token_valid_until:
                self._keep_token((yield self._token_request(request)))
            request.headers["Authorization"] = f"Bearer {self._token}"
        if request.method not in ("GET", "HEAD"):
            self._sign(request)
        response = yield request
        if ours and response.status_code == 401:
            self._keep_token((yield self._token_request(request)))
            request.headers["Authorization"] = f"Bearer {self._token}"
            yield request
