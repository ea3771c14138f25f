"""The load generator counts every answer, reads whole answers however they arrive, paces an
open loop, and counts latency from when a request was due."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from bench.loadgen import LoadResult, http_request, run, run_load


@dataclass
class _Server:
    """A keep-alive HTTP/1.1 server that answers each request with `answer(index)`."""

    connections: int = 0
    arrivals: list[float] = field(default_factory=list)


def _answer(status: int, body: bytes) -> bytes:
    return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)


@asynccontextmanager
async def _serving(
    reply: Callable[[int], list[bytes]], delay: float = 0.0
) -> AsyncIterator[tuple[int, _Server]]:
    """Answers request i with the pieces `reply(i)`, written one by one a loop turn apart,
    after `delay` seconds."""
    seen = _Server()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
                seen.arrivals.append(time.perf_counter())
                if delay:
                    await asyncio.sleep(delay)
                for piece in reply(int(body)):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], seen
    finally:
        server.close()


def _requests(port: int, count: int) -> list[bytes]:
    return [
        http_request("POST", "/", f"127.0.0.1:{port}", {}, str(i).encode()) for i in range(count)
    ]


async def test_every_request_is_answered_once_over_kept_alive_connections() -> None:
    def reply(index: int) -> list[bytes]:
        return [_answer(202 if index % 3 else 409, b'{"id": "%d"}' % index)]

    async with _serving(reply) as (port, seen):
        result = await run_load("127.0.0.1", port, _requests(port, 300), concurrency=8)
    assert result.requests == 300
    assert result.statuses == {202: 200, 409: 100}
    assert len(result.latencies_ms) == 300
    assert seen.connections == 8


async def test_answers_split_anywhere_are_read_whole() -> None:
    body = b"x" * 5000

    def reply(index: int) -> list[bytes]:
        whole = _answer(201, body)
        # the head in two pieces, the body in three, cut at a different place each time
        cut = 5 + index % 7
        return [whole[:cut], whole[cut:40], whole[40:1000], whole[1000:3000], whole[3000:]]

    async with _serving(reply) as (port, _):
        result = await run_load("127.0.0.1", port, _requests(port, 50), concurrency=3)
    assert result.statuses == {201: 50}


async def test_an_open_loop_starts_requests_on_schedule_and_counts_the_wait() -> None:
    async with _serving(lambda i: [_answer(200, b"")], delay=0.05) as (port, seen):
        result = await run_load("127.0.0.1", port, _requests(port, 40), concurrency=4, rate=200)
    # 40 requests at 200/s take 195 ms to start; four connections answering in 50 ms
    # each carry at most 80/s, so requests queue and their latency grows beyond 50 ms
    assert seen.arrivals[-1] - seen.arrivals[0] >= 0.19
    assert result.percentile(0.0) >= 50.0
    assert max(result.latencies_ms) > 120.0
    assert result.statuses == {200: 40}


async def test_a_server_that_closes_mid_answer_fails_the_run() -> None:
    async def cut_short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(cut_short, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ConnectionError):
            await run_load("127.0.0.1", port, _requests(port, 3), concurrency=1, deadline_seconds=5)
    finally:
        server.close()


def test_the_bench_runs_it_on_uvloop() -> None:
    # `bench.loadgen.run` uses uvloop, whose transports are not asyncio's classes.
    async def load() -> LoadResult:
        async with _serving(lambda i: [_answer(204, b"")]) as (port, _):
            return await run_load("127.0.0.1", port, _requests(port, 20), concurrency=2)

    result = run(load())
    assert result.statuses == {204: 20}
