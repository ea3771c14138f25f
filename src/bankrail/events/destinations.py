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
    "DestinationRefused",
    "PublicOnlyResolver",
    "check_literal_destination",
    "webhook_destination_problem",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class DestinationRefused(OSError):
    """The webhook host is, or resolves to, an address that is not on the public internet."""


def _is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
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
    link-local or otherwise reserved address.
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
        return "must name a host that resolves"
    for info in infos:
        if not _is_public(ipaddress.ip_address(str(info[4][0]).split("%")[0])):
            return "must not resolve to a private or local address"
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
