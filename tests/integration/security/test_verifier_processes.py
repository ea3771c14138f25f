"""Request signatures verified in worker processes (security.verifier): the same answers as
on threads, a worker that dies does not lose a verification, and closing leaves no process."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable

import pytest
from cryptography.hazmat.primitives import serialization

from bankrail.security import signing
from bankrail.security.verifier import VerifierProcesses
from support.processes import alive, children, command_line

pytestmark = pytest.mark.slow  # starts and kills worker processes

_PATH = "/v3/payouts"
_BODY = b'{"amount_in_minor": 100}'
_HEADERS = {"idempotency-key": "key-1"}


def _signed_inputs(
    path: str = _PATH, sent_body: bytes = _BODY
) -> tuple[bytes, bytes, tuple[bytes, ...]]:
    """A key's DER and the signature and inputs of a request signed with it over `path` and
    `_BODY`, sent to `_PATH` with `sent_body`."""
    private = signing.generate_private_key()
    signature = signing.sign_request(
        private,
        "kid-1",
        method="POST",
        path=path,
        headers=[("Idempotency-Key", "key-1")],
        body=_BODY,
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
