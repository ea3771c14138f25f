"""Request bodies the official SDKs send (copied from the contract's `spec/sdk-bodies/`),
with their placeholders filled in for a test merchant."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.api import MerchantClient

BODIES = Path(__file__).parents[1] / "fixtures" / "sdk-bodies"
GBP_ACCOUNT = "00000000-0000-4000-8000-000000000001"
EUR_ACCOUNT = "00000000-0000-4000-8000-000000000002"


def sdk_request(name: str, merchant: MerchantClient, **replace: str) -> tuple[str, Any]:
    """The path and body of `tests/fixtures/sdk-bodies/<name>.json` for `merchant`: its GBP and EUR
    account ids in place of the placeholders, and each `replace` key's text by its value."""
    text = (BODIES / f"{name}.json").read_text()
    for currency, placeholder in (("GBP", GBP_ACCOUNT), ("EUR", EUR_ACCOUNT)):
        if currency in merchant.accounts:
            text = text.replace(placeholder, merchant.accounts[currency]["id"])
    for old, new in replace.items():
        text = text.replace(old, new)
    request = json.loads(text)
    return str(request["path"]), request["body"]
