"""A transport that joins the writes of one event-loop iteration into one.

uvicorn writes an answer's status line and headers, then its body, as two writes: two
`send` system calls and two segments on the wire for every response, where one would do.
`JoinedWrites` stands between an HTTP protocol and its connection's transport (the connection
guard puts it there, http/connection_guard.py): the writes made in one iteration of the loop
are kept and handed to the transport as one at the end of it, in order. Everything else is
the transport's own. A `close`, `write_eof` or `abort` hands on what is kept first (`abort`
drops it, as the transport's own abort drops its buffer).
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["JoinedWrites"]


class JoinedWrites(asyncio.Transport):
    """`transport`, with the writes of each loop iteration joined into one."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._kept: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._kept:
            self._loop.call_soon(self.flush)
        self._kept.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Hand what is kept to the transport now."""
        if self._kept:
            data = self._kept[0] if len(self._kept) == 1 else b"".join(self._kept)
            self._kept.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._kept.clear()
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._kept))

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()
