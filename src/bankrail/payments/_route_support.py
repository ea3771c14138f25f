"""What the payment route modules share: who acts on a payment (`PAYMENT_CALLER`: the
merchant's access token or the payer's resource token), and the answer of an
authorisation-flow step."""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi.exceptions import RequestValidationError
from starlette.requests import Request

from bankrail.core.problems import Unauthenticated
from bankrail.http.auth import access_claims, bearer_token, require_payments_audience
from bankrail.http.context import AppContext
from bankrail.http.openapi import Needs
from bankrail.http.pipeline import Authenticator
from bankrail.payments import service
from bankrail.security.tokens import AccessClaims, TokenError, TokenExpired

__all__ = ["PAYMENT_CALLER", "PaymentCaller", "flow_answer"]


@dataclass(frozen=True)
class PaymentCaller:
    """Who acts on a payment: the merchant (access token) or the payer (resource token)."""

    claims: AccessClaims | None
    payment_id: uuid.UUID

    @property
    def merchant_id(self) -> uuid.UUID | None:
        """The merchant scope of the caller, None for a resource-token caller."""
        return self.claims.merchant_id if self.claims else None


async def _payment_caller(request: Request, context: AppContext) -> PaymentCaller:
    """The merchant's access token (with the `payments` scope) or the payer's resource
    token, which must name the payment of the path."""
    try:
        payment_id = uuid.UUID(request.path_params["payment_id"])
    except ValueError:
        raise RequestValidationError(
            [
                {
                    "type": "uuid_parsing",
                    "loc": ("path", "payment_id"),
                    "msg": "Input should be a valid UUID",
                }
            ]
        ) from None
    token = bearer_token(request)
    if token is None:
        raise Unauthenticated("Missing bearer token.")
    if _claimed_kind(token) == "access":
        # Never a resource token (verifying it as one always fails): the merchant's
        # token, verified once per token (security/tokens.py), not by a failed resource
        # decode on every request (65 µs, a fifth of a GET by id's API CPU).
        return PaymentCaller(require_payments_audience(access_claims(request, context)), payment_id)
    try:
        resource = context.tokens.read_resource_token(token, context.clock.now())
    except TokenExpired as exc:
        # A resource token this service issued, not a wrong credential of the merchant's.
        raise Unauthenticated(f"Invalid resource token: {exc}.") from exc
    except TokenError:
        claims = require_payments_audience(access_claims(request, context))
        return PaymentCaller(claims, payment_id)
    if resource.payment_id != payment_id:
        raise Unauthenticated("The resource token was issued for another payment.")
    return PaymentCaller(None, payment_id)


def _claimed_kind(token: str) -> str | None:
    """The `typ` a JWT's payload claims, unverified (it only chooses which verification runs
    first), or None when the token does not read as a JWT."""
    try:
        payload = token.split(".", 2)[1]
        claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error, orjson.JSONDecodeError):
        return None
    kind = claims.get("typ") if isinstance(claims, dict) else None
    return kind if isinstance(kind, str) else None


PAYMENT_CALLER = Authenticator(
    _payment_caller,
    Needs(
        schemes=("merchantToken", "resourceToken"),
        # With the merchant's token: signed, with an Idempotency-Key; with the resource token
        # (the hosted page): neither.
        signature="Svc-Signature",
        signature_required=False,
        idempotency_key="optional",
    ),
)
"""Who acts on a payment (the `payment_id` of the path): the merchant or the payer."""


def flow_answer(context: AppContext, row: Any) -> dict[str, Any]:
    """The answer of an authorisation-flow step: the payment's status and, while the payer
    has a step to take, the next action."""
    answer: dict[str, Any] = {"status": row["status"]}
    if row["status"] == "authorizing" and row["bank_action"] is None:
        action = service.next_action(
            row,
            context.settings.public_url,
            service.provider_token(context.tokens, row["id"], context.clock.now()),
            context.settings.powers,
        )
        answer["authorization_flow"] = {"actions": {"next": action}}
    return answer
