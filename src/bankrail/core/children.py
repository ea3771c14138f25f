"""Helper processes of a serving process (the signature verifiers, the request-log writer):
each a fresh interpreter that runs one module of Bankrail, talking to its parent over a
socket pair."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

__all__ = ["reap", "spawn_module"]


async def spawn_module(
    module: str,
) -> tuple[subprocess.Popen[bytes], asyncio.StreamReader, asyncio.StreamWriter]:
    """Start `python -m <module> <fd>`, `fd` being the child's end of a new socket pair;
    returns the process and this process's end as streams. The child imports `module` alone
    (not the serving process's modules, as multiprocessing's spawn would through the
    `bankrail` script) and inherits no other descriptor."""
    ours, theirs = socket.socketpair()
    try:
        with theirs:
            process = await asyncio.to_thread(
                subprocess.Popen,
                [sys.executable, "-m", module, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        reader, writer = await asyncio.open_connection(sock=ours)
    except BaseException:
        ours.close()
        raise
    return process, reader, writer


async def reap(process: subprocess.Popen[bytes], wait: float) -> int:
    """Wait for `process` to exit, `wait` seconds at most, then kill it; its exit code."""
    try:
        return await asyncio.to_thread(process.wait, wait)
    except subprocess.TimeoutExpired:
        process.kill()
        return await asyncio.to_thread(process.wait)
