"""The forms the mock providers ask the payer to fill in (docs/api.md, "Forms"), in the real
API's input shape: `text`, `select` and `text_with_image` inputs with `display_text` objects,
formats, lengths, regexes, images and options.

`mock-payments-de-embedded` asks three forms in turn (the payer's details and credentials, the
way to receive the SCA code, the code itself: its value picks the outcome as the mock bank's
usernames do); the redirect providers with additional inputs ask one form before the redirect.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["FORMS", "SCA_CODE_INPUT", "form_errors", "forms_of"]

Input = dict[str, Any]

SCA_CODE_INPUT = "embedded-auth-flow-sms-input"

# A small picture of a phone showing a code, as the real API sends for `text_with_image`.
_SMS_IMAGE = (
    "PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIHZpZXdCb3g9IjAgMCA0OCA0OCI+PHJlY3Qg"
    "eD0iMTIiIHk9IjQiIHdpZHRoPSIyNCIgaGVpZ2h0PSI0MCIgcng9IjQiIGZpbGw9IiMzMzMiLz48cmVjdCB4PSIx"
    "NSIgeT0iMTAiIHdpZHRoPSIxOCIgaGVpZ2h0PSIyNCIgZmlsbD0iI2ZmZiIvPjwvc3ZnPg=="
)


def _text(
    id_: str, label: str, fmt: str, regex: str, lengths: tuple[int, int], *, sensitive: bool = False
) -> Input:
    """A mandatory text input of `lengths` characters whose value must match `regex`."""
    low, high = lengths
    return {
        "type": "text",
        "id": id_,
        "mandatory": True,
        "display_text": {"key": f"{id_}.display_text", "default": label},
        "format": fmt,
        "sensitive": sensitive,
        "min_length": low,
        "max_length": high,
        "regexes": [
            {
                "regex": regex,
                "message": {"key": f"{id_}.regex", "default": f"{label}: invalid value"},
            }
        ],
    }


_NAME = _text("remitter-name", "Account holder name", "any", r"^.{1,140}$", (1, 140))

FORMS: dict[str, tuple[tuple[Input, ...], ...]] = {
    "mock-payments-de-embedded": (
        (
            _NAME,
            _text("remitter-iban", "IBAN", "iban", r"^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$", (15, 34)),
            _text("psu-id", "Username at the bank", "any", r"^.{1,200}$", (1, 200)),
            _text("psu-password", "Password", "any", r"^.{1,200}$", (1, 200), sensitive=True),
        ),
        (
            {
                "type": "select",
                "id": "embedded-auth-flow-sca-select",
                "mandatory": True,
                "display_text": {
                    "key": "embedded-auth-flow-sca-select.display_text",
                    "default": "How do you want to receive your code?",
                },
                "options": [{"id": "Sms", "display_text": {"key": "sms", "default": "SMS"}}],
            },
        ),
        (
            {
                **_text(SCA_CODE_INPUT, "Code from the SMS", "any", r"^.{1,200}$", (1, 200)),
                "type": "text_with_image",
                "description": {
                    "key": f"{SCA_CODE_INPUT}.description",
                    "default": "test_executed, test_authorisation_failed or "
                    "test_execution_rejected pick the outcome; any other code succeeds",
                },
                "image": {"type": "base64", "data": _SMS_IMAGE, "media_type": "image/svg+xml"},
            },
        ),
    ),
    "mock-payments-pl-redirect": (
        (_NAME, _text("remitter-nrb", "NRB account number", "numerical", r"^[0-9]{26}$", (26, 26))),
    ),
    "mock-payments-no-redirect": (
        (
            _NAME,
            _text("remitter-bban", "Account number (BBAN)", "numerical", r"^[0-9]{11}$", (11, 11)),
        ),
    ),
    "mock-payments-de-redirect-additional-input-text": (
        (
            _text(
                "psu-branch-code", "Branch code", "numerical", r"^[0-9]{3}$", (3, 3), sensitive=True
            ),
            _text(
                "psu-account-number",
                "Account number",
                "numerical",
                r"^[0-9]{1,10}$",
                (1, 10),
                sensitive=True,
            ),
            _text(
                "psu-sub-account", "Sub-account", "numerical", r"^[0-9]{2}$", (2, 2), sensitive=True
            ),
        ),
    ),
}


def forms_of(provider_id: str) -> tuple[tuple[Input, ...], ...]:
    """The forms the provider asks, in order; none for a plain redirect provider."""
    return FORMS.get(provider_id, ())


def form_errors(form: tuple[Input, ...], answers: dict[str, str]) -> dict[str, list[str]]:
    """What is wrong with the answers to one form, by field (`inputs.<id>`); empty when they
    fill every mandatory input, match its regexes and choose offered options."""
    errors: dict[str, list[str]] = {}
    known = {item["id"] for item in form}
    for name in answers:
        if name not in known:
            errors[f"inputs.{name}"] = ["not an input of this form"]
    for item in form:
        value = answers.get(item["id"])
        field = f"inputs.{item['id']}"
        if value is None or value == "":
            if item["mandatory"]:
                errors[field] = ["required"]
            continue
        if item["type"] == "select":
            if value not in {option["id"] for option in item["options"]}:
                errors[field] = ["must be the id of one of the options"]
            continue
        for rule in item["regexes"]:
            if re.fullmatch(rule["regex"], value) is None:
                errors[field] = [rule["message"]["default"]]
    return errors
