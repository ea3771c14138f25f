"""The HTTP/1.1 protocol Bankrail serves with: uvicorn's httptools protocol, one write per
answer, and the fast lane answered from the protocol itself.

uvicorn writes a response's status line and headers as soon as the application starts the
response, and its body when the application sends it: two writes to the socket for every
answer, so two TCP segments on the wire, and a client that wakes up (and a kernel that runs
its network stack) twice. Here the writes a connection makes within one turn of the event
loop are joined: a second write sends both at once, and a lone write (the head of a
response whose body is still being produced, an interim `100 Continue`) goes out at the end
of the turn. The bytes and their order are unchanged.

A request the application's served fast lane takes (web/fastlane.py, offered in its lifespan
state) is answered without the ASGI application: uvicorn still parses it, keeps the
connection alive, pipelines and shuts down as for any request, but the lane's answer is
written whole, without the ASGI messages, the response cycle's checks and the middleware
around them. A request the lane hands on runs through the application as any other.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from starlette.types import Scope
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

if TYPE_CHECKING:
    from bankrail.web.fastlane import FastReply, FastRoute, ServedFastLane

__all__ = ["SERVED_LANE", "OneWriteHttpToolsProtocol"]

SERVED_LANE = "bankrail.served_fast_lane"
"""The key under which an application offers its web.fastlane.ServedFastLane in its lifespan
state. (This module is imported before `serve` sets up the metrics directory, so it imports
nothing that defines metrics, such as the lane, at run time.)"""


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

    def write_whole(self, data: bytes) -> None:
        """Send `data`, a whole answer, now (after anything held)."""
        held, self._held = self._held, None
        self._transport.write(data if held is None else held + data)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Hand the connection to another protocol (a WebSocket upgrade), held bytes first."""
        self.flush()
        self._transport.set_protocol(protocol)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering each request with one write to the socket
    where uvicorn makes two, and the application's served fast lane ahead of it."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Flow control keeps watching the real transport: what is held is held for one turn
        # of the loop only.
        self.transport = _JoiningTransport(transport, self.loop)  # type: ignore[assignment]

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        lane: ServedFastLane | None = self.app_state.get(SERVED_LANE)
        # `app` is another when uvicorn answers 503 itself (its concurrency limit).
        if lane is not None and app is self.app:
            taken = lane.take(cast(Scope, cycle.scope))
            if taken is not None:
                task = self.loop.create_task(_serve_fast(lane, *taken, cycle, app))
                task.add_done_callback(self.tasks.discard)
                self.tasks.add(task)
                return
        super()._start_asgi_task(cycle, app)


async def _serve_fast(
    lane: ServedFastLane,
    route: FastRoute,
    params: list[str],
    cycle: RequestResponseCycle,
    app: ASGI3Application,
) -> None:
    """Answer one request with the lane, or hand it to the application."""

    async def whole_body() -> bytes | None:
        # The body stays in the cycle, and its event set, for a request handed on.
        while cycle.more_body and not cycle.disconnected:
            cycle.flow.resume_reading()
            await cycle.message_event.wait()
            if cycle.more_body:
                cycle.message_event.clear()
        return None if cycle.disconnected else bytes(cycle.body)

    try:
        reply = await lane.answer(route, params, cast(Scope, cycle.scope), whole_body)
    except BaseException:
        cycle.transport.close()  # cancelled at shutdown: no answer will come
        raise
    if reply is None:
        await cycle.run_asgi(app)
    else:
        await _write(cycle, reply)


async def _write(cycle: RequestResponseCycle, reply: FastReply) -> None:
    """Write a whole answer and finish the request as uvicorn's cycle would."""
    if cycle.flow.write_paused and not cycle.disconnected:
        await cycle.flow.drain()
    if cycle.disconnected:
        return
    content = [STATUS_LINE[reply.status]]
    for name, value in cycle.default_headers + reply.headers:
        content += (name, b": ", value, b"\r\n")
    if not cycle.keep_alive:
        content.append(b"connection: close\r\n")
    content += (b"\r\n", reply.body)
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    # Only OneWriteHttpToolsProtocol serves the lane, and its transport is always joining.
    cast(_JoiningTransport, cycle.transport).write_whole(b"".join(content))
    cycle.response_complete = True
    cycle.message_event.set()
    if not cycle.keep_alive:
        cycle.transport.close()
    on_response, cycle.on_response = cycle.on_response, lambda: None
    on_response()
