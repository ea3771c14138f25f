"""Unit tests for bankrail.events.destinations: in production mode a merchant's webhook URI
must use https and must not be, or resolve to, a loopback, private, link-local or otherwise
non-public address (no SSRF into the operator's network or a cloud metadata service), in any
spelling: an IPv6 transition address (IPv4-compatible, NAT64, 6to4...) is judged by the IPv4
address it carries. The check is repeated when a delivery connects (PublicOnlyResolver,
check_literal_destination), so a name that later resolves somewhere private is still refused.
The sandbox allows any http(s) receiver, because a developer's is usually on localhost.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import aiohttp
import pytest
from aiohttp.resolver import ThreadedResolver

from bankrail.events.destinations import (
    DestinationRefused,
    PublicOnlyResolver,
    check_literal_destination,
    webhook_destination_problem,
)
from support.receiver import WebhookReceiver

NOT_PUBLIC = "must not point to a private or local address"
# One answer for a name that resolves somewhere private and one that does not resolve, so
# that setting webhook URIs cannot probe the operator's internal names.
NOT_A_PUBLIC_HOST = "must name a host that resolves only to public addresses"

NON_PUBLIC_LITERALS = [
    "127.0.0.1",
    "127.8.9.10",  # all of 127/8 is loopback
    "[::1]",
    "10.0.0.1",
    "10.255.255.254",
    "172.16.0.1",
    "172.31.255.254",
    "192.168.0.1",
    "192.168.255.254",
    "169.254.169.254",  # the cloud metadata service
    "169.254.1.1",
    "[fe80::1]",
    "[fe80::1%25eth0]",  # link-local with a zone id
    "[fc00::1]",  # unique local
    "[::ffff:127.0.0.1]",  # IPv4-mapped loopback reaches 127.0.0.1
    "[::ffff:10.1.2.3]",
    "[::ffff:169.254.169.254]",
    # IPv6 transition forms that carry a non-public IPv4 address: each is judged by the
    # address it embeds.
    "[::127.0.0.1]",  # IPv4-compatible (::/96)
    "[::a9fe:a9fe]",
    "[::ffff:0:7f00:1]",  # IPv4-translated (::ffff:0:0:0/96)
    "[64:ff9b::7f00:1]",  # NAT64 well-known prefix (64:ff9b::/96)
    "[64:ff9b::a9fe:a9fe]",
    "[64:ff9b::10.0.0.1]",
    "[2002:7f00:1::]",  # 6to4 (2002::/16): 127.0.0.1
    "[2002:a9fe:a9fe::]",  # 6to4: 169.254.169.254
    "[2002:c0a8:101::1]",  # 6to4: 192.168.1.1
    # Refused whatever they embed: the local-use NAT64 prefix (the network chooses where
    # the IPv4 address sits) and Teredo (it relays through a server to an obfuscated client).
    "[64:ff9b:1::7f00:1]",
    "[64:ff9b:1::808:808]",
    "[2001:0:4136:e378:8000:63bf:3fff:fdd2]",
    "0.0.0.0",  # connects to this host
    "[::]",
    "100.64.0.1",  # carrier-grade NAT
    "224.0.0.1",  # multicast
    "255.255.255.255",
]
PUBLIC_LITERALS = [
    "93.184.216.34",
    "8.8.8.8",
    "172.32.0.1",  # just outside 172.16/12
    "[2606:2800:220:1:248:1893:25c8:1946]",
    "[::ffff:93.184.216.34]",
    "[::5db8:d822]",  # IPv4-compatible 93.184.216.34
    "[64:ff9b::808:808]",  # NAT64 to 8.8.8.8
    "[2002:5db8:d822::1]",  # 6to4 from 93.184.216.34
]


@pytest.mark.parametrize("host", NON_PUBLIC_LITERALS)
async def test_a_non_public_ip_literal_is_refused_in_production(host: str) -> None:
    assert await webhook_destination_problem(f"https://{host}/hooks", True) == NOT_PUBLIC
    assert await webhook_destination_problem(f"https://{host}:8443/hooks", True) == NOT_PUBLIC


@pytest.mark.parametrize("host", PUBLIC_LITERALS)
async def test_a_public_ip_literal_is_accepted_in_production(host: str) -> None:
    assert await webhook_destination_problem(f"https://{host}/hooks", True) is None


@pytest.mark.parametrize(
    "uri",
    [
        "http://93.184.216.34/hooks",
        "http://example.com/hooks",
        "http://localhost:8080/hooks",
        "ftp://93.184.216.34/hooks",
    ],
)
async def test_anything_but_https_is_refused_in_production(uri: str) -> None:
    assert await webhook_destination_problem(uri, True) == "must use https in production mode"


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST"])
async def test_a_name_resolving_to_loopback_is_refused_in_production(host: str) -> None:
    assert await webhook_destination_problem(f"https://{host}/hooks", True) == NOT_A_PUBLIC_HOST


async def test_a_decimal_spelling_of_loopback_is_refused_in_production() -> None:
    # Not an IP literal to `ipaddress`, but the resolver reads 2130706433 as 127.0.0.1.
    assert await webhook_destination_problem("https://2130706433/hooks", True) == NOT_A_PUBLIC_HOST


async def test_a_name_that_does_not_resolve_is_refused_in_production_as_a_private_one_is() -> None:
    unresolvable = await webhook_destination_problem("https://no-such-host.invalid/hooks", True)
    internal = await webhook_destination_problem("https://localhost/hooks", True)
    assert unresolvable == internal == NOT_A_PUBLIC_HOST


def _fake_dns(monkeypatch: pytest.MonkeyPatch, names: dict[str, list[str]]) -> None:
    """Make the running loop's getaddrinfo resolve `names` (and nothing else)."""

    async def getaddrinfo(host: str, port: int, **_kwargs: Any) -> list[Any]:
        if host not in names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in names[host]
        ]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo)


async def test_a_name_is_refused_when_any_of_its_addresses_is_private(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_dns(
        monkeypatch,
        {
            "hooks.example.com": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
            "mixed.example.com": ["93.184.216.34", "10.0.0.7"],
            "v6-link-local.example.com": ["fe80::1%2"],
            "metadata.example.com": ["169.254.169.254"],
            "nat64.example.com": ["93.184.216.34", "64:ff9b::a9fe:a9fe"],
            "sixtofour.example.com": ["2002:7f00:1::"],
            "compatible.example.com": ["::127.0.0.1"],
        },
    )
    assert await webhook_destination_problem("https://hooks.example.com/h", True) is None
    for name in ("mixed", "v6-link-local", "metadata", "nat64", "sixtofour", "compatible"):
        uri = f"https://{name}.example.com/h"
        assert await webhook_destination_problem(uri, True) == NOT_A_PUBLIC_HOST, uri


@pytest.mark.parametrize(
    "uri",
    [
        "http://localhost:8080/hooks",
        "http://127.0.0.1/hooks",
        "https://10.1.2.3/hooks",
        "https://169.254.169.254/latest/meta-data",
        "http://[::1]:9000/hooks",
        "http://93.184.216.34/hooks",
    ],
)
async def test_the_sandbox_allows_every_destination(uri: str) -> None:
    assert await webhook_destination_problem(uri, False) is None


# --- at delivery time ------------------------------------------------------------------------


@pytest.mark.parametrize("host", NON_PUBLIC_LITERALS)
def test_delivery_refuses_a_non_public_literal(host: str) -> None:
    with pytest.raises(DestinationRefused):
        check_literal_destination(f"https://{host}/hooks")


@pytest.mark.parametrize(
    "uri",
    [
        "https://93.184.216.34/hooks",
        "https://[2606:2800:220:1:248:1893:25c8:1946]/hooks",
        # Names are left to the resolver, which sees what they resolve to at connect time.
        "https://localhost/hooks",
        "https://hooks.example.com/hooks",
    ],
)
def test_delivery_lets_public_literals_and_names_through_to_the_resolver(uri: str) -> None:
    check_literal_destination(uri)


async def test_public_only_resolver_refuses_a_name_resolving_only_to_loopback() -> None:
    resolver = PublicOnlyResolver()
    try:
        with pytest.raises(DestinationRefused, match="localhost"):
            await resolver.resolve("localhost", 443, socket.AF_INET)
        with pytest.raises(DestinationRefused):
            await resolver.resolve("localhost", 443, socket.AF_UNSPEC)
    finally:
        await resolver.close()


async def test_public_only_resolver_keeps_only_the_public_addresses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def resolve(
        _self: ThreadedResolver, host: str, port: int = 0, family: int = socket.AF_INET
    ) -> list[dict[str, Any]]:
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": family,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in (
                "10.0.0.7",
                "93.184.216.34",
                "127.0.0.1",
                "::ffff:192.168.1.1",
                "::127.0.0.1",
                "64:ff9b::a9fe:a9fe",
                "2002:7f00:1::",
            )
        ]

    monkeypatch.setattr(ThreadedResolver, "resolve", resolve)
    resolver = PublicOnlyResolver()
    try:
        answers = await resolver.resolve("rebinding.example.com", 443)
    finally:
        await resolver.close()
    assert [a["host"] for a in answers] == ["93.184.216.34"]


async def test_a_delivery_session_cannot_reach_a_receiver_on_loopback_by_name(
    receiver: WebhookReceiver,
) -> None:
    """What the delivery worker does in production: connect through PublicOnlyResolver.
    The same request without it reaches the receiver, so the refusal is the resolver's."""
    uri = receiver.url.replace("127.0.0.1", "localhost") + "/hooks"
    async with (
        aiohttp.ClientSession() as open_session,
        open_session.post(uri, data=b"{}") as answer,
    ):
        assert answer.status == 200
    assert len(receiver.snapshot()) == 1
    connector = aiohttp.TCPConnector(resolver=PublicOnlyResolver())
    async with aiohttp.ClientSession(connector=connector) as guarded:
        with pytest.raises(aiohttp.ClientConnectorError) as refused:
            await guarded.post(uri, data=b"{}")
    assert isinstance(refused.value.os_error, DestinationRefused)
    assert len(receiver.snapshot()) == 1
