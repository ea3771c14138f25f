"""The event loop of `bankrail serve`: uvloop's, with a `ConnectionGuard` in front of every
connection its servers accept (http/connection_guard.py), and a stop that loses no request.

uvicorn takes it through its documented `loop` option (`_serve.guarded_event_loop`, which
reads the limits from the process's settings). When uvicorn
stops a server, the server first accepts the connections still waiting in the listening
socket's backlog (closing the socket would reset them) and serves them like the others; the
application's shutdown then waits (`GuardedLoop.drain`) until no connection has a request
arriving or being answered, before the process goes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, cast

import uvloop

from bankrail.http.connection_guard import ConnectionGuard, Connections, Limits

__all__ = ["GuardedLoop", "serving_stops"]

log = logging.getLogger(__name__)

# How often a drain looks again at the connections it waits for.
DRAIN_POLL_SECONDS = 0.01


class GuardedLoop(uvloop.Loop):
    """uvloop's event loop (what uvicorn runs on by default), but `create_server` puts a
    `ConnectionGuard` in front of each connection's protocol, and its servers take the
    connections waiting in their backlog when they are closed."""

    def __init__(self, limits: Limits) -> None:
        super().__init__()
        self._guarded = Connections(self, limits)
        self.stopping = False  # a server of the loop was closed: the process is stopping

    async def create_server(
        self, protocol_factory: Callable[[], asyncio.BaseProtocol], *args: Any, **kwargs: Any
    ) -> asyncio.Server:
        connections = self._guarded

        def guarded() -> ConnectionGuard:
            return ConnectionGuard(protocol_factory, connections)

        server = await super().create_server(guarded, *args, **kwargs)
        # uvloop's stubs say AbstractServer, asyncio's Server: uvicorn needs only the former.
        return cast(asyncio.Server, _DrainingServer(self, server, guarded))

    async def drain(self) -> None:
        """Return once no guarded connection has a request arriving or being answered (see
        `ConnectionGuard.busy`)."""
        # Polled: a connection stops counting as busy also by time passing (its grace).
        while any(guard.busy(self.time()) for guard in self._guarded.open):  # noqa: ASYNC110
            await asyncio.sleep(DRAIN_POLL_SECONDS)


class _DrainingServer:
    """A server of `GuardedLoop`: uvloop's, except that `close` first accepts the connections
    that completed their handshake but were not yet accepted, which closing the listening
    socket would reset, and serves them like the others."""

    def __init__(
        self,
        loop: GuardedLoop,
        server: asyncio.AbstractServer,
        guarded: Callable[[], ConnectionGuard],
    ) -> None:
        self._loop = loop
        self._server = server
        self._guarded = guarded
        self._taken: set[asyncio.Task[Any]] = set()

    def close(self) -> None:
        self._loop.stopping = True  # long answers (event streams) end on seeing it
        for listening in getattr(self._server, "sockets", None) or ():
            self._take_backlog(listening.fileno())
        self._server.close()

    def _take_backlog(self, fd: int) -> None:
        listener = socket.socket(fileno=os.dup(fd))
        try:
            listener.setblocking(False)
            while True:
                try:
                    connection, _address = listener.accept()
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as exc:
                    log.warning("while taking the backlog of a closing server: %s", exc)
                    return
                connection.setblocking(False)
                task = self._loop.create_task(
                    self._loop.connect_accepted_socket(self._guarded, connection)
                )
                self._taken.add(task)
                task.add_done_callback(self._taken.discard)
        finally:
            listener.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


def serving_stops() -> bool:
    """True once the running event loop is a `GuardedLoop` whose server was closed (the
    process is stopping): an answer that streams until told (an event stream) ends then,
    rather than holding the graceful shutdown."""
    return bool(getattr(asyncio.get_running_loop(), "stopping", False))
