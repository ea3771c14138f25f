"""The one redaction rule of everything Bankrail keeps or writes about a request: the process
log (core/logs.py) and the request log (http/request_log.py). docs/operations.md, "Redaction",
states it for operators.

The rule, by field name (a JSON key or a header name, compared case-insensitively with `-`
read as `_`):

- secrets: `Authorization`, cookies (`Cookie`, `Set-Cookie`), the request signature headers
  (`Svc-Signature`, `X-SVC-Signature`) and any name containing `signature`, `secret`,
  `token`, `password`, or being `key` or ending in `_key` (but `Idempotency-Key`, which is not a
  secret and is what a developer looks a request up by) have their value replaced by
  `[redacted]`, whatever it was (an object or a list too);
- personal data: names (`name` and any name ending in `_name`: `account_holder_name`, a
  remitter's or beneficiary's name...), `date_of_birth`, `sort_code`, and any name containing
  `address`, `email` or `phone` (a whole address object included) are replaced by `[masked]`; the
  account numbers `iban`, `account_number`, `bban` and `nrb` keep only their last four
  characters (`••••5555`), enough to tell two accounts apart (a number under such a name as
  well: `"account_number": 12345678901`); a true/false under such a name (`verify_name:
  true`) is no personal data and stays, a number (`"sort_code": 400004`) is masked;
- every other text, in a field or free-standing (a log line), is searched for what looks like a
  credential: `client_secret=…`-style pairs, `Bearer …`, and JWTs are replaced by
  `[redacted]` (`redact`).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

__all__ = ["MASKED", "REDACTED", "redact", "redact_headers", "redact_json", "redact_value"]

REDACTED = "[redacted]"
MASKED = "[masked]"

_SECRET_PATTERNS = (
    # key=value pairs in forms, query strings and reprs
    re.compile(
        r"(?i)\b(client_secret|access_token|resource_token|refresh_token|admin_token|"
        r"password|secret|token)([\"']?\s*[=:]\s*[\"']?)([^\s&\"',;}]+)"
    ),
    re.compile(r"(?i)\b(bearer)(\s+)([A-Za-z0-9._~+/=-]+)"),
    re.compile(r"()()\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*"),
)

# Every pattern above needs one of "token", "secret", "password", "bearer" (case folded), or
# a JWT's "eyJ": text with none of them is returned as it is, without running the patterns.


def _may_hold_credentials(text: str) -> bool:
    """False when no pattern can match `text` (most text), found without running them."""
    if "eyJ" in text:
        return True
    folded = text.lower()
    return "token" in folded or "secret" in folded or "password" in folded or "bearer" in folded


def redact(text: str) -> str:
    """`text` with every credential-like value replaced by `[redacted]`."""
    if not _may_hold_credentials(text):
        return text
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return text


_SECRET_PARTS = ("cookie", "signature", "secret", "token", "password")
# The credential headers by their whole name: a payment's `authorization_flow` (its next
# action, what a developer reads the log for) is not one.
_SECRET_NAMES = frozenset({"authorization", "proxy_authorization"})
_NOT_SECRET = frozenset({"idempotency_key"})
# The client's address, as a proxy passes it on, is personal data too.
_PERSONAL = frozenset(
    {"name", "date_of_birth", "sort_code", "x_forwarded_for", "forwarded", "x_real_ip"}
)
_PERSONAL_PARTS = ("address", "email", "phone")
_ACCOUNT_NUMBERS = frozenset({"iban", "account_number", "bban", "nrb"})
_KEEP, _SECRET, _MASK, _LAST_FOUR = 0, 1, 2, 3
_kinds: dict[str, int] = {}


def _kind(name: str) -> int:
    """What the rule does to the value of a field or header named `name`."""
    known = _kinds.get(name)
    if known is not None:
        return known
    folded = name.lower().replace("-", "_")
    kind = _KEEP
    if folded not in _NOT_SECRET and (
        folded in _SECRET_NAMES
        or any(part in folded for part in _SECRET_PARTS)
        or folded == "key"
        or folded.endswith("_key")
    ):
        kind = _SECRET
    elif folded in _ACCOUNT_NUMBERS:
        kind = _LAST_FOUR
    elif (
        folded in _PERSONAL
        or folded.endswith("_name")
        or any(part in folded for part in _PERSONAL_PARTS)
    ):
        kind = _MASK
    if len(_kinds) < 10_000:  # names come from clients: the memo stays bounded
        _kinds[name] = kind
    return kind


def _last_four(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    return "••••" + text[-4:] if len(text) > 8 else MASKED


def redact_value(value: Any) -> Any:
    """A JSON value (as `orjson.loads` reads it) with the rule applied to every field, at any
    depth; a new value, `value` itself is not changed."""
    return _redacted(value, scan=True)


def redact_json(raw: bytes) -> Any:
    """The JSON document `raw`, parsed, with the rule applied (as `redact_value`); raises
    orjson.JSONDecodeError when it is not JSON. Text is searched for credentials only when
    the document holds a hint of one (most do not)."""
    value = orjson.loads(raw)
    # An escape (`\u0074oken`) hides a hint from the raw text: such a document is searched.
    scan = b"\\u" in raw or _may_hold_credentials(raw.decode("utf-8", "replace"))
    return _redacted(value, scan=scan)


def _redacted(value: Any, scan: bool) -> Any:
    kind = type(value)
    if kind is dict:
        return _redacted_object(value, scan)
    if kind is list:
        return [_redacted(item, scan) for item in value]
    if scan and kind is str:
        return redact(value)
    return value


def _redacted_object(value: dict[str, Any], scan: bool) -> dict[str, Any]:
    # The hot loop of the request log's writer: exact type checks, one memo lookup per key.
    redacted: dict[str, Any] = {}
    kinds = _kinds
    for name, item in value.items():
        kind = kinds.get(name)
        if kind is None:
            kind = _kind(name)
        if kind == _KEEP:
            shape = type(item)
            if shape is dict or shape is list or (scan and shape is str):
                redacted[name] = _redacted(item, scan)
            else:
                redacted[name] = item
        elif item is None:
            redacted[name] = None
        elif kind == _SECRET:
            redacted[name] = REDACTED
        elif isinstance(item, bool):
            redacted[name] = item  # a flag (`verify_name`), no personal data
        elif kind == _LAST_FOUR and isinstance(item, str | int | float):
            # An account number sent as a JSON number is one all the same.
            redacted[name] = _last_four(item)
        else:
            redacted[name] = MASKED
    return redacted


_header_values: dict[tuple[bytes, bytes], str] = {}


def redact_headers(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Raw HTTP headers (name, value) as one object, names lower-cased, with the rule applied;
    a header sent more than once keeps its values joined by `, `."""
    found: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        kind = _kind(name)
        if kind == _SECRET:
            value = REDACTED
        elif kind == _MASK:
            value = MASKED
        elif kind == _LAST_FOUR:
            value = _last_four(raw_value.decode("latin-1"))
        else:
            # Most headers repeat from request to request (host, user-agent, accept...).
            known = _header_values.get((raw_name, raw_value))
            if known is None:
                known = redact(raw_value.decode("latin-1"))
                if len(_header_values) < 4096 and len(raw_value) <= 256:
                    _header_values[(raw_name, raw_value)] = known
            value = known
        found[name] = f"{found[name]}, {value}" if name in found else value
    return found
