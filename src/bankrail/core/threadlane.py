"""A few threads that run calls which release the GIL (ECDSA signing and verification), so
that the event loop goes on serving while another core does the arithmetic.

`asyncio.to_thread` does the same through a general-purpose executor: per call it builds a
`concurrent.futures.Future` (with its own lock and condition), a work item, a copy of the
context, and checks whether to start a thread. For the signed POST, the hottest request,
that came to a tenth of the event loop's time. A lane hands a call over with one queue put and
answers with one `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["CRYPTO", "ThreadLane"]

T = TypeVar("T")
_Item = tuple[Callable[[], Any], asyncio.Future[Any], asyncio.AbstractEventLoop]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return  # the awaiting request was cancelled (its deadline passed): nobody waits
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class ThreadLane:
    """`threads` daemon threads, started on first use, running calls in arrival order."""

    def __init__(self, threads: int, name: str) -> None:
        self._size = threads
        self._name = name
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._started = False
        self._lock = threading.Lock()

    async def run(self, call: Callable[[], T]) -> T:
        """The result of `call()` run on one of the lane's threads (its exception, raised
        here, if it raises). Cancelling the caller does not stop a call already running."""
        if not self._started:
            self._start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((call, future, loop))
        return await future

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            for number in range(self._size):
                threading.Thread(
                    target=self._work, name=f"{self._name}-{number}", daemon=True
                ).start()
            self._started = True

    def _work(self) -> None:
        while True:
            call, future, loop = self._queue.get()
            result: Any = None
            error: BaseException | None = None
            try:
                result = call()
            except BaseException as exc:  # handed to the awaiting coroutine, like to_thread
                error = exc
            # RuntimeError: the loop closed while the call ran, so nobody is left to answer.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, result, error)


CRYPTO = ThreadLane(os.cpu_count() or 2, "crypto")
"""The lane of request verification and webhook signing: one thread per core, since more
could not run at once."""
