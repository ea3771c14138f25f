"""The one redaction rule (core/redaction.py), applied to every body the official SDKs send
(tests/fixtures/sdk-bodies) and to the headers of a signed request: no secret and no personal
datum survives, and everything else is kept as it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bankrail.core.logs import redact as log_redact
from bankrail.core.redaction import (
    MASKED,
    REDACTED,
    redact,
    redact_headers,
    redact_json,
    redact_value,
)

BODIES = sorted((Path(__file__).parents[2] / "fixtures" / "sdk-bodies").glob("*.json"))
SECRET_NAMES = {"client_secret", "password", "token", "access_token", "signature", "private_key"}
PERSONAL_NAMES = {
    "account_holder_name",
    "name",
    "email",
    "phone",
    "date_of_birth",
    "address",
    "iban",
    "account_number",
    "sort_code",
    "address_line1",
}


def _leaves(value: Any, names: set[str], inside: bool = False) -> Iterator[str]:
    """Every text under one of `names`, at any depth."""
    if isinstance(value, dict):
        for name, item in value.items():
            yield from _leaves(item, names, inside or name in names)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item, names, inside)
    elif inside and isinstance(value, str) and value:
        yield value


def _kept_leaves(value: Any) -> Iterator[str]:
    """Every text directly under a name outside the secret and personal ones."""
    if isinstance(value, dict):
        for name, item in value.items():
            if name in SECRET_NAMES | PERSONAL_NAMES:
                continue
            if isinstance(item, str):
                yield item
            else:
                yield from _kept_leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _kept_leaves(item)


def test_the_fixtures_are_there() -> None:
    assert len(BODIES) > 50


@pytest.mark.parametrize("path", BODIES, ids=lambda path: path.stem)
def test_no_secret_or_personal_value_of_an_sdk_body_survives(path: Path) -> None:
    body = json.loads(path.read_text())["body"]
    if body is None:
        return
    redacted = redact_value(body)
    text = json.dumps(redacted, ensure_ascii=False)
    # A value also sent under a name the rule keeps (a company's registration number that
    # happens to equal an account number) may be seen there.
    kept = set(_kept_leaves(body))
    for value in _leaves(body, SECRET_NAMES | PERSONAL_NAMES):
        if len(value) > 4 and value not in kept:
            assert f'"{value}"' not in text, (value, path.name)
    # Amounts, currencies, types and references stay as sent.
    for name in ("amount_in_minor", "currency", "reference", "type"):
        if name in body:
            assert redacted[name] == body[name]
    assert body == json.loads(path.read_text())["body"], "the rule changed its input"


def test_the_rule_field_by_field() -> None:
    body = {
        "client_secret": "cs-1",
        "client_id": "sandbox-abc",
        "nested": {"access_token": "t", "refresh_token": None, "signing_key": "k"},
        "password": ["a"],
        "beneficiary": {
            "account_holder_name": "Jane Doe",
            "account_identifier": {
                "type": "sort_code_account_number",
                "sort_code": "040004",
                "account_number": "12345678",
            },
            "verify_name": True,
        },
        "remitter": {
            "account_identifier": {"type": "iban", "iban": "GB29NWBK60161331926819"},
            "address": {"city": "London"},
        },
        "user": {"email": "j@example.com", "phone": "+447700900000", "date_of_birth": "1990-01-01"},
        "amount_in_minor": 100,
        "note": "Bearer abc.def",
    }
    assert redact_value(body) == {
        "client_secret": REDACTED,
        "client_id": "sandbox-abc",
        "nested": {"access_token": REDACTED, "refresh_token": None, "signing_key": REDACTED},
        "password": REDACTED,
        "beneficiary": {
            "account_holder_name": MASKED,
            "account_identifier": {
                "type": "sort_code_account_number",
                "sort_code": MASKED,
                "account_number": MASKED,  # 8 characters: too short to show the last four
            },
            "verify_name": True,
        },
        "remitter": {
            "account_identifier": {"type": "iban", "iban": "••••6819"},
            "address": MASKED,
        },
        "user": {"email": MASKED, "phone": MASKED, "date_of_birth": MASKED},
        "amount_in_minor": 100,
        "note": f"Bearer {REDACTED}",
    }


def test_numbers_under_personal_names_are_personal_data() -> None:
    # A client may send an account number or a sort code as a JSON number: the route refuses
    # it, the request log keeps the request all the same.
    assert redact_value(
        {
            "sort_code": 400004,
            "account_number": 31926819,
            "iban": 29601613319268190000,
            "phone": 447700900000,
            "verify_name": False,
        }
    ) == {
        "sort_code": MASKED,
        "account_number": MASKED,
        "iban": "••••0000",
        "phone": MASKED,
        "verify_name": False,
    }


def test_an_escaped_credential_hint_does_not_skip_the_search() -> None:
    # `\u0074oken` is `token`: the raw text holds no hint, the parsed text does.
    raw = b'{"note": "access_\\u0074oken=abc123"}'
    assert redact_json(raw) == {"note": f"access_token={REDACTED}"}


def test_headers_of_a_signed_request() -> None:
    raw = [
        (b"Authorization", b"Bearer eyJhbGciOi.eyJzdWIi.c2ln"),
        (b"Svc-Signature", b"eyJhbGciOiJFUzUxMiJ9..sig"),
        (b"X-SVC-Signature", b"eyJhbGciOiJFUzUxMiJ9..sig"),
        (b"Cookie", b"console_session=abc"),
        (b"Proxy-Authorization", b"Basic dXNlcjpwYXNz"),
        (b"X-Forwarded-For", b"203.0.113.7"),
        (b"Idempotency-Key", b"k-1"),
        (b"Content-Type", b"application/json"),
        (b"Accept", b"a"),
        (b"Accept", b"b"),
    ]
    assert redact_headers(raw) == {
        "authorization": REDACTED,
        "svc-signature": REDACTED,
        "x-svc-signature": REDACTED,
        "cookie": REDACTED,
        "proxy-authorization": REDACTED,
        "x-forwarded-for": MASKED,
        "idempotency-key": "k-1",
        "content-type": "application/json",
        "accept": "a, b",
    }


def test_a_payments_authorization_flow_is_kept_for_the_developer_to_read() -> None:
    # What the flow asks for next is why a developer opens the log; only credentials within
    # it (the resource token in the hosted page's fragment) go.
    token = "eyJhbGciOiJFUzUxMiJ9.eyJzdWIiOiJwYXkifQ.c2lnbmF0dXJl"
    answer = {
        "status": "authorizing",
        "authorization_flow": {
            "actions": {"next": {"type": "redirect", "uri": "https://bank.example/auth?x=1"}}
        },
        "resource_token": token,
    }
    kept = redact_value(answer)
    assert kept["authorization_flow"] == answer["authorization_flow"]
    assert kept["resource_token"] == REDACTED


def test_the_process_log_uses_the_same_text_rule() -> None:
    assert log_redact is redact
    assert redact("client_secret=abc&x=1") == f"client_secret={REDACTED}&x=1"
