"""Unit tests for bankrail.merchants.return_uris: which `return_uri` an allowed return URI
covers (same scheme, host ignoring case, port with defaults, and a path under the allowed
path on a segment boundary), and that no spelling a browser reads differently from the parser
(user information, backslashes, dot segments, control characters) slips through.
"""

from __future__ import annotations

import pytest

from bankrail.merchants.return_uris import check_allowed_uri, covers, is_allowed

ALLOWED = "https://shop.example/cb"

COVERED = [
    "https://shop.example/cb",
    "https://shop.example/cb/",
    "https://shop.example/cb/done",
    "https://shop.example/cb/done/again?order=7&x=https://evil.example/",
    "https://shop.example/cb?order=7",
    "https://shop.example/cb#fragment",
    "https://SHOP.Example/cb",  # hosts are case-insensitive
    "HTTPS://shop.example/cb",  # so are schemes
    "https://shop.example:443/cb",  # the default port, written out
    "https://shop.example:/cb",  # an empty port is the default
]
NOT_COVERED = [
    "https://evil.example/phish",
    "https://shop.example/cbevil",  # a prefix, but not on a segment boundary
    "https://shop.example/cb.evil",
    "https://shop.example/c",
    "https://shop.example/",
    "https://shop.example",
    "https://shop.example/CB",  # paths are case-sensitive
    "https://shop.example.evil.com/cb",  # a longer host
    "https://evilshop.example/cb",
    "https://sub.shop.example/cb",
    "https://shop.example./cb",  # not the same host name
    "http://shop.example/cb",  # another scheme
    "https://shop.example:8443/cb",  # another port
    "https://shop.example:80/cb",
    "https://shop.example:99999/cb",  # not a port at all
    "https://shop.example:x/cb",
    "https://user@shop.example/cb",  # user information in any form
    "https://shop.example@evil.example/cb",
    "https://shop.example:443@evil.example/cb",
    "https://shop.example%40evil.example/cb",
    "https://evil.example#@shop.example/cb",
    "https://evil.example?@shop.example/cb",
    "https://evil.example\\@shop.example/cb",  # a browser reads \ as /
    "https://shop.example\\@evil.example/cb",
    "https://shop.example/cb\\..\\..\\evil",
    "https://shop.example/cb/../admin",  # dot segments leave the prefix in a browser
    "https://shop.example/cb/./../admin",
    "https://shop.example/cb/%2e%2e/admin",
    "https://shop.example/cb/%2E./admin",
    "https://shop.example/cb/..",
    "https://shop.example/cb\t/x",  # control characters and whitespace
    "https://shop.exa\nmple/cb",
    "https://shop.example/cb x",
    "https://shop.example/cb\x7f",
    "//shop.example/cb",  # not absolute
    "/cb",
    "shop.example/cb",
    "https:shop.example/cb",
    "https:///shop.example/cb",
    "javascript://shop.example/cb%0aalert(1)",
    "ftp://shop.example/cb",
    "",
]


@pytest.mark.parametrize("uri", COVERED)
def test_the_allowed_uri_covers(uri: str) -> None:
    assert covers(ALLOWED, uri)
    assert is_allowed(uri, ["https://other.example/", ALLOWED])


@pytest.mark.parametrize("uri", NOT_COVERED)
def test_the_allowed_uri_does_not_cover(uri: str) -> None:
    assert not covers(ALLOWED, uri)
    assert not is_allowed(uri, ["https://other.example/", ALLOWED])


@pytest.mark.parametrize(
    ("allowed", "uri", "expected"),
    [
        # An allowed path ending in / covers what is under it, not the path without the /.
        ("https://shop.example/cb/", "https://shop.example/cb/done", True),
        ("https://shop.example/cb/", "https://shop.example/cb/", True),
        ("https://shop.example/cb/", "https://shop.example/cb", False),
        ("https://shop.example/cb/", "https://shop.example/cbevil", False),
        # An empty path or / covers the whole origin, and only that origin.
        ("https://shop.example", "https://shop.example/anything?x=1", True),
        ("https://shop.example/", "https://shop.example", True),
        ("https://shop.example", "https://shop.example.evil.com/", False),
        ("https://shop.example", "https://shop.example:8443/", False),
        # Ports: a default written in the allowed URI or in the return URI is the same port.
        ("https://shop.example:443/cb", "https://shop.example/cb", True),
        ("https://shop.example:8443/cb", "https://shop.example:8443/cb/x", True),
        ("https://shop.example:8443/cb", "https://shop.example/cb", False),
        # An upper-case allowed host matches as lower case.
        ("https://Shop.Example/cb", "https://shop.example/cb", True),
        # IPv6 literal hosts.
        ("https://[2001:db8::1]/cb", "https://[2001:DB8::1]/cb/x", True),
        ("https://[2001:db8::1]/cb", "https://[2001:db8::2]/cb", False),
        # Percent-encoding is compared as written: a different spelling is not covered.
        ("https://shop.example/cb", "https://shop.example/%63b", False),
        ("https://shop.example/c%20b", "https://shop.example/c%20b/x", True),
        # An unsafe allowed URI covers nothing.
        ("https://user@shop.example/cb", "https://user@shop.example/cb", False),
        ("https://shop.example/a/../cb", "https://shop.example/a/../cb", False),
    ],
)
def test_prefix_rules(allowed: str, uri: str, expected: bool) -> None:
    assert covers(allowed, uri) is expected


def test_an_empty_allow_list_allows_nothing() -> None:
    assert not is_allowed("https://shop.example/cb", [])


@pytest.mark.parametrize(
    "uri",
    [
        "https://shop.example/cb",
        "https://shop.example",
        "https://shop.example:8443/cb/",
        "https://[2001:db8::1]/cb",
        "https://xn--bcher-kva.example/cb",
        "  https://shop.example/cb  ",  # trimmed
    ],
)
def test_check_allowed_uri_accepts_absolute_https(uri: str) -> None:
    assert check_allowed_uri(uri) == uri.strip()


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("http://shop.example/cb", "absolute https URI"),
        ("ftp://shop.example/cb", "absolute https URI"),
        ("/cb", "absolute https URI"),
        ("shop.example/cb", "absolute https URI"),
        ("https://user:pw@shop.example/cb", "absolute https URI"),
        ("https://shop.example\\cb", "absolute https URI"),
        ("https://shop.example/a/../cb", "absolute https URI"),
        ("https://shop.example:99999/cb", "absolute https URI"),
        ("https://shop.example/c b", "absolute https URI"),
        ("https://bücher.example/cb", "ASCII host"),
        ("https://shop.example/cb?order=1", "query or fragment"),
        ("https://shop.example/cb?", "query or fragment"),
        ("https://shop.example/cb#x", "query or fragment"),
        ("https://shop.example/" + "a" * 2000, "at most 2000 characters"),
    ],
)
def test_check_allowed_uri_refuses(uri: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_allowed_uri(uri)
