"""The payout operations of the fast lane (web/fastlane.py): the common case of
`POST /v3/payouts` and of `GET /v3/payouts/{id}`, answered with the same checks and service
calls as the routes in routes.py. Every other request, and every one that fails a check, is
handed on to those routes, which give the error answer."""

from __future__ import annotations

import uuid

import orjson
from pydantic import ValidationError

from bankrail.core.jsonbody import dumps
from bankrail.core.problems import ProblemError
from bankrail.payouts import routes, service
from bankrail.payouts.schemas import V3PayoutRequest
from bankrail.security.auth import merchant_claims, verify_signed_request
from bankrail.web.fastlane import FastAnswer, FastRequest, FastRoute, HandOn, route_of

__all__ = ["fast_routes"]


async def create_v3_payout(request: FastRequest) -> FastAnswer:
    """`POST /v3/payouts` of an open-loop payout under a new Idempotency-Key."""
    headers = request.headers
    key = headers.get("idempotency-key")
    media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
    if not key or len(key) > routes.MAX_IDEMPOTENCY_KEY_LENGTH or media_type != "application/json":
        raise HandOn
    context = request.context
    try:
        merchant = merchant_claims(request.scope, headers, context)
        body = V3PayoutRequest.model_validate(orjson.loads(request.body))
        await verify_signed_request(
            context,
            merchant,
            method=request.method,
            path=request.raw_path,
            headers=headers,
            signature=headers.get("svc-signature", headers.get("x-svc-signature")),
            body=request.body,
        )
    except (ProblemError, ValidationError, orjson.JSONDecodeError) as exc:
        raise HandOn from exc
    answer = await routes.accept_common_case(
        context, merchant, body, request.scope["path"], request.body, key
    )
    if answer is None:  # a replay, a closed-loop or internal payout, or a refusal
        raise HandOn
    return FastAnswer(202, answer)


async def get_v3_payout(request: FastRequest) -> FastAnswer:
    """`GET /v3/payouts/{id}` of one of the caller's payouts, by its canonical id."""
    text = request.path_params[0]
    try:
        payout_id = uuid.UUID(text)
    except ValueError as exc:
        raise HandOn from exc
    if str(payout_id) != text:  # braces, capitals, no hyphens: the router decides
        raise HandOn
    context = request.context
    try:
        merchant = merchant_claims(request.scope, request.headers, context)
        async with context.pool.acquire() as conn:
            record = await service.get_v3_payout(conn, payout_id, merchant.merchant_id)
    except ProblemError as exc:
        raise HandOn from exc
    return FastAnswer(200, dumps(record))


def fast_routes() -> list[FastRoute]:
    """The payout operations of the fast lane, each labelled with the router's route of the
    same operation."""
    return [
        FastRoute(
            "POST",
            "/v3/payouts",
            create_v3_payout,
            route_of(routes.router.routes, routes.create_v3_payout),
            reads_body=True,
        ),
        FastRoute(
            "GET",
            "/v3/payouts/{}",
            get_v3_payout,
            route_of(routes.router.routes, routes.get_v3_payout),
        ),
    ]
