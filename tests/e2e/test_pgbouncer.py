"""Bankrail through PgBouncer in transaction pooling mode (docs/operations.md, "Connection
poolers"): every transaction may get another server connection, so nothing may rely on
session state; prepared statements are unnamed (`BANKRAIL_DB_STATEMENT_CACHE_SIZE=0`, as
PgBouncer before 1.21 needs) and LISTEN goes to the server directly
(`BANKRAIL_DIRECT_DATABASE_URL`), or is replaced by polling (`none`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from e2e_helpers import parse_time, wait_for
from pay_in_helpers import advance_clock, authorised_pay_in, settled_payment, verify_webhook
from payout_helpers import (
    SORT_CODE,
    create_payout,
    external_beneficiary,
    funded_merchant,
    payout_body,
    wait_payout_status,
)

from support.api import Operator
from support.databases import fetch_value, run
from support.fleet import PayoutLoad, hosts, local_database
from support.pgbouncer import pgbouncer
from support.receiver import WebhookReceiver
from support.server import RunningServer

pytestmark = pytest.mark.slow


@pytest.fixture(params=["direct", "none"], ids=["listen-direct", "poll"])
def pooled(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[RunningServer]]]:
    """(direct database URL, two hosts connected through PgBouncer)."""
    with local_database() as (_server, direct), pgbouncer(direct, pool_size=6) as through:
        env = {
            "BANKRAIL_DB_STATEMENT_CACHE_SIZE": "0",
            "BANKRAIL_DIRECT_DATABASE_URL": direct if request.param == "direct" else "none",
            "BANKRAIL_DB_POOL_SIZE": "10",
        }
        with hosts(through, 2, env, "--workers", "1") as started:
            yield direct, started


def _ledger_clean(host: RunningServer) -> None:
    operator = Operator(host.base_url, host.admin_token)
    try:
        answer = operator.get("/admin/ledger/check")
        assert answer.json() == {"ok": True, "violations": []}, answer.text
    finally:
        operator.close()


def test_payouts_payments_and_webhooks_through_the_pooler(
    pooled: tuple[str, list[RunningServer]],
) -> None:
    _direct, (a, b) = pooled
    receiver = WebhookReceiver()
    operator = Operator(a.base_url, a.admin_token)
    try:
        merchant = funded_merchant(operator, receiver, gbp=1_000_000)
        body = payout_body(merchant, "GBP", 250, external_beneficiary(SORT_CODE))
        payouts = [create_payout(merchant, body) for _ in range(5)]

        # The same request twice is one payout; the key with another body is refused.
        key = str(uuid.uuid4())
        first = merchant.signed_post("/v3/payouts", body, idempotency_key=key)
        replay = merchant.signed_post("/v3/payouts", body, idempotency_key=key)
        assert first.status_code == 202, first.text
        assert (replay.status_code, replay.content) == (202, first.content)
        changed = {**body, "amount_in_minor": 7}
        other = merchant.signed_post("/v3/payouts", changed, idempotency_key=key)
        assert other.status_code in (409, 422), other.text
        payouts.append(first.json()["id"])

        # Host b's clock follows host a's change (LISTEN on the direct connection, or polling),
        # and the workers run the payouts to the end.
        advance_clock(operator, 600)
        for payout_id in payouts:
            assert wait_payout_status(merchant, payout_id, {"executed"}, timeout=60)
        operator_b = Operator(b.base_url, b.admin_token)
        try:
            wait_for(
                lambda: (
                    parse_time(operator_b.get("/sandbox/clock").json()["now"])
                    >= datetime.now(UTC) + timedelta(seconds=590)
                ),
                timeout=10,
                what="host b to see the clock moved on host a",
            )
        finally:
            operator_b.close()

        # A pay-in through the mock bank settles, and its webhooks arrive signed.
        payment_id = authorised_pay_in(merchant, 1_000, {"id": "pooled-payer"})
        advance_clock(operator, 600)
        settled_payment(merchant, payment_id)
        jwks = httpx.get(f"{a.base_url}/.well-known/jwks", timeout=10).json()
        seen = receiver.wait_for(
            lambda got: {r.json().get("payout_id") for r in got} >= set(payouts), timeout=60
        )
        for request in seen:
            verify_webhook(jwks, request)
        _ledger_clean(b)

        # The request log's writer (one binary COPY per batch) works through the pooler too:
        # each payout created is in the merchant's log, named by its id.
        def logged(payout_id: str) -> bool:
            answer = merchant.get("/v3/request-log", object_id=payout_id)
            return answer.status_code == 200 and any(
                entry["method"] == "POST" for entry in answer.json()["items"]
            )

        wait_for(
            lambda: all(logged(payout_id) for payout_id in payouts),
            timeout=10,
            what="the request log to name every payout created",
        )
    finally:
        receiver.close()
        operator.close()


def test_a_host_killed_under_load_through_the_pooler_loses_and_repeats_nothing(
    pooled: tuple[str, list[RunningServer]],
) -> None:
    direct, (a, b) = pooled
    operator = Operator(b.base_url, b.admin_token)
    try:
        merchant = funded_merchant(operator, gbp=100_000_000)
        body = payout_body(merchant, "GBP", 1, external_beneficiary(SORT_CODE))
        load = PayoutLoad(merchant, [a.base_url, b.base_url], body, after_crashes=True)
        load.start()
        try:
            wait_for(lambda: load.count() >= 50, timeout=60)
            a.kill_group()  # SIGKILL: its transactions in flight are rolled back
            during = load.count()
            wait_for(lambda: load.count() >= during + 50, timeout=60)
            a.start(timeout=120)
            after = load.count()
            wait_for(lambda: load.count() >= after + 50, timeout=60)
        finally:
            load.stop()
        assert (load.errors, load.refused) == ([], [])
        stored = run(
            fetch_value(
                direct,
                "SELECT array_agg(id::text) FROM payouts WHERE merchant_id = $1::uuid",
                uuid.UUID(merchant.merchant_id),
            )
        )
        assert sorted(stored or []) == sorted(load.accepted.values())  # type: ignore[call-overload]
        assert len(set(load.accepted.values())) == len(load.accepted)
        advance_clock(operator, 600)
        unfinished = (
            "SELECT count(*) FROM payouts WHERE merchant_id = $1::uuid"
            " AND stage NOT IN ('executed', 'failed')"
        )
        wait_for(
            lambda: run(fetch_value(direct, unfinished, uuid.UUID(merchant.merchant_id))) == 0,
            timeout=120,
            what="every payout to finish",
        )
        _ledger_clean(a)
    finally:
        operator.close()
