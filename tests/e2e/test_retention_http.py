"""Bounded growth over HTTP: under steady load, with the service clock driven past the
retention windows, the worker deletes expired idempotency answers, accepted signatures past
the replay window and finished webhook deliveries (with their attempts and events), so the
tables stay flat; a delivery still
pending is kept whatever its age (docs/operations.md, "Retention")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from e2e_helpers import wait_for
from pay_in_helpers import advance_clock
from payout_helpers import GB_IBAN, external_beneficiary, funded_merchant, payout_body

from support.api import Operator
from support.databases import fetch_value, run
from support.receiver import WebhookReceiver, always
from support.server import RunningServer, own_server

RETENTION_SECONDS = 600
ROUNDS = 5
PAYOUTS_PER_ROUND = 20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def retaining_server(pg_server: str) -> Iterator[RunningServer]:
    env = {
        "BANKRAIL_PRUNE_INTERVAL_SECONDS": "0.2",
        "BANKRAIL_PRUNE_BATCH": "50",  # several batches per pass
        "BANKRAIL_IDEMPOTENCY_TTL_SECONDS": str(RETENTION_SECONDS),
        "BANKRAIL_WEBHOOK_RETENTION_SECONDS": str(RETENTION_SECONDS),
        "BANKRAIL_SIGNATURE_REPLAY_WINDOW_SECONDS": str(RETENTION_SECONDS),
    }
    with own_server(pg_server, env) as running:
        yield running


def _value(server: RunningServer, query: str, *args: object) -> int:
    return int(run(fetch_value(server.env["DATABASE_URL"], query, *args)))  # type: ignore[call-overload]


def _sizes(server: RunningServer) -> dict[str, int]:
    return {
        table: _value(server, f"SELECT count(*) FROM {table}")
        for table in (
            "idempotency_keys",
            "accepted_signatures",
            "webhook_deliveries",
            "webhook_attempts",
            "events",
        )
    }


def test_tables_stay_flat_under_load_and_pending_deliveries_are_kept(
    retaining_server: RunningServer,
) -> None:
    operator = Operator(retaining_server.base_url, retaining_server.admin_token)
    good = WebhookReceiver()
    failing = WebhookReceiver(behaviour=always(500))
    try:
        merchant = funded_merchant(operator, good, gbp=10_000_000)
        stuck = funded_merchant(operator, failing, gbp=10_000)
        beneficiary = external_beneficiary(GB_IBAN)
        answer = stuck.signed_post("/v3/payouts", payout_body(stuck, "GBP", 100, beneficiary))
        assert answer.status_code == 202, answer.text
        failing.wait_for(lambda seen: len(seen) >= 1)
        stuck_delivery = (
            "SELECT count(*) FROM webhook_deliveries WHERE merchant_id = $1::uuid"
            " AND status = 'pending'"
        )
        assert _value(retaining_server, stuck_delivery, stuck.merchant_id) >= 1

        sizes: list[dict[str, int]] = []
        for round_number in range(ROUNDS):
            for _ in range(PAYOUTS_PER_ROUND):
                body = payout_body(merchant, "GBP", 100, beneficiary)
                sent = merchant.signed_post("/v3/payouts", body, idempotency_key=str(uuid.uuid4()))
                assert sent.status_code == 202, sent.text
            # Past every window: this round's payouts run to the end and are delivered, and
            # everything of the rounds before has expired.
            advance_clock(operator, RETENTION_SECONDS + 100)
            merchant.forget_token()
            stuck.forget_token()
            made = PAYOUTS_PER_ROUND * (round_number + 1)
            wait_for(
                lambda made=made: (
                    (
                        good.snapshot()
                        and _value(
                            retaining_server,
                            "SELECT count(*) FROM payouts WHERE merchant_id = $1::uuid"
                            " AND stage IN ('executed', 'failed')",
                            merchant.merchant_id,
                        )
                        == made
                    )
                    or None
                ),
                timeout=60,
                what="the round's payouts to finish",
            )
            wait_for(
                lambda: (
                    _value(
                        retaining_server,
                        "SELECT count(*) FROM webhook_deliveries WHERE merchant_id = $1::uuid"
                        " AND status = 'pending'",
                        merchant.merchant_id,
                    )
                    == 0
                    or None
                ),
                timeout=60,
                what="the round's webhooks to be delivered",
            )
            # Whatever is older than the windows is deleted: the answers stored before the
            # clock moved, and every delivery that finished in an earlier round.
            wait_for(
                lambda: (
                    (
                        _value(
                            retaining_server,
                            "SELECT count(*) FROM idempotency_keys WHERE scope LIKE 'v3:%'",
                        )
                        == 0
                        and _value(retaining_server, "SELECT count(*) FROM accepted_signatures")
                        == 0
                        and _value(
                            retaining_server,
                            "SELECT count(*) FROM webhook_deliveries WHERE status <> 'pending'"
                            " AND updated_at < (SELECT now() + offset_us * interval '1 microsecond'"
                            " FROM service_clock) - $1 * interval '1 second'",
                            RETENTION_SECONDS,
                        )
                        == 0
                    )
                    or None
                ),
                timeout=60,
                what="the expired rows to be deleted",
            )
            sizes.append(_sizes(retaining_server))

        # Flat: the last round leaves no more rows than the first did, although five times
        # as many requests and deliveries were made.
        for table in sizes[0]:
            assert sizes[-1][table] <= sizes[0][table] + PAYOUTS_PER_ROUND, (table, sizes)
        assert sizes[0]["webhook_deliveries"] > 0
        # The pending delivery is as old as the first round, and still there with its
        # attempts, and its event.
        assert _value(retaining_server, stuck_delivery, stuck.merchant_id) >= 1
        assert (
            _value(
                retaining_server,
                "SELECT count(*) FROM webhook_attempts t JOIN webhook_deliveries d"
                " ON d.id = t.delivery_id JOIN events e ON e.id = d.event_id"
                " WHERE d.merchant_id = $1::uuid AND d.status = 'pending'",
                stuck.merchant_id,
            )
            >= 2
        )
    finally:
        good.close()
        failing.close()
        operator.close()
