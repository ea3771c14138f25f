"""Request signatures verified in worker processes (security.verifier): the same answers as
on threads, a worker that dies does not lose a verification, and closing leaves no process."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import threading
from collections.abc import AsyncIterator, Callable

import pytest
from cryptography.hazmat.primitives import serialization

from bankrail.security import signing
from bankrail.security.verifier import VerifierProcesses, _request_frame, _serve
from support.processes import alive, children, command_line

pytestmark = pytest.mark.slow  # starts and kills worker processes

_PATH = "/v3/payouts"
_BODY = b'{"amount_in_minor": 100}'
_HEADERS = {"idempotency-key": "key-1"}


def _signed_inputs(
    path: str = _PATH, sent_body: bytes = _BODY, signed_body: bytes = _BODY
) -> tuple[bytes, bytes, tuple[bytes, ...]]:
    """A key's DER and the signature and inputs of a request signed with it over `path` and
    `signed_body`, sent to `_PATH` with `sent_body`."""
    private = signing.generate_private_key()
    signature = signing.sign_request(
        private,
        "kid-1",
        method="POST",
        path=path,
        headers=[("Idempotency-Key", "key-1")],
        body=signed_body,
    )
    der, inputs = signing.verification_inputs(
        signing.parse_signature(signature),
        method="POST",
        path=_PATH,
        headers=_HEADERS,
        body=sent_body,
        required_headers=("Idempotency-Key",),
    )
    key_der = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return key_der, der, inputs


async def _until(condition: Callable[[], bool], timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


@pytest.fixture
async def verifier() -> AsyncIterator[VerifierProcesses]:
    processes = VerifierProcesses(2)
    try:
        yield processes
    finally:
        await processes.close()


async def test_a_signed_request_verifies_and_a_changed_one_does_not(
    verifier: VerifierProcesses,
) -> None:
    key_der, der, inputs = _signed_inputs()
    assert await verifier.verify(key_der, der, inputs)
    changed_key, changed_der, changed = _signed_inputs(sent_body=_BODY.replace(b"100", b"900"))
    assert not await verifier.verify(changed_key, changed_der, changed)
    other_key, _, _ = _signed_inputs()
    assert not await verifier.verify(other_key, der, inputs)
    assert len(verifier.pids) == 2


async def test_any_one_input_is_enough(verifier: VerifierProcesses) -> None:
    # Signed over the path with a trailing slash: the second input (the alternate path) holds.
    key_der, der, inputs = _signed_inputs(path=_PATH + "/")
    assert not await verifier.verify(key_der, der, inputs[:1])
    assert await verifier.verify(key_der, der, inputs)


async def test_a_verification_whose_request_went_away_costs_the_others_nothing(
    verifier: VerifierProcesses,
) -> None:
    key_der, der, inputs = _signed_inputs()
    assert await verifier.verify(key_der, der, inputs)  # the workers are running
    asked = [asyncio.create_task(verifier.verify(key_der, der, inputs)) for _ in range(6)]
    await asyncio.sleep(0)  # one step each: every one has sent its work to a worker
    assert len(verifier._futures) == 6
    asked[2].cancel()
    with pytest.raises(asyncio.CancelledError):
        await asked[2]
    # Its answer comes and is dropped; the others are answered, and the next one too.
    assert await asyncio.gather(*asked[:2], *asked[3:]) == [True] * 5
    assert await verifier.verify(key_der, der, inputs)
    await _until(lambda: not verifier._futures)
    assert len(verifier.pids) == 2


async def test_verifications_a_dead_worker_held_are_answered_and_the_worker_replaced(
    verifier: VerifierProcesses,
) -> None:
    key_der, der, inputs = _signed_inputs()
    assert await verifier.verify(key_der, der, inputs)
    dead = verifier.pids
    for pid in dead:
        os.kill(pid, signal.SIGKILL)
    # Sent to the killed workers before this process has seen them go.
    answers = [
        verifier.verify(key_der, der, inputs if n % 2 == 0 else inputs[::-1][:1]) for n in range(20)
    ]
    verified = await asyncio.wait_for(asyncio.gather(*answers), timeout=30)
    assert verified == [n % 2 == 0 for n in range(20)]
    await _until(lambda: len(verifier.pids) == 2)  # replacements start after the answers
    assert set(verifier.pids).isdisjoint(dead)
    assert all(alive(pid) for pid in verifier.pids)
    assert await verifier.verify(key_der, der, inputs)


async def test_closing_stops_every_worker_and_refuses_more_work() -> None:
    verifier = VerifierProcesses(2)
    key_der, der, inputs = _signed_inputs()
    assert await verifier.verify(key_der, der, inputs)
    pids = verifier.pids
    await verifier.close()
    assert not any(alive(pid) for pid in pids)
    with pytest.raises(RuntimeError):
        await verifier.verify(key_der, der, inputs)


async def test_closing_while_a_replacement_starts_leaves_no_process() -> None:
    verifier = VerifierProcesses(1)
    key_der, der, inputs = _signed_inputs()
    assert await verifier.verify(key_der, der, inputs)
    (dead,) = verifier.pids
    answer = verifier.verify(key_der, der, inputs)
    os.kill(dead, signal.SIGKILL)
    assert await asyncio.wait_for(answer, timeout=30)
    await verifier.close()  # the replacement may be starting right now
    assert verifier.pids == []
    assert not any(
        alive(pid) and "bankrail.security.verifier" in _command(pid)
        for pid in children([os.getpid()])
    )


def _command(pid: int) -> str:
    try:
        return command_line(pid)
    except OSError:
        return ""


def test_at_least_one_process() -> None:
    with pytest.raises(ValueError, match="at least one"):
        VerifierProcesses(0)


async def test_verifications_sent_together_are_each_answered_for_their_own_request(
    verifier: VerifierProcesses,
) -> None:
    # Sent in one turn of the loop, they reach each worker as one write: every answer must
    # still be its own request's.
    signed = [_signed_inputs() for _ in range(5)]
    changed = [_signed_inputs(sent_body=_BODY.replace(b"100", b"900")) for _ in range(5)]
    asked = [
        (work, verdict)
        for i in range(16)
        for work, verdict in (
            (signed[i % 5], True),
            (changed[i % 5], False),
        )
    ]
    async with asyncio.timeout(30):  # an answer lost or given to another request never comes
        answers = await asyncio.gather(*(verifier.verify(*work) for work, _ in asked))
    assert answers == [verdict for _, verdict in asked]


async def test_a_request_larger_than_one_read_is_verified(verifier: VerifierProcesses) -> None:
    body = b'{"amount_in_minor": 100, "metadata": {"note": "' + b"x" * 600_000 + b'"}}'
    key_der, der, inputs = _signed_inputs(sent_body=body, signed_body=body)
    assert await verifier.verify(key_der, der, inputs)
    assert not await verifier.verify(key_der, der, tuple(data[:-1] for data in inputs))


def test_a_worker_answers_frames_however_they_are_split_and_stops_at_the_end() -> None:
    # The worker's own loop on a socket pair: frames written a few bytes at a time, and
    # several in one write, are each answered once, in order; closing our end ends it.
    ours, theirs = socket.socketpair()
    ours.settimeout(10)  # a lost frame fails the test instead of hanging it
    worker = threading.Thread(target=_serve, args=(theirs,), daemon=True)
    worker.start()
    signed, changed = _signed_inputs(), _signed_inputs(sent_body=_BODY.replace(b"100", b"900"))
    frames = [_request_frame(ident, signed if ident % 3 else changed) for ident in range(12)]
    wire = b"".join(struct.pack("!i", len(frame)) + frame for frame in frames)
    split = len(wire) // 3
    for at in range(0, split, 7):  # the first third in pieces of 7 bytes
        ours.sendall(wire[at : min(at + 7, split)])
    ours.sendall(wire[split:])  # the rest at once
    answers = ours.makefile("rb")
    got = []
    for _ in frames:
        (length,) = struct.unpack("!i", answers.read(4))
        got.append(struct.unpack("!Q?", answers.read(length)))
    assert got == [(ident, bool(ident % 3)) for ident in range(12)]
    ours.shutdown(socket.SHUT_WR)
    worker.join(timeout=10)
    assert not worker.is_alive()
    ours.close()
    theirs.close()
