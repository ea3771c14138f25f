"""Payouts API v1 over HTTP against `bankrail serve` (spec 2.2, 2.3, 3.1, 4.1, 6.1, 7; docs/api.md,
§5, §7 "Payouts API v1"). Requests carry `X-SVC-Signature`, made with the public
`truelayer-signing` library (tl_version 2) or as a body-only detached JWS."""

from __future__ import annotations

import base64
import itertools
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from e2e_helpers import assert_invalid, assert_problem, bearer, is_uuid, parse_time, wait_for
from pay_in_helpers import advance_clock
from payout_helpers import SORT_CODE, external_beneficiary, funded_merchant, payout_body

from support.api import MerchantClient, Operator
from support.receiver import Answer, Received, WebhookReceiver

PATH = "/v1/payouts"
SIGNATURE = "X-SVC-Signature"
STAMP_7 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{7}Z$")
DE_IBAN = "DE89370400440532013000"
GB_IBAN = "GB29NWBK60161331926819"
HAPPY = ["payout_authorised", "payout_submitted", "payout_settled"]
STAMP_FIELD = {
    "payout_authorised": "authorised_at",
    "payout_submitted": "submitted_at",
    "payout_settled": "settled_at",
    "payout_rejected": "rejected_at",
    "payout_failed": "failed_at",
}


# --- helpers ----------------------------------------------------------------------------------


@pytest.fixture
def screening(operator: Operator) -> Iterator[None]:
    """Restore the (global) screening list after the test."""
    before = operator.get("/admin/screening-list")
    assert before.status_code == 200, before.text
    yield
    operator.post("/admin/screening-list", {"names": before.json()["names"]})


def _request(
    *,
    amount: int = 1_000,
    currency: str = "EUR",
    iban: str = DE_IBAN,
    name: str = "Jane Doe",
    reference: str = "payout 1",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "transaction_id": str(uuid.uuid4()),
        "beneficiary_name": name,
        "beneficiary_iban": iban,
        "beneficiary_reference": reference,
        "currency": currency,
        "amount_in_minor": amount,
        "context_code": "withdrawal",
        **extra,
    }


def _post(merchant: MerchantClient, body: dict[str, Any]) -> Any:
    return merchant.signed_post(PATH, body, idempotency_key=None, signature_header=SIGNATURE)


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _body_only_signature(merchant: MerchantClient, body: bytes) -> str:
    """A detached JWS over the body alone: header without tl_version, standard signing input
    `BASE64URL(header).BASE64URL(body)`, ES512 with raw r||s."""
    key = serialization.load_pem_private_key(merchant.private_key_pem.encode(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    header = _b64url(json.dumps({"alg": "ES512", "kid": merchant.kid}).encode())
    der = key.sign(f"{header}.{_b64url(body)}".encode(), ec.ECDSA(hashes.SHA512()))
    r, s = decode_dss_signature(der)
    return f"{header}..{_b64url(r.to_bytes(66, 'big') + s.to_bytes(66, 'big'))}"


def _post_body_only(merchant: MerchantClient, content: bytes, signed: bytes | None = None) -> Any:
    return merchant.http.post(
        PATH,
        content=content,
        headers={
            **bearer(merchant.token()),
            "Content-Type": "application/json",
            SIGNATURE: _body_only_signature(merchant, content if signed is None else signed),
        },
    )


def _accept(merchant: MerchantClient, body: dict[str, Any]) -> str:
    answer = _post(merchant, body)
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"transaction_id": body["transaction_id"]}
    return str(body["transaction_id"])


def _events(receiver: WebhookReceiver, transaction_id: str) -> list[dict[str, Any]]:
    return [
        e
        for r in receiver.snapshot()
        if r.path == "/payouts"
        and (e := r.json()).get("event_body", {}).get("transaction_id") == transaction_id
    ]


def _wait_events(
    receiver: WebhookReceiver, transaction_id: str, *expected: str, timeout: float = 20
) -> dict[str, dict[str, Any]]:
    """Wait for every `expected` event type, then return one event per type (duplicates
    share an id)."""
    receiver.wait_for(
        lambda _seen: set(expected) <= {e["event_type"] for e in _events(receiver, transaction_id)},
        timeout=timeout,
    )
    by_type: dict[str, dict[str, Any]] = {}
    for event in _events(receiver, transaction_id):
        seen = by_type.setdefault(event["event_type"], event)
        assert seen["event_id"] == event["event_id"], "one event per status"
    return by_type


def _assert_envelope(event: dict[str, Any], transaction_id: str) -> None:
    assert set(event) == {"event_type", "event_schema_version", "event_id", "event_body"}
    assert event["event_schema_version"] == 1
    assert is_uuid(event["event_id"])
    body = event["event_body"]
    assert body["transaction_id"] == transaction_id
    stamp = body[STAMP_FIELD[event["event_type"]]]
    assert STAMP_7.match(stamp), stamp


def _assert_in_order(by_type: dict[str, dict[str, Any]], order: list[str]) -> None:
    """The events' times are strictly increasing in `order`."""
    assert set(by_type) == set(order), sorted(by_type)
    stamps = [parse_time(by_type[t]["event_body"][STAMP_FIELD[t]]) for t in order]
    assert all(a < b for a, b in itertools.pairwise(stamps)), stamps


def _received_types(receiver: WebhookReceiver, transaction_id: str) -> list[str]:
    """The payout's event types in the order the receiver got them, retries included."""
    return [e["event_type"] for e in _events(receiver, transaction_id)]


def _transactions(merchant: MerchantClient, **params: Any) -> dict[str, Any]:
    answer = merchant.get("/v1/transactions", **params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _payout_records(merchant: MerchantClient, transaction_id: str) -> list[dict[str, Any]]:
    results = _transactions(merchant, type="Payout")["results"]
    return [r for r in results if r["transaction_id"] == transaction_id]


def _balance(merchant: MerchantClient, currency: str) -> tuple[int, int]:
    answer = merchant.get("/v1/balances")
    assert answer.status_code == 200, answer.text
    entry = next(b for b in answer.json()["results"] if b["currency"] == currency)
    return entry["current_balance_in_minor"], entry["available_balance_in_minor"]


# --- accepted and settled ---------------------------------------------------------------------


def test_tl_version_2_signed_payout_settles_with_events_in_order(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, eur=10_000)
    body = _request(amount=2_500)
    transaction_id = _accept(merchant, body)

    by_type = _wait_events(receiver, transaction_id, *HAPPY)
    _assert_in_order(by_type, HAPPY)
    for event in by_type.values():
        _assert_envelope(event, transaction_id)
        assert set(event["event_body"]) == {"transaction_id", STAMP_FIELD[event["event_type"]]}
    assert _balance(merchant, "EUR") == (7_500, 7_500)

    delivered = next(r for r in receiver.snapshot() if b"payout_settled" in r.body)
    assert {"svc-signature", "x-svc-webhook-timestamp"} <= {k.lower() for k in delivered.headers}

    # The transaction record (spec 2.3) agrees with the events.
    records = _payout_records(merchant, transaction_id)
    assert len(records) == 1
    record = records[0]
    assert set(record) == {
        "transaction_id",
        "type",
        "authorised_at",
        "submitted_at",
        "settled_at",
        "beneficiary_name",
        "beneficiary_iban",
        "beneficiary_reference",
        "amount_in_minor",
        "currency",
        "context_code",
        "status",
    }
    assert record["type"] == "payout"
    assert record["status"] == "settled"
    assert record["beneficiary_name"] == "Jane Doe"
    assert record["beneficiary_iban"] == DE_IBAN
    assert record["beneficiary_reference"] == "payout 1"
    assert record["amount_in_minor"] == 2_500
    assert record["currency"] == "EUR"
    assert record["context_code"] == "withdrawal"
    for field in ("authorised_at", "submitted_at", "settled_at"):
        assert STAMP_7.match(record[field]), record[field]
    assert record["authorised_at"] == by_type["payout_authorised"]["event_body"]["authorised_at"]
    assert record["submitted_at"] == by_type["payout_submitted"]["event_body"]["submitted_at"]
    assert record["settled_at"] == by_type["payout_settled"]["event_body"]["settled_at"]


def test_a_payouts_events_wait_for_its_failing_authorised_event(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    """The receiver fails payout A's `payout_authorised` three times: A's submitted and settled
    events are sent only once it is delivered, while payout B's are delivered meanwhile."""
    merchant = funded_merchant(operator, receiver, eur=10_000)
    held = _request(amount=1_000)
    failed: list[str] = []

    def behaviour(request: Received, _index: int) -> Answer:
        event = request.json()
        body = event.get("event_body") or {}
        if (
            event.get("event_type") == "payout_authorised"
            and body.get("transaction_id") == held["transaction_id"]
            and len(failed) < 3
        ):
            failed.append(event["event_id"])
            return Answer(500)
        return Answer(200)

    receiver.behaviour = behaviour
    first = _accept(merchant, held)
    receiver.wait_for(lambda _seen: len(failed) >= 1)

    def authorised_delivery(attempts: int) -> dict[str, Any] | None:
        """A's authorised delivery once `attempts` attempts are recorded."""
        answer = operator.get("/admin/webhook-deliveries", event_id=failed[0])
        assert answer.status_code == 200, answer.text
        [item] = answer.json()["items"]
        return item if item["attempt_count"] >= attempts else None

    wait_for(lambda: authorised_delivery(1), what="the first failed attempt recorded")

    # Another payout of the same merchant, to the same URI, is not held back.
    second = _accept(merchant, _request(amount=2_000))
    by_type = _wait_events(receiver, second, *HAPPY)
    assert _received_types(receiver, second) == HAPPY
    _assert_in_order(by_type, HAPPY)
    assert _received_types(receiver, first) == ["payout_authorised"]

    # The retries, on the service clock (1 s, 2 s, then 4 s after each failure).
    for attempts in (1, 2, 3):
        pending = wait_for(lambda n=attempts: authorised_delivery(n), what=f"attempt {attempts}")
        assert pending["status"] == "pending", pending
        assert _received_types(receiver, first) == ["payout_authorised"] * attempts
        advance_clock(operator, 5)
    by_type = _wait_events(receiver, first, *HAPPY)
    assert wait_for(lambda: authorised_delivery(4), what="the delivery")["status"] == "delivered"
    assert _received_types(receiver, first) == ["payout_authorised"] * 4 + HAPPY[1:]
    _assert_in_order(by_type, HAPPY)
    assert set(failed) == {by_type["payout_authorised"]["event_id"]}


def test_body_only_jws_payout_is_accepted(operator: Operator, receiver: WebhookReceiver) -> None:
    merchant = funded_merchant(operator, receiver, gbp=5_000)
    body = _request(currency="GBP", iban=GB_IBAN, amount=1_234, context_code="service_payment")
    content = json.dumps(body).encode()
    answer = _post_body_only(merchant, content)
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"transaction_id": body["transaction_id"]}
    by_type = _wait_events(receiver, body["transaction_id"], *HAPPY)
    _assert_in_order(by_type, HAPPY)
    record = _payout_records(merchant, body["transaction_id"])[0]
    assert record["context_code"] == "service_payment"
    assert record["currency"] == "GBP"
    assert _balance(merchant, "GBP") == (3_766, 3_766)


def test_body_only_jws_over_another_body_is_401(operator: Operator) -> None:
    merchant = funded_merchant(operator, eur=5_000)
    body = _request()
    content = json.dumps(body).encode()
    tampered = json.dumps({**body, "amount_in_minor": 4_999}).encode()
    answer = _post_body_only(merchant, tampered, signed=content)
    problem = assert_problem(answer, 401, "Unauthenticated")
    assert "Invalid request signature" in problem["detail"]
    assert _balance(merchant, "EUR") == (5_000, 5_000)


def test_unsigned_payout_is_401(operator: Operator) -> None:
    merchant = funded_merchant(operator, eur=5_000)
    answer = merchant.http.post(PATH, json=_request(), headers=bearer(merchant.token()))
    problem = assert_problem(answer, 401, "Unauthenticated")
    assert "Invalid request signature" in problem["detail"]


def test_context_code_defaults_to_withdrawal(operator: Operator) -> None:
    merchant = funded_merchant(operator, eur=5_000)
    body = _request()
    del body["context_code"]
    transaction_id = _accept(merchant, body)
    record = wait_for(lambda: _payout_records(merchant, transaction_id), what="record")[0]
    assert record["context_code"] == "withdrawal"


# --- idempotency by transaction_id ------------------------------------------------------------


def test_repeat_with_the_same_body_is_202_and_creates_nothing(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, eur=10_000)
    body = _request(amount=1_000)
    transaction_id = _accept(merchant, body)
    again = _post(merchant, body)
    assert again.status_code == 202, again.text
    assert again.json() == {"transaction_id": transaction_id}
    _wait_events(receiver, transaction_id, "payout_settled")
    # Late repeats, also with the same fields in another order, still create nothing.
    assert _post(merchant, body).status_code == 202
    reordered = dict(reversed(list(body.items())))
    assert _post(merchant, reordered).status_code == 202
    assert len(_payout_records(merchant, transaction_id)) == 1
    assert _balance(merchant, "EUR") == (9_000, 9_000)
    kinds = [e["event_type"] for e in _events(receiver, transaction_id)]
    assert sorted(set(kinds)) == sorted(HAPPY)


def test_same_transaction_id_with_another_body_is_409(operator: Operator) -> None:
    merchant = funded_merchant(operator, eur=10_000)
    body = _request(amount=1_000)
    transaction_id = _accept(merchant, body)
    answer = _post(merchant, {**body, "amount_in_minor": 2_000})
    assert_problem(answer, 409, "Conflict")
    answer = _post(merchant, {**body, "beneficiary_reference": "other"})
    assert_problem(answer, 409, "Conflict")
    assert len(_payout_records(merchant, transaction_id)) == 1
    _current, available = _balance(merchant, "EUR")
    assert available == 9_000


def test_transaction_ids_are_per_merchant(operator: Operator) -> None:
    """Two merchants may use the same transaction_id without colliding."""
    first = funded_merchant(operator, eur=5_000)
    second = funded_merchant(operator, eur=5_000)
    body = _request(amount=100)
    _accept(first, body)
    _accept(second, {**body, "amount_in_minor": 200})
    assert len(_payout_records(first, body["transaction_id"])) == 1
    assert len(_payout_records(second, body["transaction_id"])) == 1


# --- rejections and failures ------------------------------------------------------------------


def test_insufficient_funds_is_accepted_then_rejected(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, eur=999)
    transaction_id = _accept(merchant, _request(amount=1_000))
    by_type = _wait_events(receiver, transaction_id, "payout_rejected")
    assert set(by_type) == {"payout_rejected"}  # and no payout_authorised
    event = by_type["payout_rejected"]
    _assert_envelope(event, transaction_id)
    assert event["event_body"]["reason"] == "insufficient_funds"
    assert set(event["event_body"]) == {"transaction_id", "rejected_at", "reason"}
    assert _balance(merchant, "EUR") == (999, 999)
    record = _payout_records(merchant, transaction_id)[0]
    assert record["status"] == "rejected"
    assert record["authorised_at"] is None
    assert record["settled_at"] is None


@pytest.mark.usefixtures("screening")
def test_aml_hit_is_rejected(operator: Operator, receiver: WebhookReceiver) -> None:
    assert operator.post("/admin/screening-list", {"names": ["Jöhn  SMITH"]}).status_code == 200
    merchant = funded_merchant(operator, receiver, eur=5_000)
    transaction_id = _accept(merchant, _request(amount=1_000, name="john smith"))
    by_type = _wait_events(receiver, transaction_id, "payout_rejected")
    assert set(by_type) == {"payout_rejected"}
    _assert_envelope(by_type["payout_rejected"], transaction_id)
    assert by_type["payout_rejected"]["event_body"]["reason"] == "aml_check_failed"
    assert _balance(merchant, "EUR") == (5_000, 5_000)


@pytest.mark.usefixtures("screening")
@pytest.mark.parametrize(
    "name",
    [
        "Evil\u200b Corp",  # zero-width space
        "Ev\u200dil Corp",  # zero-width joiner
        "\u0415vil Corp",  # Cyrillic capital Ie
        "Ev\u00adil Corp",  # soft hyphen
        "Evil Corp.",  # punctuation
    ],
)
def test_a_look_alike_of_a_screened_name_is_rejected(
    operator: Operator, receiver: WebhookReceiver, name: str
) -> None:
    assert operator.post("/admin/screening-list", {"names": ["Evil Corp"]}).status_code == 200
    merchant = funded_merchant(operator, receiver, eur=5_000)
    transaction_id = _accept(merchant, _request(amount=1_000, name=name))
    by_type = _wait_events(receiver, transaction_id, "payout_rejected")
    assert set(by_type) == {"payout_rejected"}
    assert by_type["payout_rejected"]["event_body"]["reason"] == "aml_check_failed"
    assert _balance(merchant, "EUR") == (5_000, 5_000)
    assert _payout_records(merchant, transaction_id)[0]["status"] == "rejected"


def test_scheme_error_is_authorised_submitted_then_failed(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, eur=5_000)
    transaction_id = _accept(merchant, _request(amount=1_000, reference="fail:scheme_error"))
    failed = ["payout_authorised", "payout_submitted", "payout_failed"]
    by_type = _wait_events(receiver, transaction_id, *failed)
    _assert_in_order(by_type, failed)
    for event in by_type.values():
        _assert_envelope(event, transaction_id)
    assert by_type["payout_failed"]["event_body"]["reason"] == "scheme_error"
    assert set(by_type["payout_failed"]["event_body"]) == {"transaction_id", "failed_at", "reason"}
    assert _balance(merchant, "EUR") == (5_000, 5_000)  # the hold was released
    record = _payout_records(merchant, transaction_id)[0]
    assert record["status"] == "failed"
    assert record["settled_at"] is None


def test_invalid_iban_outcome_is_reported_as_scheme_error(
    operator: Operator, receiver: WebhookReceiver
) -> None:
    merchant = funded_merchant(operator, receiver, eur=5_000)
    transaction_id = _accept(merchant, _request(amount=1_000, reference="fail:invalid_iban"))
    by_type = _wait_events(receiver, transaction_id, "payout_failed")
    assert by_type["payout_failed"]["event_body"]["reason"] == "scheme_error"


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"beneficiary_name": "N" * 19}, "beneficiary_name"),
        ({"beneficiary_reference": "R" * 19}, "beneficiary_reference"),
        ({"beneficiary_iban": "DE89370400440532013001"}, "beneficiary_iban"),
        ({"beneficiary_iban": "not an iban"}, "beneficiary_iban"),
        ({"amount_in_minor": 0}, "amount_in_minor"),
        ({"amount_in_minor": "100"}, "amount_in_minor"),
        ({"transaction_id": "not-a-uuid"}, "transaction_id"),
        ({"context_code": "gift"}, "context_code"),
        ({"currency": "USD"}, "currency"),
        ({"currency": "GBP"}, "beneficiary_iban"),  # GBP to a DE IBAN is cross-currency
    ],
    ids=[
        "name-19",
        "reference-19",
        "iban-checksum",
        "iban-garbage",
        "amount-zero",
        "amount-string",
        "transaction-id",
        "context-code",
        "currency-without-account",
        "cross-currency",
    ],
)
def test_invalid_request_is_400(operator: Operator, changes: dict[str, Any], field: str) -> None:
    merchant = funded_merchant(operator, eur=5_000, gbp=5_000)
    answer = _post(merchant, {**_request(), **changes})
    assert_invalid(answer, field)
    assert _balance(merchant, "EUR") == (5_000, 5_000)
    assert _balance(merchant, "GBP") == (5_000, 5_000)


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        pytest.param({"beneficiary_name": "N" * 19}, "beneficiary_name", id="schema-error"),
        pytest.param(
            {"beneficiary_iban": "DE89370400440532013001"},
            "beneficiary_iban",
            id="iban-checksum",
        ),
        pytest.param(
            {"currency": "GBP"},
            "beneficiary_iban",
            id="cross-currency",
        ),
    ],
)
def test_corrected_retry_after_a_400_is_accepted(
    operator: Operator, bad: dict[str, Any], field: str
) -> None:
    """A 400 creates no payout, so the transaction_id is still free for the fixed request."""
    merchant = funded_merchant(operator, eur=5_000, gbp=5_000)
    body = _request(amount=100)
    assert_invalid(_post(merchant, {**body, **bad}), field)
    _accept(merchant, body)
    assert len(_payout_records(merchant, body["transaction_id"])) == 1


def test_names_and_references_of_18_characters_are_accepted(operator: Operator) -> None:
    merchant = funded_merchant(operator, eur=5_000)
    _accept(merchant, _request(name="N" * 18, reference="R" * 18))


@pytest.mark.parametrize(
    "missing",
    [
        "transaction_id",
        "beneficiary_name",
        "beneficiary_iban",
        "beneficiary_reference",
        "currency",
        "amount_in_minor",
    ],
)
def test_missing_field_is_400(operator: Operator, missing: str) -> None:
    merchant = funded_merchant(operator, eur=5_000)
    body = _request()
    del body[missing]
    assert_invalid(_post(merchant, body), missing)


def test_all_fields_missing_names_each_of_them(operator: Operator) -> None:
    merchant = funded_merchant(operator, eur=5_000)
    assert_invalid(
        _post(merchant, {}),
        "transaction_id",
        "beneficiary_name",
        "beneficiary_iban",
        "beneficiary_reference",
        "currency",
        "amount_in_minor",
    )


# --- GET /v1/transactions ---------------------------------------------------------------------


def test_transaction_filters_and_pagination(operator: Operator, receiver: WebhookReceiver) -> None:
    merchant = funded_merchant(operator, receiver, eur=5_000, gbp=3_000)
    eur_payout = _accept(merchant, _request(amount=700))
    gbp_payout = _accept(merchant, _request(amount=300, currency="GBP", iban=GB_IBAN))
    for transaction_id in (eur_payout, gbp_payout):
        _wait_events(receiver, transaction_id, "payout_settled")

    everything = _transactions(merchant)["results"]
    assert "next_cursor" not in _transactions(merchant)
    assert [r["type"] for r in everything].count("topup") == 2
    assert [r["type"] for r in everything].count("payout") == 2
    # Ascending by time.
    first_stamps = [r.get("settled_at") or r.get("authorised_at") for r in everything]
    assert all(first_stamps)

    payouts = _transactions(merchant, type="Payout")["results"]
    assert {r["transaction_id"] for r in payouts} == {eur_payout, gbp_payout}
    assert all(r["type"] == "payout" and r["status"] == "settled" for r in payouts)

    topups = _transactions(merchant, type="Topup")["results"]
    assert len(topups) == 2
    assert all(r["type"] == "topup" for r in topups)
    for topup in topups:
        assert STAMP_7.match(topup["settled_at"]), topup
        assert topup["status"] == "settled"

    eur_only = _transactions(merchant, currency="EUR")["results"]
    assert {r["currency"] for r in eur_only} == {"EUR"}
    assert len(eur_only) == 2
    eur_payouts = _transactions(merchant, currency="EUR", type="Payout")["results"]
    assert [r["transaction_id"] for r in eur_payouts] == [eur_payout]

    # Pagination: limit 1, following next_cursor, yields the same list.
    pages: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(10):
        params: dict[str, Any] = {"limit": 1}
        if cursor:
            params["cursor"] = cursor
        page = _transactions(merchant, **params)
        assert len(page["results"]) <= 1
        pages.extend(page["results"])
        cursor = page.get("next_cursor")
        if not cursor:
            break
    assert [r["transaction_id"] for r in pages] == [r["transaction_id"] for r in everything]
    two = _transactions(merchant, limit=2)
    assert len(two["results"]) == 2
    assert two["next_cursor"]


def test_from_and_to_are_inclusive(operator: Operator) -> None:
    merchant = funded_merchant(operator)
    account = merchant.accounts["EUR"]
    for amount in (100, 200, 300):
        assert operator.top_up(account, amount).status_code == 201
    topups = _transactions(merchant, type="Topup")["results"]
    assert [t["amount_in_minor"] for t in topups] == [100, 200, 300]
    first, middle, last = (t["settled_at"] for t in topups)
    assert parse_time(first) < parse_time(middle) < parse_time(last)

    def amounts(**params: Any) -> list[int]:
        return [r["amount_in_minor"] for r in _transactions(merchant, **params)["results"]]

    assert amounts(**{"from": middle, "to": middle}) == [200]
    assert amounts(**{"from": first, "to": middle}) == [100, 200]
    assert amounts(**{"from": middle}) == [200, 300]
    assert amounts(to=middle) == [100, 200]
    assert amounts(**{"from": last, "to": first}) == []


def test_bad_transaction_queries_are_400(operator: Operator) -> None:
    merchant = funded_merchant(operator)
    for params in (
        {"type": "Refund"},
        {"limit": 0},
        {"limit": 10_001},
        {"from": "yesterday"},
        {"currency": "eur"},
        {"cursor": "not-a-cursor"},
    ):
        answer = merchant.get("/v1/transactions", **params)
        assert_problem(answer, 400, "Invalid Parameters")


def test_transactions_are_only_the_callers(operator: Operator) -> None:
    mine = funded_merchant(operator, eur=100)
    theirs = funded_merchant(operator, eur=5_000)
    _accept(theirs, _request(amount=100))
    results = _transactions(mine)["results"]
    assert [r["amount_in_minor"] for r in results] == [100]
    assert all(r["type"] == "topup" for r in results)


# Spec 2.3 types these fields of a v1 transaction record as strings.
V1_STRING_FIELDS = (
    "transaction_id",
    "type",
    "beneficiary_name",
    "beneficiary_iban",
    "beneficiary_reference",
    "currency",
    "context_code",
    "status",
)


def test_v3_payouts_are_listed_by_the_v3_account_list_only(operator: Operator) -> None:
    """/v1/transactions lists what was paid through /v1/payouts (and top-ups): a v3 payout
    has no context_code, and one to a sort code no IBAN, which every v1 record has."""
    merchant = funded_merchant(operator, gbp=10_000)
    v1_payout = _accept(merchant, _request(amount=300, currency="GBP", iban=GB_IBAN))
    v3_payouts = []
    for identifier in (SORT_CODE, {"type": "iban", "iban": GB_IBAN}):
        body = payout_body(merchant, "GBP", 200, external_beneficiary(identifier))
        answer = merchant.signed_post("/v3/payouts", body)
        assert answer.status_code == 202, answer.text
        v3_payouts.append(answer.json()["id"])

    for params in ({}, {"type": "Payout"}, {"currency": "GBP"}):
        payouts = [r for r in _transactions(merchant, **params)["results"] if r["type"] == "payout"]
        assert [r["transaction_id"] for r in payouts] == [v1_payout], params
        for record in payouts:
            for field in V1_STRING_FIELDS:
                assert isinstance(record[field], str), (field, record)
    # The v3 payouts are there, in the merchant account's list, as is the v1 one.
    path = f"/v3/merchant-accounts/{merchant.accounts['GBP']['id']}/transactions"
    items = merchant.get(path, type="payout").json()["items"]
    assert {item["id"] for item in items} >= set(v3_payouts)
    assert len(items) == 3
