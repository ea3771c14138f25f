"""Many hosts on one PostgreSQL (docs/operations.md, "Many hosts"): two `bankrail serve` hosts
and two `bankrail worker` hosts, each a process group with its own port, data directory and
host id, against one database of the local server. Signed payouts go through both API hosts
(as a load balancer would send them), pay-ins through each, webhooks to a receiver; mid-load
one API host and one worker host are SIGKILLed. Every acknowledged request took effect
exactly once, every event is delivered at least once, the dead hosts' work is taken over by
the others, and the ledger is clean."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from e2e_helpers import wait_for
from pay_in_helpers import advance_clock, authorised_pay_in, settled_payment
from payout_helpers import SORT_CODE, external_beneficiary, funded_merchant, payout_body

from support.api import Operator
from support.databases import fetch_value, run
from support.fleet import PayoutLoad, hosts, local_database, workers
from support.receiver import WebhookReceiver

pytestmark = pytest.mark.slow


def _value(dsn: str, query: str, *args: object) -> object:
    return run(fetch_value(dsn, query, *args))


def test_two_api_hosts_and_two_worker_hosts_survive_losing_one_of_each() -> None:
    receiver = WebhookReceiver()
    with (
        local_database() as (_server, dsn),
        hosts(dsn, 2, {}, "--workers", "1") as (a, b),
        workers(dsn, 2) as (w1, _w2),
    ):
        operator = Operator(b.base_url, b.admin_token)
        try:
            merchant = funded_merchant(operator, receiver, gbp=100_000_000)
            on_a = replace(merchant, base_url=a.base_url)
            body = payout_body(merchant, "GBP", 3, external_beneficiary(SORT_CODE))
            load = PayoutLoad(merchant, [a.base_url, b.base_url], body, after_crashes=True)
            load.start()
            try:
                wait_for(lambda: load.count() >= 100, timeout=60)
                try:
                    paid_in = [authorised_pay_in(on_a, 1_000, {"id": "payer-on-a"})]
                finally:
                    on_a.http.close()
                a.kill_group()
                w1.kill_group()
                during = load.count()
                wait_for(lambda: load.count() >= during + 100, timeout=60)
                paid_in.append(authorised_pay_in(merchant, 2_000, {"id": "payer-on-b"}))
            finally:
                load.stop()
            assert (load.errors, load.refused) == ([], [])

            # The clock moved on host b reaches every process through the database: the
            # surviving workers run every payout and pay-in to the end, the dead worker's
            # leases having expired (10 s of service time for payout batches).
            advance_clock(operator, 600)
            for payment_id in paid_in:
                settled_payment(merchant, payment_id)
            merchant_id = uuid.UUID(merchant.merchant_id)
            wait_for(
                lambda: (
                    _value(
                        dsn,
                        "SELECT count(*) FROM payouts WHERE merchant_id = $1"
                        " AND stage NOT IN ('executed', 'failed')",
                        merchant_id,
                    )
                    == 0
                ),
                timeout=120,
                what="every payout to finish",
            )
            assert _value(dsn, "SELECT count(*) FROM jobs WHERE run_at <= now()") == 0

            # Exactly once: one payout per acknowledged key, and no other.
            stored = _value(
                dsn,
                "SELECT array_agg(id::text) FROM payouts WHERE merchant_id = $1",
                merchant_id,
            )
            assert sorted(stored or []) == sorted(load.accepted.values())  # type: ignore[call-overload]
            assert len(set(load.accepted.values())) == len(load.accepted)

            # At least once: every event recorded reaches the receiver (a delivery the dead
            # worker held is tried again once its 60 s lease has passed).
            wait_for(
                lambda: (
                    _value(
                        dsn,
                        "SELECT count(*) FROM webhook_deliveries WHERE merchant_id = $1"
                        " AND status <> 'delivered'",
                        merchant_id,
                    )
                    == 0
                ),
                timeout=150,
                what="every webhook to be delivered",
            )
            recorded = _value(
                dsn,
                "SELECT array_agg(id::text) FROM events WHERE merchant_id = $1",
                merchant_id,
            )
            received = {request.json()["event_id"] for request in receiver.snapshot()}
            assert set(recorded) <= received  # type: ignore[call-overload]

            check = operator.get("/admin/ledger/check")
            assert check.json() == {"ok": True, "violations": []}, check.text
        finally:
            operator.close()
            receiver.close()
