"""ES512 request verification in worker processes of their own.

Verifying a P-521 signature costs about 0.4 ms of arithmetic, which `cryptography` runs
without the GIL. On threads (core.threadlane) each verification still needs the GIL before
and after it, behind the event loop thread, and every answer waits for the loop: with one
API process under load a verification took 1.75 ms on its thread instead of 0.4, and a
request waited 11 ms for a free thread (docs/performance.md, "Settings measured here"). A
worker process has its own interpreter, so nothing there waits for this process's GIL; this
process only writes the request's inputs to a socket and reads one answer.

The request's signing inputs are built here (security.signing.verification_inputs); a worker
gets the public key (DER), the signature (DER) and the inputs, and answers whether any input
verifies. A worker that dies is replaced, and the verifications it had not answered are
done on the thread lane instead, so a request never fails because a worker did.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from bankrail.core.children import reap, spawn_module
from bankrail.core.threadlane import CRYPTO
from bankrail.security.signing import verify_any

__all__ = ["VerifierProcesses"]

log = logging.getLogger(__name__)

_LENGTH = struct.Struct("!i")  # each frame: its length, then the frame
_REQUEST = struct.Struct("!QHHB")  # id, key length, signature length, number of inputs
_INPUT = struct.Struct("!I")
_ANSWER = struct.Struct("!Q?")  # id, verified
_KEYS_PER_WORKER = 1_000

_Work = tuple[bytes, bytes, tuple[bytes, ...]]  # public key DER, signature DER, inputs


def _request_frame(ident: int, work: _Work) -> bytes:
    key_der, signature, inputs = work
    parts = [_REQUEST.pack(ident, len(key_der), len(signature), len(inputs)), key_der, signature]
    for data in inputs:
        parts += (_INPUT.pack(len(data)), data)
    return b"".join(parts)


def _parse_request(frame: bytes) -> tuple[int, _Work]:
    ident, key_length, signature_length, count = _REQUEST.unpack_from(frame)
    at = _REQUEST.size
    key_der = frame[at : at + key_length]
    at += key_length
    signature = frame[at : at + signature_length]
    at += signature_length
    inputs = []
    for _ in range(count):
        (length,) = _INPUT.unpack_from(frame, at)
        at += _INPUT.size
        inputs.append(frame[at : at + length])
        at += length
    return ident, (key_der, signature, tuple(inputs))


def _serve(sock: socket.socket) -> None:
    """A worker's loop: read (id, work) frames, answer (id, verified) frames, until EOF.
    Each answer is written as soon as it is known (docs/performance.md, "The verifier's
    answers")."""
    keys: dict[bytes, ec.EllipticCurvePublicKey] = {}
    incoming = sock.makefile("rb")
    while True:
        head = incoming.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            return  # the serving process closed its end, or exited
        (length,) = _LENGTH.unpack(head)
        ident, (key_der, signature, inputs) = _parse_request(incoming.read(length))
        key = keys.get(key_der)
        if key is None:
            if len(keys) >= _KEYS_PER_WORKER:
                keys.clear()
            key = keys[key_der] = _load_key(key_der)
        answer = _ANSWER.pack(ident, verify_any(key, signature, inputs))
        sock.sendall(_LENGTH.pack(len(answer)) + answer)


def _load_key(der: bytes) -> ec.EllipticCurvePublicKey:
    key = serialization.load_der_public_key(der)
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise TypeError("not an EC public key")
    return key


async def _verify_on_threads(work: _Work) -> bool:
    key_der, signature, inputs = work
    return await CRYPTO.run(partial(verify_any, _load_key(key_der), signature, inputs))


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    writer: asyncio.StreamWriter
    reader_task: asyncio.Task[None] | None = None
    pending: dict[int, _Work] = field(default_factory=dict)
    outgoing: list[bytes] = field(default_factory=list)  # frames not yet written

    def send(self, frame: bytes) -> None:
        """Write `frame` at the end of this iteration of the loop, with the others sent in it:
        one write (and one wake-up of the worker) for all the requests that arrived together.
        """
        if not self.outgoing:
            asyncio.get_running_loop().call_soon(self._flush)
        self.outgoing += (_LENGTH.pack(len(frame)), frame)

    def _flush(self) -> None:
        data = b"".join(self.outgoing)
        self.outgoing.clear()
        if not self.writer.is_closing():
            self.writer.write(data)


class VerifierProcesses:
    """`processes` worker processes, started on first use, that verify ES512 signatures."""

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError("at least one verifier process")
        self._size = processes
        self._workers: list[_Worker] = []
        self._futures: dict[int, asyncio.Future[bool]] = {}
        self._ids = itertools.count()
        self._starting: asyncio.Lock | None = None
        self._closed = False

    @property
    def pids(self) -> list[int]:
        """The process ids of the running workers."""
        return [worker.process.pid for worker in self._workers]

    async def verify(
        self, public_key_der: bytes, signature_der: bytes, inputs: Sequence[bytes]
    ) -> bool:
        """Whether the signature verifies over any of `inputs` with the key; answered by a
        worker process, or on the thread lane if its worker died first."""
        if self._closed:
            raise RuntimeError("the verifier processes are closed")
        if len(self._workers) < self._size:
            await self._start()
        work: _Work = (public_key_der, signature_der, tuple(inputs))
        ident = next(self._ids)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._futures[ident] = future
        worker = min(self._workers, key=lambda w: len(w.pending))
        worker.pending[ident] = work
        worker.send(_request_frame(ident, work))
        try:
            return await asyncio.shield(future)
        finally:
            self._futures.pop(ident, None)

    async def close(self) -> None:
        """Stop every worker (each exits when its socket closes) and wait for them."""
        self._closed = True
        if self._starting is not None:
            async with self._starting:
                pass  # a worker being started meanwhile is in the list once this returns
        workers, self._workers = self._workers, []
        for worker in workers:
            if worker.reader_task is not None:
                worker.reader_task.cancel()
            worker.writer.close()
        await asyncio.gather(
            *(w.reader_task for w in workers if w.reader_task is not None), return_exceptions=True
        )
        for worker in workers:
            await reap(worker.process, 2.0)

    async def _start(self) -> None:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            while len(self._workers) < self._size and not self._closed:
                self._workers.append(await self._spawn())

    async def _spawn(self) -> _Worker:
        process, reader, writer = await spawn_module(__name__)
        worker = _Worker(process, writer)
        worker.reader_task = asyncio.create_task(self._read(worker, reader))
        return worker

    async def _read(self, worker: _Worker, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
                ident, verified = _ANSWER.unpack(await reader.readexactly(length))
                worker.pending.pop(ident, None)
                future = self._futures.get(ident)
                if future is not None and not future.done():
                    future.set_result(bool(verified))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        if self._closed:
            return
        log.warning("a verifier process exited (code %s); starting another", worker.process.poll())
        with contextlib.suppress(ValueError):
            self._workers.remove(worker)
        worker.writer.close()
        for ident, work in worker.pending.items():
            task = asyncio.create_task(self._on_threads(ident, work))
            task.add_done_callback(lambda t: t.exception())
        worker.pending.clear()
        await asyncio.to_thread(worker.process.wait)  # reaped after its work was handed on
        await self._start()

    async def _on_threads(self, ident: int, work: _Work) -> None:
        future = self._futures.get(ident)
        if future is None or future.done():
            return
        try:
            verified = await _verify_on_threads(work)
        except Exception as exc:  # handed to the waiting request, as the worker's answer would be
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(verified)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the server, which stops us
    _serve(socket.socket(fileno=int(sys.argv[1])))
