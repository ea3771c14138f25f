"""Where webhooks may go: in production, only to https endpoints on the public internet.

A webhook URI is chosen by a merchant, so without this policy it could point the service at
its own loopback, the operator's private network or a cloud metadata address (SSRF). The
policy is checked when a URI is set and again when each delivery connects, because a name
may resolve differently later (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

__all__ = [
    "NOT_A_PUBLIC_HOST",
    "DestinationRefused",
    "PublicOnlyResolver",
    "check_literal_destination",
    "webhook_destination_problem",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# The one answer for a host name that does not resolve and for one that resolves to a
# non-public address: two answers would let whoever may set a webhook URI probe which names
# exist on the operator's internal network.
NOT_A_PUBLIC_HOST = "must name a host that resolves only to public addresses"


class DestinationRefused(OSError):
    """The webhook host is, or resolves to, an address that is not on the public internet."""


# IPv6 prefixes whose last 32 bits are an IPv4 address that a packet may end up at: IPv4-
# compatible (::/96, deprecated), IPv4-translated (::ffff:0:0:0/96) and the well-known NAT64
# prefix (64:ff9b::/96). IPv4-mapped (::ffff:0:0/96) and 6to4 (2002::/16, the address in bits
# 16-47) have properties of their own in `ipaddress`.
_LAST_32_BITS_EMBED_IPV4 = tuple(
    ipaddress.IPv6Network(prefix) for prefix in ("::/96", "::ffff:0:0:0/96", "64:ff9b::/96")
)
# Never a destination, whatever they embed: the local-use NAT64 prefix (each network chooses
# its length, so where the IPv4 address sits is unknown) and Teredo (it relays through a
# server to a client whose address is obfuscated in the last 32 bits).
_REFUSED = tuple(ipaddress.IPv6Network(prefix) for prefix in ("64:ff9b:1::/48", "2001::/32"))


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address that an IPv6 transition address reaches, or None."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in _LAST_32_BITS_EMBED_IPV4):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _is_public(address: IPAddress) -> bool:
    """True for a unicast address on the public internet; an IPv6 address that embeds an
    IPv4 address is judged by the IPv4 address (so `::127.0.0.1`, `64:ff9b::7f00:1` and
    `2002:7f00:1::` are loopback, as `::ffff:127.0.0.1` is)."""
    if isinstance(address, ipaddress.IPv6Address):
        if any(address in network for network in _REFUSED):
            return False
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return _is_public(embedded)
    return address.is_global and not address.is_multicast


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def check_literal_destination(uri: str) -> None:
    """Raise DestinationRefused when the URI's host is a non-public IP literal."""
    host = urlsplit(uri).hostname or ""
    address = _literal(host)
    if address is not None and not _is_public(address):
        raise DestinationRefused(f"{address} is not a public address")


async def webhook_destination_problem(uri: str, production: bool) -> str | None:
    """Why `uri` may not receive webhooks in this mode, or None when it may.

    Sandbox: any absolute http(s) URI (a developer's receiver is usually on localhost).
    Production: https only, and the host must not be, or resolve to, a loopback, private,
    link-local or otherwise reserved address, in any spelling (IPv4-mapped, IPv4-compatible,
    IPv4-translated, NAT64 and 6to4 IPv6 addresses are judged by the IPv4 address they embed).
    A name that does not resolve and one that resolves to a non-public address get the same
    answer (`NOT_A_PUBLIC_HOST`).
    """
    if not production:
        return None
    parts = urlsplit(uri)
    if parts.scheme != "https":
        return "must use https in production mode"
    host = parts.hostname or ""
    address = _literal(host)
    if address is not None:
        return None if _is_public(address) else "must not point to a private or local address"
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, parts.port or 443, type=socket.SOCK_STREAM
        )
    except OSError:
        return NOT_A_PUBLIC_HOST
    for info in infos:
        if not _is_public(ipaddress.ip_address(str(info[4][0]).split("%")[0])):
            return NOT_A_PUBLIC_HOST
    return None


class PublicOnlyResolver(AbstractResolver):
    """An aiohttp resolver that only ever connects to public addresses."""

    def __init__(self) -> None:
        self._inner = ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The host's public addresses; DestinationRefused when it has none."""
        results = await self._inner.resolve(host, port, family)
        public = [r for r in results if _is_public(ipaddress.ip_address(r["host"]))]
        if not public:
            raise DestinationRefused(f"{host} resolves only to non-public addresses")
        return public

    async def close(self) -> None:
        """Release the resolver."""
        await self._inner.close()
