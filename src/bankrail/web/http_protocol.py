"""The HTTP/1.1 protocol Bankrail serves with: uvicorn's httptools protocol, one write per
answer.

uvicorn writes a response's status line and headers as soon as the application starts the
response, and its body when the application sends it: two writes to the socket for every
answer, so two TCP segments on the wire, and a client that wakes up (and a kernel that runs
its network stack) twice. Here the writes a connection makes within one turn of the event
loop are joined: a second write sends both at once, and a lone write (the head of a
response whose body is still being produced, an interim `100 Continue`) goes out at the end
of the turn. The bytes and their order are unchanged.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["OneWriteHttpToolsProtocol"]


class _JoiningTransport:
    """Delegates to `transport`; joins the writes of one event-loop turn into one."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send `data` after anything written before it: now if something is held, else at
        the end of this turn of the loop."""
        held = self._held
        if held is None:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._held = None
            self._transport.write(held + data)

    def flush(self) -> None:
        """Send what is held, if anything (dropped if the connection is closing)."""
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        """Send what is held, then close the connection."""
        self.flush()
        self._transport.close()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Hand the connection to another protocol (a WebSocket upgrade), held bytes first."""
        self.flush()
        self._transport.set_protocol(protocol)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering each request with one write to the socket
    where uvicorn makes two."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Flow control keeps watching the real transport: what is held is held for one turn
        # of the loop only.
        self.transport = _JoiningTransport(transport, self.loop)  # type: ignore[assignment]
