"""The request bodies the official SDKs send (tests/fixtures/sdk-bodies, copied from the
contract's `spec/sdk-bodies`), with their placeholders replaced by real ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BODIES = Path(__file__).resolve().parents[1] / "fixtures" / "sdk-bodies"
PAYMENT_ID = "00000000-0000-4000-8000-000000000003"
MANDATE_ID = "00000000-0000-4000-8000-000000000004"


def sdk_names(pattern: str) -> list[str]:
    """The names (without `.json`) of the SDK bodies matching a glob pattern."""
    return sorted(path.stem for path in BODIES.glob(f"{pattern}.json"))


def sdk_request(name: str, **ids: str) -> tuple[str, Any]:
    """The path and body of one SDK request, its placeholder ids replaced by `ids`
    (`payment`, `mandate`)."""
    text = (BODIES / f"{name}.json").read_text()
    for key, placeholder in (("payment", PAYMENT_ID), ("mandate", MANDATE_ID)):
        if key in ids:
            text = text.replace(placeholder, ids[key])
    request = json.loads(text)
    return str(request["path"]), request["body"]
