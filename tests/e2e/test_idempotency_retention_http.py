"""Stored idempotency answers over HTTP: a v3 key is replayed while valid, deleted by the
server once its six hours of service time have passed (and then taken as new), while a v1
payout's transaction_id stays taken for good."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from e2e_helpers import wait_for
from pay_in_helpers import advance_clock
from payout_helpers import GB_IBAN, external_beneficiary, funded_merchant
from payout_helpers import payout_body as v3_payout_body

from support.api import MerchantClient, Operator, operator_of
from support.databases import fetch_value, run
from support.server import RunningServer, own_server

TTL_SECONDS = 6 * 3600


@pytest.fixture(scope="module")
def pruning_server(pg_server: str) -> Iterator[RunningServer]:
    # A short prune interval, so that the test sees the deletion in a second rather than in
    # the default minute.
    with own_server(pg_server, {"BANKRAIL_PRUNE_INTERVAL_SECONDS": "0.2"}) as running:
        yield running


@pytest.fixture
def operator(pruning_server: RunningServer) -> Iterator[Operator]:
    with operator_of(pruning_server) as client:
        yield client


def _stored_keys(server: RunningServer, scope_prefix: str, key: str) -> object:
    return run(
        fetch_value(
            server.env["DATABASE_URL"],
            "SELECT count(*) FROM idempotency_keys WHERE scope LIKE $1 AND key = $2",
            scope_prefix + "%",
            key,
        )
    )


def test_expired_keys_are_deleted_and_v1_transaction_ids_are_kept(
    pruning_server: RunningServer, operator: Operator
) -> None:
    merchant = funded_merchant(operator, gbp=100_000, eur=100_000)
    body = v3_payout_body(merchant, "GBP", 100, external_beneficiary(GB_IBAN))
    key = str(uuid.uuid4())
    first = merchant.signed_post("/v3/payouts", body, idempotency_key=key)
    assert first.status_code == 202, first.text
    transaction_id = str(uuid.uuid4())
    v1 = _v1_payout(merchant, transaction_id, amount=100)
    assert v1.status_code == 202, v1.text

    # Within its validity the key is stored and replays the same payout.
    advance_clock(operator, TTL_SECONDS - 60)
    merchant.forget_token()  # access tokens last an hour of service time
    replay = merchant.signed_post("/v3/payouts", body, idempotency_key=key)
    assert (replay.status_code, replay.content) == (202, first.content)
    assert _stored_keys(pruning_server, "v3:", key) == 1

    advance_clock(operator, 61)
    merchant.forget_token()
    wait_for(
        lambda: _stored_keys(pruning_server, "v3:", key) == 0 or None,
        timeout=30,
        what="the expired key to be deleted",
    )
    assert _stored_keys(pruning_server, "v1:", transaction_id) == 1

    # Expired, the key is free: the same request makes a new payout, as it did before
    # answers were deleted.
    again = create_payout_with_key(merchant, body, key)
    assert again != first.json()["id"]
    # The v1 transaction_id is still taken: a different payout under it is refused.
    clash = _v1_payout(merchant, transaction_id, amount=200)
    assert clash.status_code == 409, clash.text


def _v1_payout(merchant: MerchantClient, transaction_id: str, *, amount: int) -> httpx.Response:
    return merchant.signed_post(
        "/v1/payouts",
        {
            "transaction_id": transaction_id,
            "beneficiary_name": "Jane Doe",
            "beneficiary_iban": "DE89370400440532013000",
            "beneficiary_reference": "payout 1",
            "currency": "EUR",
            "amount_in_minor": amount,
            "context_code": "withdrawal",
        },
        idempotency_key=None,
        signature_header="X-SVC-Signature",
    )


def create_payout_with_key(merchant: MerchantClient, body: dict[str, Any], key: str) -> str:
    answer = merchant.signed_post("/v3/payouts", body, idempotency_key=key)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])
