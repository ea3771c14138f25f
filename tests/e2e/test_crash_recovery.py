"""Crash safety (issue 8.1): a mixed load survives SIGKILL of the whole `bankrail serve` process
group at random moments, restarted each time on the same data directory.

Four client threads send top-ups, v1 and v3 payouts and pay-ins through the headless mock bank,
with sandbox tokens and bank decisions that make some payouts fail, some run out of funds and
some pay-ins fail. The server is killed `BANKRAIL_CRASH_KILLS` times (default 5) just as a
request goes out; clients send unanswered requests again with the same idempotency key or
`transaction_id`, and re-send answered ones as if the answer had been lost. Afterwards, with
every payout and pay-in moved to its end on the service clock:

- every request answered 2xx exists exactly once (read back; nothing extra was created by a
  repeated key) and a repeat of it gets the same answer;
- every payout ended once, as its sandbox token asks, and was executed at most once (one
  terminal event each; the balances);
- `GET /admin/ledger/check` is clean;
- every recorded event reached the local receiver at least once, and every event reports an
  object the clients created, once per status;
- current and available balances equal the test's own sum of the accepted top-ups, settled
  pay-ins and executed payouts.

A webhook delivery that a killed process had claimed is sent again when its 60 s wall-clock
lease ends (docs/webhooks.md; the expiry itself is proved by
tests/integration/events/test_delivery_worker.py). To keep CI short the test ends such leases
early in the database, as if that minute had passed, and then waits for the worker to send
them. `BANKRAIL_CRASH_FULL=1` waits the real minute instead and, unless DATABASE_URL is set,
has `serve` own an embedded PostgreSQL in its data directory (so every restart also recovers
the postmaster the kill orphaned); by default the database is a fresh one on the session's
PostgreSQL, as an operator runs it, which keeps each restart to a few seconds.
`BANKRAIL_CRASH_SEED` replays a run's choices (the seed is in failure messages).
"""

from __future__ import annotations

import os
import random
import secrets
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from crash_load import BANK_ACTIONS, CrashLoad, Operation
from e2e_helpers import private_data_dir, wait_for
from pay_in_helpers import advance_clock

from support.api import MerchantClient, Operator
from support.databases import fetch_value, run
from support.receiver import WebhookReceiver
from support.server import RunningServer, free_port, own_server

pytestmark = pytest.mark.slow  # SIGKILLs and restarts a whole server, repeatedly

KILLS = int(os.environ.get("BANKRAIL_CRASH_KILLS", "5"))
SEED = int(os.environ.get("BANKRAIL_CRASH_SEED") or random.randrange(1_000_000))
FULL = os.environ.get("BANKRAIL_CRASH_FULL") == "1"
LEASE = timedelta(seconds=60)  # events/delivery.py
V1_TERMINAL = {"settled", "failed", "rejected"}
V3_TERMINAL = {"executed", "failed"}
PAYMENT_TERMINAL = {"payment_settled", "payment_failed"}
# v1 reports the failure reasons of v3 like this (docs/webhooks.md).
V1_FAILURE = {
    "fail:scheme_error": "scheme_error",
    "fail:invalid_iban": "scheme_error",
    "fail:server_error": "server_error",
}


def _why(load: CrashLoad | None = None) -> str:
    if load is None:
        return f"(seed {SEED})"
    return (
        f"(seed {SEED}, {len(load.operations)} operations,"
        f" {load.cut_off} requests cut off by a kill, {load.replays} answers re-requested)"
    )


@dataclass
class CrashServer:
    """The test's own server, and its database when the test can reach it."""

    server: RunningServer
    dsn: str | None


@pytest.fixture
def crash_server(request: pytest.FixtureRequest) -> Iterator[CrashServer]:
    """A `bankrail serve` of this test's own on a fresh data directory (see the module doc)."""
    if not (FULL and not os.environ.get("DATABASE_URL")):
        with own_server(request.getfixturevalue("pg_server"), {}) as running:
            yield CrashServer(running, running.env["DATABASE_URL"])
        return
    with private_data_dir("bankrail-e2e-crash-") as data_dir:
        server = RunningServer(
            data_dir=data_dir,
            port=free_port(),
            admin_token="admin-" + secrets.token_urlsafe(24),
            env={"DATABASE_URL": ""},  # empty: serve owns an embedded PostgreSQL
        )
        try:
            server.start()
            yield CrashServer(server, None)
        finally:
            if server.process is not None:
                server.stop()


async def _end_dead_leases(dsn: str, claimed_before: datetime) -> object:
    """End the leases of deliveries claimed before the last kill (by a killed process), as
    if their minute had passed; the worker then claims and sends them as it would anyway."""
    return await fetch_value(
        dsn,
        "WITH ended AS (UPDATE webhook_deliveries SET lease_until = clock_timestamp()"
        " WHERE status = 'pending' AND lease_until > clock_timestamp()"
        " AND lease_until < $1 RETURNING 1) SELECT count(*) FROM ended",
        claimed_before + LEASE,
    )


# --- reading the outcome ----------------------------------------------------------------------


def _json(answer: Any, what: str) -> Any:
    assert answer.status_code == 200, f"{what}: {answer.status_code} {answer.text} {_why()}"
    return answer.json()


def _v1_transactions(merchant: MerchantClient) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 10_000, **({"cursor": cursor} if cursor else {})}
        page = _json(merchant.get("/v1/transactions", **params), "GET /v1/transactions")
        found += page["results"]
        cursor = page.get("next_cursor")
        if not cursor:
            return found


def _account_items(merchant: MerchantClient, currency: str) -> list[dict[str, Any]]:
    path = f"/v3/merchant-accounts/{merchant.accounts[currency]['id']}/transactions"
    found: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1_000, **({"cursor": cursor} if cursor else {})}
        page = _json(merchant.get(path, **params), f"GET {path}")
        found += page["items"]
        cursor = page["pagination"].get("next_cursor")
        if not cursor:
            return found


def _deliveries(operator: Operator, merchant: MerchantClient) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"merchant_id": merchant.merchant_id, "limit": 1_000}
        if cursor:
            params["cursor"] = cursor
        page = _json(operator.get("/admin/webhook-deliveries", **params), "deliveries")
        found += page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return found


class Outcome:
    """The final state of every accepted operation, as the service reports it."""

    def __init__(self, merchant: MerchantClient, load: CrashLoad) -> None:
        self.merchant = merchant
        self.load = load
        self.v1: dict[str, dict[str, Any]] = {}
        self.v3: dict[str, dict[str, Any]] = {}
        self.payments: dict[str, dict[str, Any]] = {}

    def settled(self) -> bool:
        """Read what is not final yet; True when every payout and pay-in is final."""
        for record in _v1_transactions(self.merchant):
            if record["type"] == "payout":
                self.v1[record["transaction_id"]] = record
        for op in self.load.accepted("v3_payout"):
            if self.v3.get(str(op.object_id), {}).get("status") not in V3_TERMINAL:
                payout = self.merchant.get(f"/v3/payouts/{op.object_id}")
                self.v3[str(op.object_id)] = _json(payout, f"GET /v3/payouts/{op.object_id}")
        for op in self.load.accepted("pay_in"):
            if self.payments.get(str(op.object_id), {}).get("status") not in PAYMENT_TERMINAL:
                payment = self.merchant.get(f"/v3/payments/{op.object_id}")
                self.payments[str(op.object_id)] = _json(payment, f"GET payment {op.object_id}")
        v1_done = all(
            self.v1.get(str(op.object_id), {}).get("status") in V1_TERMINAL
            for op in self.load.accepted("v1_payout")
        )
        v3_done = all(p["status"] in V3_TERMINAL for p in self.v3.values())
        paid = all(p["status"] in PAYMENT_TERMINAL for p in self.payments.values())
        return v1_done and v3_done and paid


def _settle(operator: Operator, outcome: Outcome) -> None:
    """Move delayed payout steps, bank delays and expiries along on the service clock (past
    the 15 minutes after which a payment nobody decided on expires), until all is final."""
    advance_clock(operator, 16 * 60)
    advanced = 16 * 60
    deadline = time.monotonic() + 60
    while not outcome.settled():
        if time.monotonic() > deadline:
            pending = {k: v["status"] for k, v in {**outcome.v3, **outcome.payments}.items()}
            raise AssertionError(f"not final after {advanced} s: {pending} {_why(outcome.load)}")
        if advanced < 30 * 60:  # a step scheduled after the last advance (a settlement delay)
            advance_clock(operator, 30)
            advanced += 30
        time.sleep(0.1)  # the poll's interval


# --- what each operation should have become ---------------------------------------------------


def _payout_result(op: Operation, outcome: Outcome) -> tuple[bool, str | None]:
    """(executed, failure reason in v3 terms or v1 status) of a payout, checked against the
    outcome its sandbox token asks for."""
    if op.kind == "v1_payout":
        record = outcome.v1[str(op.object_id)]
        assert (record["amount_in_minor"], record["currency"]) == (op.amount, op.currency)
        status = record["status"]
        allowed = {
            "": {"settled", "rejected"},
            "delay:40": {"settled", "rejected"},
            "huge": {"rejected"},
        }
        assert status in allowed.get(op.token, {"failed", "rejected"}), (op, record, _why())
        return status == "settled", None if status == "settled" else status
    payout = outcome.v3[str(op.object_id)]
    assert (payout["amount_in_minor"], payout["currency"]) == (op.amount, op.currency)
    reason = payout.get("failure_reason")
    if op.token in ("", "delay:40"):
        assert payout["status"] == "executed" or reason == "insufficient_funds", (payout, _why())
    elif op.token == "huge":
        assert reason == "insufficient_funds", (payout, _why())
    else:
        assert reason in {op.token.removeprefix("fail:"), "insufficient_funds"}, (payout, _why())
    return payout["status"] == "executed", reason


def _expected_events(op: Operation, outcome: Outcome) -> dict[tuple[str, str], int]:
    """The webhook events (object, type) an operation must have produced, once each."""
    key = str(op.object_id)
    if op.kind == "topup":
        return {(op.body["reference"], "topup_received"): 1}
    if op.kind == "v1_payout":
        status = outcome.v1[key]["status"]
        if status == "rejected":
            return {(key, "payout_rejected"): 1}
        last = "payout_settled" if status == "settled" else "payout_failed"
        return {(key, t): 1 for t in ("payout_authorised", "payout_submitted", last)}
    if op.kind == "v3_payout":
        executed = outcome.v3[key]["status"] == "executed"
        return {(key, "payout_executed" if executed else "payout_failed"): 1}
    if outcome.payments[key]["status"] == "payment_settled":
        return {(key, "payment_executed"): 1, (key, "payment_settled"): 1}
    return {(key, "payment_failed"): 1}


def _event_subject(event: dict[str, Any]) -> tuple[str, str]:
    """(the object an event reports on, its type)."""
    if "event_body" in event:  # payouts API v1
        body = event["event_body"]
        subject = (
            body["reference"] if event["event_type"] == "topup_received" else body["transaction_id"]
        )
        return str(subject), event["event_type"]
    return str(event.get("payout_id") or event.get("payment_id")), event["type"]


Events = dict[tuple[str, str], list[dict[str, Any]]]


def _terminal_event(events: Events, key: str, kind: str) -> Any:
    found = events.get((key, kind), [])
    assert len(found) == 1, (key, kind, found, _why())
    return found[0]


# --- the test ---------------------------------------------------------------------------------


def test_mixed_load_survives_repeated_sigkill_of_the_process_group(
    crash_server: CrashServer, receiver: WebhookReceiver
) -> None:
    server = crash_server.server
    operator = Operator(server.base_url, server.admin_token)
    try:
        merchant = operator.new_merchant("Crash Test Merchant")
        hooks = operator.put(
            f"/admin/merchants/{merchant.merchant_id}/webhooks",
            {"payments_uri": f"{receiver.url}/payments", "payouts_uri": f"{receiver.url}/payouts"},
        )
        assert hooks.status_code == 200, hooks.text
        load = CrashLoad(server.base_url, server.admin_token, merchant, seed=SEED)
        killed_at = _crash_repeatedly(crash_server, load)
        _check(crash_server, operator, merchant, receiver, load, killed_at)
    finally:
        operator.close()


def _crash_repeatedly(crash_server: CrashServer, load: CrashLoad) -> datetime | None:
    """Run the load through KILLS kills and restarts; returns the database's time at the last
    kill (None when the test cannot reach the database)."""
    server = crash_server.server
    rng = random.Random(SEED)
    killed_at: datetime | None = None
    load.start()
    try:
        for _ in range(KILLS):
            # Kill just as some request goes out, after a random number of them.
            load.wait_sent(load.sent + rng.randint(3, 30), timeout=60)
            server.kill_group()
            if crash_server.dsn:
                killed_at = _database_now_sync(crash_server.dsn)
            server.start()
        load.wait_sent(load.sent + 10, timeout=60)
    finally:
        load.stop(timeout=120)
    load.raise_errors()
    assert load.cut_off or not KILLS, "the kills landed mid-request"
    # Lost answers: every answered request, sent again after the last restart, gets the same
    # answer and creates nothing.
    load.replay_all()
    return killed_at


def _database_now_sync(dsn: str) -> datetime:
    moment = run(fetch_value(dsn, "SELECT clock_timestamp()"))
    assert isinstance(moment, datetime)
    return moment


def _check(
    crash_server: CrashServer,
    operator: Operator,
    merchant: MerchantClient,
    receiver: WebhookReceiver,
    load: CrashLoad,
    killed_at: datetime | None,
) -> None:
    outcome = Outcome(merchant, load)
    _settle(operator, outcome)
    assert all(op.object_id for op in load.operations), "every operation was answered 2xx"
    accepted = {kind: load.accepted(kind) for kind in ("topup", "v1_payout", "v3_payout", "pay_in")}
    assert all(accepted.values()), f"every kind ran: { {k: len(v) for k, v in accepted.items()} }"
    everything = [op for ops in accepted.values() for op in ops]

    # Every 2xx exists exactly once in the v1 list (v1 payouts and top-ups) ...
    v1_records = _v1_transactions(merchant)
    repeated = [k for k, n in Counter(r["transaction_id"] for r in v1_records).items() if n > 1]
    assert not repeated, f"listed more than once: {repeated} {_why(load)}"
    payouts = accepted["v1_payout"] + accepted["v3_payout"]
    v1_ids = {str(op.object_id) for op in accepted["v1_payout"]}
    listed = {r["transaction_id"] for r in v1_records if r["type"] == "payout"}
    assert listed == v1_ids, (
        f"payouts listed but not accepted by v1: {listed - v1_ids},"
        f" accepted but not listed: {v1_ids - listed} {_why(load)}"
    )
    topups = {r["transaction_id"]: r for r in v1_records if r["type"] == "topup"}
    assert set(topups) == {str(op.object_id) for op in accepted["topup"]}, _why(load)
    for op in accepted["topup"]:
        record = topups[str(op.object_id)]
        assert (record["amount_in_minor"], record["currency"]) == (op.amount, op.currency)
        assert record["reference"] == op.body["reference"]

    # ... and in each account's v3 list, which has the v3 payouts and settled pay-ins too
    # (a payout that failed moved no money and is not listed).
    def executed(op: Any) -> bool:
        return bool(_payout_result(op, outcome)[0])

    v3_ids: set[str] = set()
    for currency in ("GBP", "EUR"):
        items = _account_items(merchant, currency)
        v3_ids |= {item["id"] for item in items if item["type"] == "payout"}
        mine = [op for op in everything if op.currency == currency]
        kinds = Counter(item["type"] for item in items)
        assert kinds == Counter(
            external_payment=sum(op.kind == "topup" for op in mine),
            payout=sum(op.kind in ("v1_payout", "v3_payout") and executed(op) for op in mine),
            merchant_account_payment=sum(
                op.kind == "pay_in" and op.action == "Execute" for op in mine
            ),
        ), f"{currency} account list {kinds} {_why(load)}"
        assert len({item["id"] for item in items}) == len(items), _why(load)
    missing = {str(op.object_id) for op in accepted["v3_payout"] if executed(op)} - v3_ids
    assert not missing, f"v3 payouts accepted but not listed: {missing} {_why(load)}"

    # Payouts end as their tokens ask; pay-ins as the payer decided. The test's own sums:
    expected = {"GBP": 0, "EUR": 0}
    for op in accepted["topup"]:
        expected[op.currency] += op.amount
    outcomes: Counter[str] = Counter()
    for op in payouts:
        executed, reason = _payout_result(op, outcome)
        outcomes["executed" if executed else str(reason)] += 1
        assert not (executed and op.token == "huge"), op
        expected[op.currency] -= op.amount if executed else 0
    for op in accepted["pay_in"]:
        payment = outcome.payments[str(op.object_id)]
        status, reason = BANK_ACTIONS[op.action]
        assert (payment["status"], payment.get("failure_reason")) == (status, reason), (
            op.action,
            payment,
            _why(load),
        )
        assert (payment["amount_in_minor"], payment["currency"]) == (op.amount, op.currency)
        expected[op.currency] += op.amount if status == "payment_settled" else 0
    assert outcomes["executed"], f"some payouts executed: {outcomes}"
    assert len(outcomes) > 1, f"and some did not: {outcomes}"

    accounts = _json(merchant.get("/v3/merchant-accounts"), "GET /v3/merchant-accounts")
    found = {
        a["currency"]: (a["current_balance_in_minor"], a["available_balance_in_minor"])
        for a in accounts["items"]
    }
    assert found == {c: (v, v) for c, v in expected.items()}, (
        f"balances (current, available) differ from the sum of {outcomes} payouts,"
        f" {len(accepted['topup'])} top-ups and {len(accepted['pay_in'])} pay-ins {_why(load)}"
    )
    check = _json(operator.get("/admin/ledger/check"), "GET /admin/ledger/check")
    assert check == {"ok": True, "violations": []}, check

    _check_events(crash_server, operator, merchant, receiver, load, outcome, killed_at)


def _check_events(
    crash_server: CrashServer,
    operator: Operator,
    merchant: MerchantClient,
    receiver: WebhookReceiver,
    load: CrashLoad,
    outcome: Outcome,
    killed_at: datetime | None,
) -> None:
    """Every recorded event reached the receiver, and the events are exactly those expected."""
    deliveries = _deliveries(operator, merchant)
    event_ids = {d["event_id"] for d in deliveries}
    assert len(event_ids) == len(deliveries), "one delivery per event"
    statuses = Counter(d["status"] for d in deliveries)
    assert set(statuses) <= {"pending", "delivered"}, f"deliveries {statuses} {_why(load)}"

    def received_ids() -> set[str]:
        return {r.json()["event_id"] for r in receiver.snapshot()}

    ended = 0
    if killed_at is not None and not FULL:
        ended = int(str(run(_end_dead_leases(str(crash_server.dsn), killed_at))))
    wait = LEASE.total_seconds() + 15 if FULL else 20
    try:
        wait_for(lambda: event_ids <= received_ids(), timeout=wait, what="every event")
    except AssertionError as exc:
        missing = Counter(
            d["event_type"] for d in deliveries if d["event_id"] not in received_ids()
        )
        raise AssertionError(
            f"{exc}: never received {dict(missing)} of {len(event_ids)} events"
            f" ({ended} leases of killed processes ended early) {_why(load)}"
        ) from None
    # And the log says so, the deliveries a crash interrupted included.
    wait_for(
        lambda: {d["status"] for d in _deliveries(operator, merchant)} == {"delivered"},
        timeout=wait,
        what=f"every delivery marked delivered {_why(load)}",
    )

    received: dict[str, dict[str, Any]] = {}
    for request in receiver.snapshot():
        event = request.json()
        first = received.setdefault(event["event_id"], event)
        assert first == event, "a delivery sent again carries the same event"
    assert set(received) == event_ids, "the receiver got only events that the log records"
    by_subject: Events = defaultdict(list)
    for event in received.values():
        by_subject[_event_subject(event)].append(event)
    wanted: dict[tuple[str, str], int] = {}
    for op in (op for op in load.operations if op.object_id is not None):
        wanted.update(_expected_events(op, outcome))
    got = {subject: len(events) for subject, events in by_subject.items()}
    assert got == wanted, (
        f"events per object and type differ: unexpected {set(got.items()) - set(wanted.items())},"
        f" missing {set(wanted.items()) - set(got.items())} {_why(load)}"
    )
    # v1 tells why a payout did not settle: as its token asked, or for lack of funds.
    for op in load.accepted("v1_payout"):
        key = str(op.object_id)
        status = outcome.v1[key]["status"]
        if status == "rejected":
            body = _terminal_event(by_subject, key, "payout_rejected")["event_body"]
            assert body["reason"] == "insufficient_funds", (op, body)
        elif status == "failed":
            body = _terminal_event(by_subject, key, "payout_failed")["event_body"]
            assert body["reason"] == V1_FAILURE[op.token], (op, body)
