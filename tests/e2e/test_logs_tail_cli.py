"""`bankrail logs tail` against a running server, as a subprocess: it follows the merchant's
new requests (only those matching its filters), one line each, oldest first, and Ctrl-C ends
it with exit 0 and no traceback."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from support.api import MerchantClient, Operator
from support.server import RunningServer

pytestmark = pytest.mark.slow


def _lines(stream: IO[str]) -> queue.Queue[str]:
    """The lines of `stream` as they come, read by a thread."""
    found: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            found.put(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    return found


@pytest.fixture
def key_file(operator: Operator) -> Iterator[tuple[MerchantClient, Path]]:
    merchant = operator.new_merchant()
    with tempfile.TemporaryDirectory(prefix="bankrail-logs-tail-") as tmp:
        key = Path(tmp) / "key.pem"
        key.write_text(merchant.private_key_pem)
        yield merchant, key


def test_follows_new_matching_requests_and_ends_cleanly_on_ctrl_c(
    server: RunningServer, key_file: tuple[MerchantClient, Path]
) -> None:
    merchant, key = key_file
    before = f"/v3/payouts/{uuid.uuid4()}"
    assert merchant.get(before).status_code == 404  # made before: not followed
    env = {k: v for k, v in os.environ.items() if not k.startswith("BANKRAIL_")}
    env["BANKRAIL_CLIENT_SECRET"] = merchant.client_secret  # the environment works too
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bankrail",
            "logs",
            "tail",
            "--status",
            "4xx",
            "--path",
            "/v3/payouts",
            "--url",
            server.base_url,
            "--client-id",
            merchant.client_id,
            "--key",
            str(key),
            "--kid",
            merchant.kid,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        out, err = _lines(child.stdout), _lines(child.stderr)  # type: ignore[arg-type]
        assert "following the request log" in err.get(timeout=30)
        missing = [f"/v3/payouts/{uuid.uuid4()}" for _ in range(2)]
        # It knows what came before: these are new.
        assert merchant.get(missing[0]).status_code == 404
        assert merchant.get("/v3/merchant-accounts").status_code == 200  # filtered out
        assert merchant.get(missing[1]).status_code == 404
        lines = [out.get(timeout=30), out.get(timeout=30)]
        for line, path in zip(lines, missing, strict=True):
            fields = line.split()
            assert fields[1:4] == ["GET", path, "404"], line
            assert fields[4].endswith("ms")
            uuid.UUID(fields[5])
        assert before not in "\n".join(lines)

        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=30) == 0
        rest = []
        while not err.empty():
            rest.append(err.get())
        assert not any("Traceback" in line for line in rest), rest
        assert out.empty()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
