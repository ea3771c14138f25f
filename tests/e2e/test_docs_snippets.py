"""Every code block of README.md and docs/*.md that a reader can run (```sh, ```bash,
```console and ```python) is run here as written, against a `bankrail serve --demo` that the
test starts, so that the docs cannot drift from what works. A block that cannot be run by a
test says so with an HTML comment on the line before it, `<!-- not run: <why> -->`; that list
stays short (MAX_NOT_RUN).

What a reader does, the test does: it works in a directory holding the data directory
(`./.bankrail`) and the virtual environment (`./.venv`, the test's own) as a checkout after
`./dev serve` does, with the environment's `bin` first on the PATH, and sets the variables
the docs tell the reader to set (`CLIENT_ID`, `CLIENT_SECRET`, `ADMIN_TOKEN`, `GBP_IBAN`,
`BANKRAIL_URL`, `BANKRAIL_ADMIN_TOKEN`) from the demo merchant. The docs' base URL,
http://127.0.0.1:8080, becomes the test server's. Blocks of one page run in order in the
same directory: a ```python block whose first line names a file (`# tests/test_x.py`) is
written there, for a later block to run. A block whose lines start with `$ ` runs those
lines only (the others show their output)."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import truelayer_signing

from support.api import Operator
from support.receiver import WebhookReceiver
from support.server import RunningServer, free_port

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUNNABLE = {"sh", "bash", "console", "python"}
DOCS_URL = "http://127.0.0.1:8080"
MAX_NOT_RUN = 11
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_NOT_RUN = re.compile(r"<!-- not run: (.+?) -->\s*$")
_FILE_LINE = re.compile(r"#\s*(\S+\.py)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    language: str
    code: str
    not_run: str | None

    @property
    def name(self) -> str:
        """Where it is, as `docs/api.md:12`."""
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The blocks of a page in a language a reader runs, with the reason given when one is
    not run."""
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        language = match.group(1).lower()
        if language not in RUNNABLE:
            continue
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = _NOT_RUN.search(before)
        line = text.count("\n", 0, match.start()) + 1
        found.append(
            Block(page, line, language, match.group(2), reason.group(1) if reason else None)
        )
    return found


def test_the_blocks_not_run_are_few_and_say_why() -> None:
    not_run = [b for page in PAGES for b in blocks(page) if b.not_run is not None]
    assert len(not_run) <= MAX_NOT_RUN, [b.name for b in not_run]
    assert all(b.not_run and b.not_run.strip() for b in not_run)
    # Every page with a runnable block has at least one that runs (the markers are
    # exceptions, not a way to silence a page).
    for page in PAGES:
        found = blocks(page)
        if found and all(b.not_run for b in found):
            assert len(found) <= 3, f"{page.name}: every block is marked not run"


@dataclass
class Reader:
    """The working directory and environment of a reader following the docs."""

    workdir: Path
    env: dict[str, str]
    url: str

    def run(self, block: Block) -> None:
        """Run one block as the reader would; fail with its output when it fails."""
        code = block.code.replace(DOCS_URL, self.url)
        if block.language == "python":
            first = code.split("\n", 1)[0]
            named = _FILE_LINE.fullmatch(first.strip())
            if named:
                target = self.workdir / named.group(1)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(code)
                return
            command = [sys.executable, "-"]
        else:
            prompts = [line[2:] for line in code.splitlines() if line.startswith("$ ")]
            if prompts:
                code = "\n".join(prompts) + "\n"
            command = ["bash", "-euo", "pipefail", "-s"]
        done = subprocess.run(
            command,
            input=code,
            capture_output=True,
            text=True,
            cwd=self.workdir,
            env=self.env,
            timeout=300,
            check=False,
        )
        output = f"{block.name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        assert done.returncode == 0, output
        # curl -s exits 0 on an error answer: none may come back.
        assert not re.search(r'"status":\s*[45]\d\d|"error":', done.stdout), output


@pytest.fixture(scope="module")
def reader() -> Iterator[Reader]:
    """A `bankrail serve --demo` on ./.bankrail of a fresh working directory, and the
    environment a reader has set from what it printed."""
    with tempfile.TemporaryDirectory(prefix="bankrail-docs-") as tmp:
        workdir = Path(tmp)
        (workdir / ".venv").symlink_to(sys.prefix)
        token = secrets.token_urlsafe(32)
        serving = RunningServer(
            data_dir=workdir / ".bankrail", port=free_port(), admin_token=token, env={}
        )
        serving.start("--demo")
        try:
            demo = json.loads((workdir / ".bankrail" / "demo-credentials.json").read_text())
            gbp = next(a for a in demo["merchant_accounts"] if a["currency"] == "GBP")
            iban = next(i["iban"] for i in gbp["account_identifiers"] if i["type"] == "iban")
            env = {k: v for k, v in os.environ.items() if not k.startswith("BANKRAIL_")}
            env.update(
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                CLIENT_ID=demo["client_id"],
                CLIENT_SECRET=demo["client_secret"],
                ADMIN_TOKEN=token,
                GBP_IBAN=iban,
                BANKRAIL_URL=serving.base_url,
                BANKRAIL_ADMIN_TOKEN=token,
            )
            yield Reader(workdir, env, serving.base_url)
        finally:
            serving.stop()


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_runnable_block_runs_as_written(reader: Reader, page: Path) -> None:
    for block in blocks(page):
        if block.not_run is None:
            reader.run(block)


def _blocks(page: str, containing: str, language: str) -> list[str]:
    return [
        m.group(2)
        for m in _FENCE.finditer((REPO / page).read_text())
        if m.group(1) == language and containing in m.group(2)
    ]


def _block(page: str, containing: str, language: str) -> str:
    found = _blocks(page, containing, language)
    assert len(found) == 1, (page, containing, len(found))
    return found[0]


def test_the_webhook_verification_of_the_docs_verifies_a_real_webhook(
    server: RunningServer,
    operator: Operator,
    receiver: WebhookReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BANKRAIL_URL", server.base_url)
    namespace: dict[str, Any] = {}
    exec(_block("docs/webhooks.md", "def verify_webhook", "python"), namespace)  # noqa: S102
    verify_webhook = namespace["verify_webhook"]
    merchant = operator.new_merchant()
    answer = operator.put(
        f"/admin/merchants/{merchant.merchant_id}/webhooks",
        {"payments_uri": f"{receiver.url}/hooks/v3", "payouts_uri": f"{receiver.url}/hooks/v1"},
    )
    assert answer.status_code == 200, answer.text
    assert operator.top_up(merchant.accounts["GBP"], 1_000).status_code == 201
    receiver.wait_for(lambda seen: len(seen) > 0)
    webhook = receiver.snapshot()[0]
    verify_webhook(webhook.path, webhook.headers, webhook.body)  # returns: it verifies
    with pytest.raises(truelayer_signing.TlSigningException):
        verify_webhook(webhook.path, webhook.headers, webhook.body.replace(b"}", b" }", 1))


def test_the_payout_body_of_the_api_docs_is_accepted(operator: Operator) -> None:
    merchant = operator.new_merchant()
    assert operator.top_up(merchant.accounts["GBP"], 10_000).status_code == 201
    for containing in ('"metadata": {"order": "42"}', '"amount_in_minor": 78'):
        request = next(
            block
            for block in _blocks("docs/api.md", containing, "json")
            if block.startswith('{\n  "merchant_account_id"')
        )
        body = json.loads(request)
        body["merchant_account_id"] = merchant.accounts["GBP"]["id"]
        answer = merchant.signed_post("/v3/payouts", body)
        assert answer.status_code == 202, answer.text
