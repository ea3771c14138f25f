"""Small assertions and helpers shared by the end-to-end tests (HTTP against `bankrail serve`)."""

from __future__ import annotations

import contextlib
import html
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from support.api import MerchantClient, Operator
from support.processes import pids, stat_fields
from support.waiting import wait_for

PROBLEM_TYPE = "application/problem+json"


def assert_problem(
    response: httpx.Response, status: int, title: str | None = None
) -> dict[str, Any]:
    """The response is an RFC 9457 problem with this status whose trace_id is the header's."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].split(";")[0].strip() == PROBLEM_TYPE, response.headers
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert isinstance(body["type"], str)
    assert "/errors#" in body["type"]
    assert isinstance(body["title"], str)
    assert body["title"]
    assert isinstance(body["detail"], str)
    assert body["trace_id"] == response.headers["svc-trace-id"]
    if title is not None:
        assert body["title"] == title
    return body


def assert_invalid(response: httpx.Response, *fields: str) -> dict[str, Any]:
    """A 400 Invalid Parameters problem whose `errors` names each of `fields`."""
    body = assert_problem(response, 400, "Invalid Parameters")
    errors = body.get("errors")
    assert isinstance(errors, dict)
    assert errors, body
    for name in fields:
        assert any(key == name or key.startswith(f"{name}.") for key in errors), (name, errors)
    return body


def bearer(token: str) -> dict[str, str]:
    """An Authorization header."""
    return {"Authorization": f"Bearer {token}"}


def fresh_token(merchant: MerchantClient, **form: str) -> dict[str, Any]:
    """A new /connect/token answer for the merchant's client (never the cached one)."""
    fields = {
        "grant_type": "client_credentials",
        "client_id": merchant.client_id,
        "client_secret": merchant.client_secret,
        **form,
    }
    answer = merchant.http.post("/connect/token", data=fields)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def merchant_sending_webhooks(operator: Operator, payments_uri: str, top_up: int) -> MerchantClient:
    """A new merchant with one GBP account, topped up by `top_up`, whose payments API
    webhooks go to `payments_uri`."""
    merchant = operator.new_merchant(currencies=("GBP",))
    webhooks = operator.put(
        f"/admin/merchants/{merchant.merchant_id}/webhooks", {"payments_uri": payments_uri}
    )
    assert webhooks.status_code == 200, webhooks.text
    assert operator.top_up(merchant.accounts["GBP"], top_up).status_code == 201
    return merchant


def account_by_currency(merchant: MerchantClient, currency: str) -> dict[str, Any]:
    """The merchant's account in `currency`, as GET /v3/merchant-accounts/{id} answers now."""
    account_id = merchant.accounts[currency]["id"]
    answer = merchant.http.get(
        f"/v3/merchant-accounts/{account_id}", headers=bearer(fresh_token(merchant)["access_token"])
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def identifier(account: dict[str, Any], kind: str) -> dict[str, Any]:
    """The account identifier of this type."""
    found = [i for i in account["account_identifiers"] if i["type"] == kind]
    assert len(found) == 1, account["account_identifiers"]
    return found[0]


def service_now(operator: Operator) -> datetime:
    """The service clock's current time."""
    answer = operator.get("/sandbox/clock")
    assert answer.status_code == 200, answer.text
    return parse_time(answer.json()["now"])


def parse_time(text: str) -> datetime:
    """An ISO 8601 UTC timestamp with a `Z` suffix."""
    assert text.endswith("Z"), text
    moment = datetime.fromisoformat(text[:-1] + "+00:00")
    return moment.astimezone(UTC)


def is_uuid(text: object) -> bool:
    """True when `text` is a UUID string."""
    try:
        uuid.UUID(str(text))
    except ValueError:
        return False
    return True


def get_record(merchant: MerchantClient, path: str) -> dict[str, Any]:
    """The JSON record the merchant reads at `path` (asserting the 200)."""
    answer = merchant.get(path)
    assert answer.status_code == 200, answer.text
    record: dict[str, Any] = answer.json()
    return record


def wait_record_status(
    merchant: MerchantClient, path: str, statuses: set[str], timeout: float = 20
) -> dict[str, Any]:
    """The record at `path` once its `status` is one of `statuses`."""

    def check() -> dict[str, Any] | None:
        record = get_record(merchant, path)
        return record if record["status"] in statuses else None

    return wait_for(check, timeout=timeout, what=f"{path} in {statuses}")


def processes_mentioning(path: Path) -> list[tuple[int, str]]:
    """Live processes (other than this one) whose command line contains `path`."""
    needle = str(path.resolve()).encode()
    found: list[tuple[int, str]] = []
    for pid in pids():
        if pid == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = stat_fields(pid)[0]
        except (OSError, IndexError):
            continue
        if state == "Z":  # a zombie has already exited
            continue
        if needle + b"/" in cmdline or needle + b"\0" in cmdline or cmdline.endswith(needle):
            found.append((pid, cmdline.replace(b"\0", b" ").decode(errors="replace")))
    return found


def end_processes_mentioning(path: Path) -> None:
    """End, by pid, processes left running for `path` (an embedded postmaster that its
    `serve` did not stop): a fast shutdown first (SIGINT), then SIGKILL."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        pids = [pid for pid, _ in processes_mentioning(path)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while pids and time.monotonic() < deadline:
            pids = [pid for pid, _ in processes_mentioning(path)]
            time.sleep(0.05)
        if not pids:
            return


@contextlib.contextmanager
def private_data_dir(prefix: str) -> Iterator[Path]:
    """A data directory for a server of a test's own, outside `/tmp/pytest-of-<user>`.

    Run as root, the embedded PostgreSQL runs as a system user that must traverse every
    parent directory; pytest strips group and other permissions from `pytest-of-<user>` when
    any session starts, so a concurrent pytest run would lock PostgreSQL out of a tmp_path.
    """
    with tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as tmp:
        path = Path(tmp) / "data"
        try:
            yield path
        finally:
            end_processes_mentioning(path)


def bankrail_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m bankrail <args>` run to its end (2 minutes at most), its output captured as
    text: the environment is this process's without its BANKRAIL_* settings, plus `env`."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("BANKRAIL_")}
    return subprocess.run(
        [sys.executable, "-m", "bankrail", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**child_env, **(env or {})},
        check=False,
    )


def page_field(page: httpx.Response, name: str) -> str:
    """The value of the hosted page's form field `name` (unescaped)."""
    found = re.search(rf'name="{name}" value="([^"]*)"', page.text)
    assert found, f"no field {name} in the page"
    return html.unescape(found.group(1))


def assert_hosted_page(answer: httpx.Response, status: int, *texts: str) -> None:
    """A hosted HTML page (never problem+json) with this status, the page headers (no store,
    no referrer, no framing, a trace id) and the texts."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("text/html"), answer.headers
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["referrer-policy"] == "no-referrer"
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    assert answer.headers["svc-trace-id"]
    assert '<html lang="en">' in answer.text
    for text in texts:
        assert text in html.unescape(answer.text), (text, answer.text)
