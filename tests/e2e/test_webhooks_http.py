"""Webhooks end to end, over HTTP against `bankrail serve` (docs/webhooks.md and
"Balance notifications", §8; spec 6): what a merchant's receiver gets, how it verifies it with
the public truelayer-signing library, retries on the service clock, discarding and replays."""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import httpx
import pytest
import truelayer_signing
from truelayer_signing import HttpMethod, TlSigningException

from support.api import MerchantClient, Operator
from support.receiver import Answer, Received, WebhookReceiver, always
from support.server import RunningServer

T = TypeVar("T")
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def poll(fetch: Callable[[], T], done: Callable[[T], bool], timeout: float = 20.0) -> T:
    """Call `fetch` until `done` holds for its answer; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {timeout} s; last seen: {value!r}")
        time.sleep(0.05)


def parse_time(text: str) -> datetime:
    assert ISO_UTC.match(text), text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def set_webhooks(operator: Operator, merchant: MerchantClient, **uris: str | None) -> None:
    answer = operator.put(f"/admin/merchants/{merchant.merchant_id}/webhooks", uris)
    assert answer.status_code == 200, answer.text


def deliveries(operator: Operator, merchant: MerchantClient, **filters: str) -> list[Any]:
    answer = operator.get("/admin/webhook-deliveries", merchant_id=merchant.merchant_id, **filters)
    assert answer.status_code == 200, answer.text
    items: list[Any] = answer.json()["items"]
    return items


def delivery(operator: Operator, delivery_id: str) -> Any:
    answer = operator.get(f"/admin/webhook-deliveries/{delivery_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def the_delivery(operator: Operator, merchant: MerchantClient, event_type: str) -> Any:
    """The merchant's only delivery of `event_type` (waited for)."""
    found = poll(
        lambda: deliveries(operator, merchant, event_type=event_type),
        lambda items: len(items) == 1,
    )
    return found[0]


def attempts_at_least(operator: Operator, delivery_id: str, count: int) -> Any:
    """The delivery once it has `count` attempts or is no longer pending."""
    return poll(
        lambda: delivery(operator, delivery_id),
        lambda d: d["attempt_count"] >= count or d["status"] != "pending",
    )


def advance(operator: Operator, seconds: float) -> None:
    answer = operator.post("/sandbox/clock/advance", {"seconds": seconds})
    assert answer.status_code == 200, answer.text


def top_up(operator: Operator, merchant: MerchantClient, amount: int, **extra: Any) -> None:
    answer = operator.top_up(merchant.accounts["GBP"], amount, **extra)
    assert answer.status_code == 201, answer.text


def set_threshold(operator: Operator, merchant: MerchantClient, threshold: int | None) -> None:
    account_id = merchant.accounts["GBP"]["id"]
    answer = operator.put(
        f"/admin/merchant-accounts/{account_id}/balance-threshold",
        {"threshold_in_minor": threshold},
    )
    assert answer.status_code == 200, answer.text


def iban_of(account: dict[str, Any]) -> str:
    return str(next(i["iban"] for i in account["account_identifiers"] if i["type"] == "iban"))


def verify(jwks: Any, request: Received, body: bytes | None = None) -> None:
    """Verify Svc-Signature exactly as a merchant would, with the public library."""
    signature = request.headers["Svc-Signature"]
    verifier = truelayer_signing.verify_with_jwks(
        jwks, truelayer_signing.extract_jws_header(signature)
    )
    (
        verifier.set_method(HttpMethod.POST)
        .set_path(request.path)
        .add_headers(request.headers)
        .set_body((request.body if body is None else body).decode())
        .verify(signature)
    )


def jose_header(signature: str) -> bytes:
    encoded = signature.split(".")[0]
    return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))


# --- payouts API v1: topup_received, signed ----------------------------------------------------


def test_a_top_up_sends_a_signed_v1_topup_received_webhook(
    operator: Operator, server: RunningServer, receiver: WebhookReceiver
) -> None:
    merchant = operator.new_merchant()
    set_webhooks(operator, merchant, payouts_uri=receiver.url + "/webhooks/payouts")
    gbp = merchant.accounts["GBP"]
    top_up(
        operator,
        merchant,
        4_321,
        remitter_name="Jane Doe",
        remitter_iban="GB33BUKB20201555555555",
        reference="INV-42",
    )

    [request] = receiver.wait_for(lambda seen: len(seen) >= 1)
    assert request.path == "/webhooks/payouts"
    envelope = request.json()
    assert set(envelope) == {"event_type", "event_schema_version", "event_id", "event_body"}
    assert envelope["event_type"] == "topup_received"
    assert envelope["event_schema_version"] == 1
    assert str(uuid.UUID(envelope["event_id"])) == envelope["event_id"]
    body = envelope["event_body"]
    assert set(body) == {
        "iban",
        "currency",
        "amount_in_minor",
        "remitter_name",
        "remitter_iban",
        "reference",
        "received_at",
    }
    assert body["iban"] == iban_of(gbp)
    assert body["currency"] == "GBP"
    assert body["amount_in_minor"] == 4_321
    assert body["remitter_name"] == "Jane Doe"
    assert body["remitter_iban"] == "GB33BUKB20201555555555"
    assert body["reference"] == "INV-42"
    received_at = parse_time(body["received_at"])

    # The headers: the timestamp (service time, to the second) and the signature.
    timestamp = request.headers["X-SVC-Webhook-Timestamp"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", timestamp)
    service_now = parse_time(operator.get("/sandbox/clock").json()["now"])
    sent_at = parse_time(timestamp)
    assert received_at - timedelta(seconds=1) <= sent_at <= service_now
    assert request.headers["Content-Type"] == "application/json"
    signature = request.headers["Svc-Signature"]

    # The JOSE header: compact JSON with exactly these members, in this order.
    raw_header = jose_header(signature)
    header = json.loads(raw_header)
    assert list(header) == ["alg", "kid", "tl_version", "tl_headers", "jku"]
    assert raw_header == json.dumps(header, separators=(",", ":")).encode()
    assert header["alg"] == "ES512"
    assert header["tl_version"] == "2"
    assert header["tl_headers"] == "X-SVC-Webhook-Timestamp,Content-Type"
    assert header["jku"] == server.base_url + "/.well-known/jwks"
    parsed = truelayer_signing.extract_jws_header(signature)
    assert parsed.jku == server.base_url + "/.well-known/jwks"
    assert parsed.tl_headers == "X-SVC-Webhook-Timestamp,Content-Type"

    # The key set, fetched from the jku with no token.
    jwks_answer = httpx.get(parsed.jku)
    assert jwks_answer.status_code == 200
    jwks = jwks_answer.json()
    [key] = [k for k in jwks["keys"] if k["kid"] == parsed.kid]
    assert {k: key[k] for k in ("kty", "crv", "alg")} == {
        "kty": "EC",
        "crv": "P-521",
        "alg": "ES512",
    }
    assert key["x"]
    assert key["y"]

    verify(jwks, request)

    # Any change to what was signed fails verification.
    tampered = request.body.replace(b'"amount_in_minor":4321', b'"amount_in_minor":9321')
    assert tampered != request.body
    with pytest.raises(TlSigningException):
        verify(jwks, request, tampered)
    with pytest.raises(TlSigningException):
        verify(jwks, request, request.body + b" ")
    moved = Received(
        request.path,
        {**request.headers, "X-SVC-Webhook-Timestamp": "2020-01-01T00:00:00Z"},
        request.body,
    )
    with pytest.raises(TlSigningException):
        verify(jwks, moved)
    elsewhere = Received("/webhooks/payments", request.headers, request.body)
    with pytest.raises(TlSigningException):
        verify(jwks, elsewhere)

    # The event is logged as delivered, at the URI it was sent to.
    listed = poll(
        lambda: deliveries(operator, merchant, status="delivered"), lambda items: len(items) == 1
    )
    assert listed[0]["event_id"] == envelope["event_id"]
    assert listed[0]["event_type"] == "topup_received"
    assert listed[0]["uri"] == receiver.url + "/webhooks/payouts"
    assert listed[0]["attempt_count"] == 1
    detail = delivery(operator, listed[0]["id"])
    assert json.loads(detail["payload"]) == envelope


def test_topup_received_is_dated_with_seven_fractional_digits_like_v1_transactions(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = operator.new_merchant()
    set_webhooks(operator, merchant, payouts_uri=receiver.url + "/webhooks/payouts")
    top_up(operator, merchant, 250)
    [request] = receiver.wait_for(lambda seen: len(seen) >= 1)
    received_at = request.json()["event_body"]["received_at"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z", received_at), received_at
    # The same instant, written the same way, as the top-up's transaction record.
    answer = merchant.get("/v1/transactions", type="Topup")
    assert answer.status_code == 200, answer.text
    [record] = answer.json()["results"]
    assert record["settled_at"] == received_at


def test_v1_events_go_only_to_the_payouts_uri(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = operator.new_merchant()
    set_webhooks(
        operator,
        merchant,
        payments_uri=receiver.url + "/payments",
        payouts_uri=receiver.url + "/payouts",
    )
    top_up(operator, merchant, 100)
    receiver.wait_for(lambda seen: len(seen) >= 1)
    poll(
        lambda: deliveries(operator, merchant),
        lambda items: [i["status"] for i in items] == ["delivered"],
    )
    assert [r.path for r in receiver.snapshot()] == ["/payouts"]


# --- payments API v3: balance notifications ----------------------------------------------------


def balance_events(receiver: WebhookReceiver) -> list[Any]:
    return [r.json() for r in receiver.snapshot() if r.path == "/payments"]


def balance_deliveries(operator: Operator, merchant: MerchantClient) -> list[Any]:
    return deliveries(operator, merchant, event_type="balance_notification")


def test_below_threshold_then_recovered(
    operator: Operator, server: RunningServer, receiver: WebhookReceiver
) -> None:
    merchant = operator.new_merchant()
    set_webhooks(
        operator,
        merchant,
        payments_uri=receiver.url + "/payments",
        payouts_uri=receiver.url + "/payouts",
    )
    account_id = merchant.accounts["GBP"]["id"]

    # Balance 0, threshold 1000: below at once (both bounds crossed: one webhook).
    set_threshold(operator, merchant, 1000)
    receiver.wait_for(lambda seen: any(r.path == "/payments" for r in seen))
    [below] = balance_events(receiver)
    assert below == {
        "type": "balance_notification",
        "event_version": 1,
        "event_id": below["event_id"],
        "merchant_account_id": account_id,
        "status": "below_threshold",
        "threshold_in_minor": 1000,
        "current_balance_in_minor": 0,
        "available_balance_in_minor": 0,
    }
    assert str(uuid.UUID(below["event_id"])) == below["event_id"]

    # 1500 is still below 2 x T: no notification (the top-up's v1 event is the witness that
    # the change was made; its notification, had there been one, is in the same transaction).
    top_up(operator, merchant, 1500)
    assert len(balance_deliveries(operator, merchant)) == 1

    # 2000 >= 2 x T: recovered.
    top_up(operator, merchant, 500)
    receiver.wait_for(lambda seen: sum(r.path == "/payments" for r in seen) >= 2)
    recovered = balance_events(receiver)[1]
    assert recovered["type"] == "balance_notification"
    assert recovered["event_version"] == 1
    assert recovered["status"] == "recovered"
    assert recovered["merchant_account_id"] == account_id
    assert recovered["threshold_in_minor"] == 1000
    assert recovered["current_balance_in_minor"] == 2000
    assert recovered["available_balance_in_minor"] == 2000
    assert recovered["event_id"] != below["event_id"]

    # Exactly two notifications were made, both delivered with a valid signature.
    listed = poll(
        lambda: balance_deliveries(operator, merchant),
        lambda items: [i["status"] for i in items] == ["delivered", "delivered"],
    )
    assert {i["event_id"] for i in listed} == {below["event_id"], recovered["event_id"]}
    jwks = httpx.get(f"{server.base_url}/.well-known/jwks").json()
    for request in receiver.snapshot():
        verify(jwks, request)
    # More money changes nothing.
    top_up(operator, merchant, 10_000)
    assert len(balance_deliveries(operator, merchant)) == 2


def test_approaching_then_below_as_the_threshold_rises(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = operator.new_merchant()
    set_webhooks(operator, merchant, payments_uri=receiver.url + "/payments")
    account_id = merchant.accounts["GBP"]["id"]
    top_up(operator, merchant, 3000)

    set_threshold(operator, merchant, 1000)  # 3000 > 1.5 x 1000: normal, nothing sent
    assert balance_deliveries(operator, merchant) == []

    set_threshold(operator, merchant, 2000)  # 3000 <= 1.5 x 2000: approaching
    receiver.wait_for(lambda seen: len(balance_events(receiver)) >= 1)
    [approaching] = balance_events(receiver)
    assert approaching["status"] == "approaching_threshold"
    assert approaching["threshold_in_minor"] == 2000
    assert approaching["current_balance_in_minor"] == 3000
    assert approaching["available_balance_in_minor"] == 3000
    assert approaching["merchant_account_id"] == account_id

    set_threshold(operator, merchant, 3000)  # 3000 <= T: below, one webhook only
    receiver.wait_for(lambda seen: len(balance_events(receiver)) >= 2)
    below = balance_events(receiver)[1]
    assert below["status"] == "below_threshold"
    assert below["threshold_in_minor"] == 3000
    listed = poll(
        lambda: balance_deliveries(operator, merchant),
        lambda items: len(items) == 2 and {i["status"] for i in items} == {"delivered"},
    )
    assert len(listed) == 2


# --- retries, the delivery log and replays -----------------------------------------------------


def test_a_failing_receiver_is_retried_then_the_delivery_is_replayed(
    operator: Operator, server: RunningServer, receiver: WebhookReceiver
) -> None:
    receiver.behaviour = lambda _request, index: Answer(503 if index < 2 else 200)
    merchant = operator.new_merchant()
    set_webhooks(operator, merchant, payouts_uri=receiver.url + "/hook")
    top_up(operator, merchant, 700)

    found = the_delivery(operator, merchant, "topup_received")
    for attempts_done in (1, 2):
        attempts_at_least(operator, found["id"], attempts_done)
        advance(operator, 5)  # past the 1 s, then the 2 s, fast retry
    receiver.wait_for(lambda seen: len(seen) >= 3)
    detail = poll(lambda: delivery(operator, found["id"]), lambda d: d["status"] == "delivered")

    ids = [e["event_id"] for e in receiver.events()]
    assert len(ids) == 3
    assert len(set(ids)) == 1
    assert ids[0] == detail["event_id"]
    assert detail["attempt_count"] == 3
    assert detail["next_attempt_at"] is None
    assert [a["status_code"] for a in detail["attempts"]] == [503, 503, 200]
    assert all(a["error"] is None for a in detail["attempts"])
    assert all(isinstance(a["latency_ms"], int | float) for a in detail["attempts"])
    assert all(a["latency_ms"] >= 0 for a in detail["attempts"])
    times = [parse_time(a["at"]) for a in detail["attempts"]]
    assert times == sorted(times)
    assert times[1] - times[0] >= timedelta(seconds=1)
    assert times[2] - times[1] >= timedelta(seconds=2)

    listed = deliveries(operator, merchant, status="delivered")
    assert [d["id"] for d in listed] == [found["id"]]
    assert set(listed[0]) >= {
        "id",
        "event_id",
        "event_type",
        "merchant_id",
        "uri",
        "status",
        "attempt_count",
        "next_attempt_at",
        "created_at",
    }
    assert listed[0]["merchant_id"] == merchant.merchant_id
    assert deliveries(operator, merchant, status="pending") == []

    # A replay sends the same event again.
    replayed = operator.post(f"/admin/webhook-deliveries/{found['id']}/replay", None)
    assert replayed.status_code == 202, replayed.text
    assert replayed.json()["event_id"] == detail["event_id"]
    receiver.wait_for(lambda seen: len(seen) >= 4)
    assert [e["event_id"] for e in receiver.events()] == [detail["event_id"]] * 4
    after = poll(
        lambda: delivery(operator, found["id"]),
        lambda d: d["status"] == "delivered" and len(d["attempts"]) == 4,
    )
    assert [a["status_code"] for a in after["attempts"]] == [503, 503, 200, 200]
    jwks = httpx.get(f"{server.base_url}/.well-known/jwks").json()
    for request in receiver.snapshot():
        verify(jwks, request)


def test_an_always_failing_receiver_is_discarded_after_72_hours(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    receiver.behaviour = always(500)
    merchant = operator.new_merchant()
    set_webhooks(operator, merchant, payouts_uri=receiver.url + "/down")
    top_up(operator, merchant, 900)
    found = the_delivery(operator, merchant, "topup_received")
    created = parse_time(found["created_at"])

    seen_attempts = 0
    for _ in range(40):
        current = attempts_at_least(operator, found["id"], seen_attempts + 1)
        if current["status"] != "pending":
            break
        seen_attempts = current["attempt_count"]
        assert parse_time(current["next_attempt_at"]) <= created + timedelta(hours=72)
        advance(operator, 7 * 3600)  # every wait is at most 6 h
    else:
        raise AssertionError("the delivery was never discarded")

    assert current["status"] == "discarded"
    assert current["next_attempt_at"] is None
    assert 5 <= current["attempt_count"] <= 30
    assert all(a["status_code"] == 500 for a in current["attempts"])
    assert len(current["attempts"]) == current["attempt_count"]
    # The receiver saw every attempt, all of the same event.
    ids = [e["event_id"] for e in receiver.events()]
    assert ids == [current["event_id"]] * current["attempt_count"]
    assert parse_time(current["attempts"][-1]["at"]) > created + timedelta(hours=72 - 7)
    listed = deliveries(operator, merchant, status="discarded")
    assert [d["id"] for d in listed] == [found["id"]]

    # Replayed once the receiver is back, it is delivered with the same event_id.
    receiver.behaviour = always(200)
    assert operator.post(f"/admin/webhook-deliveries/{found['id']}/replay", None).status_code == 202
    receiver.wait_for(lambda seen: len(seen) == current["attempt_count"] + 1)
    assert receiver.events()[-1]["event_id"] == current["event_id"]
    poll(lambda: delivery(operator, found["id"]), lambda d: d["status"] == "delivered")


def test_a_merchant_without_a_uri_is_skipped_until_replayed(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = operator.new_merchant()
    top_up(operator, merchant, 1234)

    [skipped] = deliveries(operator, merchant, status="skipped")
    assert skipped["event_type"] == "topup_received"
    assert skipped["uri"] is None
    assert skipped["attempt_count"] == 0
    assert skipped["next_attempt_at"] is None
    assert delivery(operator, skipped["id"])["attempts"] == []

    # Replayed with still no URI: it stays skipped.
    still = operator.post(f"/admin/webhook-deliveries/{skipped['id']}/replay", None)
    assert still.status_code == 202
    assert still.json()["status"] == "skipped"

    # Configured now, a replay delivers the same event.
    set_webhooks(operator, merchant, payouts_uri=receiver.url + "/late")
    replayed = operator.post(f"/admin/webhook-deliveries/{skipped['id']}/replay", None)
    assert replayed.status_code == 202
    assert replayed.json()["uri"] == receiver.url + "/late"
    [request] = receiver.wait_for(lambda seen: len(seen) >= 1)
    assert request.path == "/late"
    assert request.json()["event_id"] == skipped["event_id"]
    assert request.json()["event_body"]["amount_in_minor"] == 1234
    done = poll(lambda: delivery(operator, skipped["id"]), lambda d: d["status"] == "delivered")
    assert [a["status_code"] for a in done["attempts"]] == [200]
    assert deliveries(operator, merchant, status="skipped") == []


def test_replaying_an_unknown_delivery_is_404(operator: Operator) -> None:
    answer = operator.post(f"/admin/webhook-deliveries/{uuid.uuid4()}/replay", None)
    assert answer.status_code == 404
    assert operator.get(f"/admin/webhook-deliveries/{uuid.uuid4()}").status_code == 404


def test_the_delivery_log_needs_the_operator_token(server: RunningServer) -> None:
    assert httpx.get(f"{server.base_url}/admin/webhook-deliveries").status_code == 401
    jwks = httpx.get(f"{server.base_url}/.well-known/jwks")
    assert jwks.status_code == 200
    assert jwks.json()["keys"]
