"""Where a payer may be sent back to: the return URIs the operator allows for a merchant.

In production mode the hosted payment page and the authorisation flow accept a `return_uri`
only when one of the merchant's allowed URIs covers it, so the service cannot be used to
send a payer from its own pages to an arbitrary site (an open redirect). Sandbox mode keeps
the list but accepts any absolute http(s) `return_uri`.

An allowed URI is an absolute `https` URI with an ASCII host and no user information, query
or fragment. It covers a `return_uri` when, both parsed:

- the schemes are equal (so the `return_uri` is https too);
- the hosts are equal, ignoring case (`shop.example` does not cover `shop.example.evil.com`);
- the ports are equal, a missing port being the scheme's default (`:443` for https);
- the allowed path is a prefix of the `return_uri`'s path that ends at a segment boundary:
  `/cb` covers `/cb`, `/cb/` and `/cb/done`, not `/cbevil`; `/cb/` covers `/cb/done` only;
  an empty path is `/`, which covers every path. The query and fragment are free.

A `return_uri` that a browser could read differently from this parser is never covered:
one with user information (`https://shop.example@evil.example/`), a backslash, whitespace
or a control character, an unparsable port, or a `.` or `..` path segment (also
percent-encoded), which a browser resolves to a path outside the allowed prefix.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from bankrail.core.problems import NotFound, invalid_field
from bankrail.core.urls import is_absolute_http_uri
from bankrail.db.pool import Connection

__all__ = [
    "MAX_RETURN_URIS",
    "MAX_URI_LENGTH",
    "NOT_ALLOWED",
    "allowed_return_uris",
    "check_allowed_uri",
    "check_return_uri",
    "covers",
    "is_allowed",
    "set_return_uris",
]

MAX_RETURN_URIS = 50
MAX_URI_LENGTH = 2000
NOT_ALLOWED = (
    "is not covered by the return URIs allowed for this merchant (production mode: the "
    "operator allow-lists them; scheme, host and port must match and the path must start "
    "with an allowed path)"
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class _Parsed:
    scheme: str
    host: str
    port: int
    path: str
    has_query_or_fragment: bool


def _parse(uri: str) -> _Parsed | None:
    """The parts that matching compares, or None for a URI that is not safe to compare."""
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 or ch == "\\" for ch in uri):
        return None
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if parts.scheme not in _DEFAULT_PORTS or not host or "@" in parts.netloc:
        return None
    path = parts.path or "/"
    if any(unquote(segment) in (".", "..") for segment in path.split("/")):
        return None
    return _Parsed(
        scheme=parts.scheme,
        host=host,
        port=port if port is not None else _DEFAULT_PORTS[parts.scheme],
        path=path,
        has_query_or_fragment="?" in uri or "#" in uri,
    )


def check_allowed_uri(uri: str) -> str:
    """The URI as it will be stored (trimmed), or ValueError saying what is wrong with it."""
    text = uri.strip()
    if not text:
        raise ValueError("must not be empty")
    if len(text) > MAX_URI_LENGTH:
        raise ValueError(f"must be at most {MAX_URI_LENGTH} characters")
    parsed = _parse(text)
    if parsed is None or parsed.scheme != "https":
        raise ValueError(
            "must be an absolute https URI such as https://shop.example/return, without user"
            " information, backslashes, spaces or . and .. path segments"
        )
    if not parsed.host.isascii():
        raise ValueError("must have an ASCII host name (use the punycode form, xn--...)")
    if parsed.has_query_or_fragment:
        raise ValueError("must not have a query or fragment (the path is matched as a prefix)")
    return text


def covers(allowed: str, uri: str) -> bool:
    """True when the allowed URI `allowed` covers `uri` (the rules of this module)."""
    rule = _parse(allowed)
    target = _parse(uri)
    if rule is None or target is None:
        return False
    if (rule.scheme, rule.host, rule.port) != (target.scheme, target.host, target.port):
        return False
    if rule.path.endswith("/"):
        return target.path.startswith(rule.path)
    return target.path == rule.path or target.path.startswith(rule.path + "/")


def is_allowed(uri: str, allowed: Iterable[str]) -> bool:
    """True when any of the allowed URIs covers `uri`."""
    return any(covers(rule, uri) for rule in allowed)


async def allowed_return_uris(conn: Connection, merchant_id: uuid.UUID) -> list[str]:
    """The merchant's allowed return URIs (empty for an unknown merchant)."""
    uris = await conn.fetchval("SELECT return_uris FROM merchants WHERE id = $1", merchant_id)
    return list(uris or [])


async def check_return_uri(
    conn: Connection,
    merchant_id: uuid.UUID,
    uri: str,
    field: str,
    *,
    allow_listed_only: bool,
) -> None:
    """The one check of a `return_uri` a payer is to be sent back to (a payment's or a
    mandate's authorisation): 400 naming `field` unless it is an absolute http(s) URI and,
    with `allow_listed_only` (production mode, a URI the caller chose), one that the
    merchant's allowed return URIs cover."""
    if not is_absolute_http_uri(uri):
        raise invalid_field(field, "must be an absolute http(s) URI")
    if allow_listed_only and not is_allowed(uri, await allowed_return_uris(conn, merchant_id)):
        raise invalid_field(field, NOT_ALLOWED)


async def set_return_uris(
    conn: Connection, merchant_id: uuid.UUID, uris: Iterable[str]
) -> list[str]:
    """Replace the merchant's allowed return URIs (already checked; duplicates dropped);
    returns the list as stored. 404 for an unknown merchant."""
    unique = list(dict.fromkeys(uris))
    stored = await conn.fetchval(
        "UPDATE merchants SET return_uris = $2 WHERE id = $1 RETURNING return_uris",
        merchant_id,
        unique,
    )
    if stored is None:
        raise NotFound(f"Merchant {merchant_id} does not exist.")
    return list(stored)
