"""A minimal HTTP/1.1 keep-alive receiver on loopback that answers 200 to every POST, fast
enough that the sender, not the receiver, is what a webhook benchmark measures."""

from __future__ import annotations

import asyncio

_OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"


class CountingReceiver:
    """Counts the requests it answers."""

    def __init__(self) -> None:
        self.count = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        """Listen on a free loopback port; returns the base URL."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:].strip())
                if length:
                    await reader.readexactly(length)
                self.count += 1
                writer.write(_OK)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
