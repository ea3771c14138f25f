"""The protocol Bankrail serves with sends each answer in one write, and the same bytes as
uvicorn's own protocol: checked on a real uvicorn server and socket, against the stock
httptools protocol, for whole, streamed, empty, HEAD and closing answers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from bankrail.web.http_protocol import OneWriteHttpToolsProtocol
from support.server import free_port

writes: list[tuple[type[Any], bytes]] = []
head_read = asyncio.Event()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers by path: /whole, /streamed (head, a pause, two chunks), /empty (204), /held
    (head, then a body once the client has read the head)."""
    if scope["type"] != "http":
        return
    path = scope["path"]
    while (await receive()).get("more_body"):
        pass
    if path == "/empty":
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/held":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await head_read.wait()
        await send({"type": "http.response.body", "body": b"done"})
        return
    if path == "/streamed":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(0.01)  # the head must not wait for the body
        await send({"type": "http.response.body", "body": b"one,", "more_body": True})
        await send({"type": "http.response.body", "body": b"two"})
        return
    body = b'{"id":"x"}'
    await send(
        {
            "type": "http.response.start",
            "status": 202,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"10")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _counting(protocol: type[HttpToolsProtocol]) -> type[HttpToolsProtocol]:
    """`protocol`, recording every write its connections make to the socket."""

    class Counting(protocol):  # type: ignore[misc,valid-type]
        def connection_made(self, transport: asyncio.Transport) -> None:
            real_write = transport.write

            def write(data: bytes) -> None:
                writes.append((protocol, bytes(data)))
                real_write(data)

            transport.write = write  # type: ignore[method-assign]
            super().connection_made(transport)

    return Counting


@contextlib.asynccontextmanager
async def _serving(protocol: type[HttpToolsProtocol]) -> AsyncIterator[int]:
    """A uvicorn server of `app` with `protocol`, on a free loopback port (yielded)."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=protocol,
        lifespan="off",
        log_level="error",
        server_header=False,
    )
    served = uvicorn.Server(config)
    task = asyncio.create_task(served.serve())
    while not served.started:
        await asyncio.sleep(0.01)
    try:
        yield port
    finally:
        served.should_exit = True
        await task


@pytest.fixture(params=[HttpToolsProtocol, OneWriteHttpToolsProtocol], ids=["stock", "ours"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[tuple[int, type[Any]]]:
    protocol: type[HttpToolsProtocol] = request.param
    async with _serving(_counting(protocol)) as port:
        writes.clear()
        yield port, protocol


async def _exchange(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    received = await reader.read()  # every request below ends with Connection: close
    writer.close()
    await writer.wait_closed()
    return received


REQUESTS = {
    "whole": b"POST /whole HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    "empty": b"GET /empty HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    "head": b"HEAD /whole HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    "streamed": b"GET /streamed HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
}

EXPECTED = {
    "whole": b"HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\ncontent-length: 10\r\n"
    b'connection: close\r\n\r\n{"id":"x"}',
    "empty": b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n",
    "head": b"HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\ncontent-length: 10\r\n"
    b"connection: close\r\n\r\n",
    "streamed": b"HTTP/1.1 200 OK\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n"
    b"4\r\none,\r\n3\r\ntwo\r\n0\r\n\r\n",
}

# Socket writes per answer: uvicorn's protocol writes the head and the body apart.
WRITES = {
    HttpToolsProtocol: {"whole": 2, "empty": 2, "head": 1, "streamed": 3},
    OneWriteHttpToolsProtocol: {"whole": 1, "empty": 1, "head": 1, "streamed": 2},
}


@pytest.mark.parametrize("kind", list(REQUESTS))
async def test_each_answer_is_the_same_bytes_in_fewer_writes(
    server: tuple[int, type[Any]], kind: str
) -> None:
    port, protocol = server
    received = await _exchange(port, REQUESTS[kind])
    headers, _, body = received.partition(b"\r\n\r\n")
    lines = headers.split(b"\r\n")
    # uvicorn adds a date header; everything else is compared byte for byte.
    kept = b"\r\n".join(line for line in lines if not line.lower().startswith(b"date:"))
    assert kept + b"\r\n\r\n" + body == EXPECTED[kind]
    assert len([w for p, w in writes if p is protocol]) == WRITES[protocol][kind]
    assert b"".join(w for p, w in writes if p is protocol) == received


async def test_a_head_is_sent_while_its_body_is_still_being_produced() -> None:
    async with _serving(OneWriteHttpToolsProtocol) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /held HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        head_read.set()
        assert await reader.read() == b"4\r\ndone\r\n0\r\n\r\n"
        writer.close()
        await writer.wait_closed()
