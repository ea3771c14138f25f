"""JoinedWrites (http/joined_writes.py) over a real uvloop transport and socket: the writes of
one loop iteration reach the peer together at its end, in order, and closing hands on what
is kept before the connection closes."""

from __future__ import annotations

import asyncio
import socket

import uvloop

from bankrail.http.joined_writes import JoinedWrites


async def _connected() -> tuple[JoinedWrites, socket.socket]:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    loop = asyncio.get_running_loop()
    with ours:  # the transport works on a duplicate of it
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
    return JoinedWrites(transport, loop), theirs  # type: ignore[arg-type]


async def _read_to_end(peer: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    async with asyncio.timeout(10):
        while chunk := await loop.sock_recv(peer, 65536):
            data += chunk
    return data


def _received(peer: socket.socket) -> bytes:
    try:
        return peer.recv(65536)
    except BlockingIOError:
        return b""


def test_the_writes_of_one_iteration_are_sent_together_at_its_end() -> None:
    async def scenario() -> None:
        joined, peer = await _connected()
        joined.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        joined.write(b"ok")
        assert _received(peer) == b""  # nothing sent while the iteration runs
        assert joined.get_write_buffer_size() == 40
        await asyncio.sleep(0)  # the iteration ends
        assert _received(peer) == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
        joined.close()
        peer.close()

    uvloop.run(scenario())


def test_closing_sends_what_is_kept_then_closes() -> None:
    async def scenario() -> None:
        joined, peer = await _connected()
        joined.write(b"last ")
        joined.write(b"words")
        joined.close()
        assert joined.is_closing()
        assert await _read_to_end(peer) == b"last words"
        peer.close()

    uvloop.run(scenario())


def test_abort_drops_what_is_kept() -> None:
    async def scenario() -> None:
        joined, peer = await _connected()
        joined.write(b"never sent")
        joined.abort()
        assert await _read_to_end(peer) == b""
        peer.close()

    uvloop.run(scenario())
