"""Rolling restarts (docs/operations.md, "Upgrades and restarts"): two `bankrail serve` hosts
on one database, a client sending signed payouts through both as a load balancer would, and
each host in turn stopped with SIGTERM and started again. A stopped host refuses new
connections and finishes the requests it had; the client sends the same request to the other
host. No request fails, and every acknowledged payout exists exactly once."""

from __future__ import annotations

import uuid

import pytest
from e2e_helpers import wait_for
from pay_in_helpers import advance_clock
from payout_helpers import SORT_CODE, external_beneficiary, funded_merchant, payout_body

from support.api import Operator
from support.databases import fetch_value, run
from support.fleet import PayoutLoad, hosts, local_database

pytestmark = pytest.mark.slow


def test_hosts_restarted_one_at_a_time_under_load_fail_no_request() -> None:
    with local_database() as (_server, dsn), hosts(dsn, 2, {}, "--workers", "1") as (a, b):
        operator = Operator(a.base_url, a.admin_token)
        merchant = funded_merchant(operator, gbp=100_000_000)
        body = payout_body(merchant, "GBP", 1, external_beneficiary(SORT_CODE))
        load = PayoutLoad(merchant, [a.base_url, b.base_url], body)
        load.start()
        try:
            for host in (a, b):
                before = load.count()
                wait_for(lambda before=before: load.count() >= before + 50, timeout=60)
                assert host.stop() == 0  # SIGTERM: drained, then a clean exit
                during = load.count()
                wait_for(lambda during=during: load.count() >= during + 20, timeout=60)
                host.start(timeout=120)
            after = load.count()
            wait_for(lambda: load.count() >= after + 50, timeout=60)
        finally:
            load.stop()
            operator.close()

        assert load.errors == []
        assert load.refused == []
        # Exactly once: one payout per acknowledged key, and no other.
        assert len(set(load.accepted.values())) == len(load.accepted)
        stored = run(
            fetch_value(
                dsn,
                "SELECT array_agg(id::text) FROM payouts WHERE merchant_id = $1::uuid",
                uuid.UUID(merchant.merchant_id),
            )
        )
        assert sorted(stored or []) == sorted(load.accepted.values())  # type: ignore[call-overload]
        # The background work of the stopped hosts was handed back: every payout runs to the
        # end on the hosts running now.
        check = Operator(b.base_url, b.admin_token)
        try:
            advance_clock(check, 600)
            unfinished = (
                "SELECT count(*) FROM payouts WHERE merchant_id = $1::uuid"
                " AND stage NOT IN ('executed', 'failed')"
            )
            wait_for(
                lambda: run(fetch_value(dsn, unfinished, uuid.UUID(merchant.merchant_id))) == 0,
                timeout=120,
                what="every payout to finish",
            )
            answer = check.get("/admin/ledger/check")
            assert answer.json() == {"ok": True, "violations": []}, answer.text
        finally:
            check.close()
