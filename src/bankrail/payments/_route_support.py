"""What the payment route modules share: registering one endpoint on several paths, who acts
on a payment (`Caller`: the merchant's access token or the payer's resource token), and the
answer of an authorisation-flow step."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from bankrail.core.problems import Unauthenticated
from bankrail.http.auth import bearer_token, read_access_claims, require_payments_audience
from bankrail.http.context import AppContext
from bankrail.http.deps import Context
from bankrail.http.openapi import Needs, documents
from bankrail.payments import service
from bankrail.security.tokens import AccessClaims, TokenError, TokenExpired

__all__ = ["Caller", "PaymentCaller", "aliased_routes", "flow_answer"]


def aliased_routes(
    router: APIRouter,
) -> Callable[..., Callable[[Callable[..., Any]], Callable[..., Any]]]:
    """The decorator that registers one endpoint of `router` on several paths."""

    def _routes(
        method: str, paths: list[str], **options: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register one endpoint on several paths, each with its own operation id."""

        def register(endpoint: Callable[..., Any]) -> Callable[..., Any]:
            for index, path in enumerate(paths):
                suffix = "" if index == 0 else f"_alias{index}"
                router.add_api_route(
                    path,
                    endpoint,
                    methods=[method],
                    operation_id=f"{endpoint.__name__}{suffix}",
                    **options,
                )
            return endpoint

        return register

    return _routes


@dataclass(frozen=True)
class PaymentCaller:
    """Who acts on a payment: the merchant (access token) or the payer (resource token)."""

    claims: AccessClaims | None
    payment_id: uuid.UUID

    @property
    def merchant_id(self) -> uuid.UUID | None:
        """The merchant scope of the caller, None for a resource-token caller."""
        return self.claims.merchant_id if self.claims else None


@documents(
    Needs(
        schemes=("merchantToken", "resourceToken"),
        # With the merchant's token: signed, with an Idempotency-Key; with the resource token
        # (the hosted page): neither.
        signature="Svc-Signature",
        signature_required=False,
        idempotency_key="optional",
    )
)
async def _payment_caller(
    payment_id: uuid.UUID, request: Request, context: Context
) -> PaymentCaller:
    token = bearer_token(request)
    if token is None:
        raise Unauthenticated("Missing bearer token.")
    try:
        resource = context.tokens.read_resource_token(token, context.clock.now())
    except TokenExpired as exc:
        # A resource token this service issued, not a wrong credential of the merchant's.
        raise Unauthenticated(f"Invalid resource token: {exc}.") from exc
    except TokenError:
        claims = require_payments_audience(await read_access_claims(request, context))
        return PaymentCaller(claims, payment_id)
    if resource.payment_id != payment_id:
        raise Unauthenticated("The resource token was issued for another payment.")
    return PaymentCaller(None, payment_id)


Caller = Annotated[PaymentCaller, Depends(_payment_caller)]


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
