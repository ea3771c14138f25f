"""Signed calls from the shell (`bankrail api`): the merchant's credentials, found the way the
debugging tools find them, and one request sent with a token, a signature and an
Idempotency-Key, as an integration would send it."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bankrail.sandbox.trigger import recorded_demo, recorded_server_url
from bankrail.testing import BankrailAuth

__all__ = [
    "Credentials",
    "ShellError",
    "call",
    "credentials",
    "entry_line",
    "render",
    "request_body",
    "tail",
]


class ShellError(Exception):
    """A call that cannot be made as asked; the message says why and what to give instead."""


@dataclass(frozen=True)
class Credentials:
    """Where the server is and who calls it: client credentials and a signing key."""

    url: str
    client_id: str
    client_secret: str
    kid: str
    private_key_pem: str


def credentials(
    *,
    url: str | None,
    client_id: str | None,
    client_secret: str | None,
    key: Path | None,
    kid: str | None,
    data_dir: Path,
) -> Credentials:
    """The credentials given (flags or the environment, already merged by the caller), each
    missing one taken from the demo merchant of `data_dir`; raises ShellError naming what is
    still missing."""
    demo = recorded_demo(data_dir)
    key_path = key or (
        Path(str(demo["private_key_path"])) if demo.get("private_key_path") else None
    )
    found = {
        "--client-id": client_id or demo.get("client_id"),
        "--client-secret": client_secret or demo.get("client_secret"),
        "--kid": kid or demo.get("signing_key_id"),
        "--key": key_path,
    }
    missing = [flag for flag, value in found.items() if not value]
    if missing:
        raise ShellError(
            f"no {', '.join(missing)}: give them (or BANKRAIL_CLIENT_ID, BANKRAIL_CLIENT_SECRET, "
            f"BANKRAIL_SIGNING_KEY, BANKRAIL_KID), or run `bankrail init --data-dir {data_dir}` "
            "for a demo merchant"
        )
    assert key_path is not None
    try:
        pem = key_path.read_text()
    except OSError as exc:
        raise ShellError(f"cannot read the signing key {key_path}: {exc.strerror}") from None
    return Credentials(
        url=(url or recorded_server_url(data_dir)).rstrip("/"),
        client_id=str(found["--client-id"]),
        client_secret=str(found["--client-secret"]),
        kid=str(found["--kid"]),
        private_key_pem=pem,
    )


def request_body(data: str | None) -> bytes | None:
    """The body `--data` names: inline JSON, or `@FILE` for a file's contents; None when no
    data was given. Raises ShellError when the file cannot be read."""
    if data is None:
        return None
    if data.startswith("@"):
        try:
            return Path(data[1:]).read_bytes()
        except OSError as exc:
            raise ShellError(f"cannot read {data[1:]}: {exc.strerror}") from None
    return data.encode()


def call(
    who: Credentials,
    method: str,
    path: str,
    body: bytes | None,
    idempotency_key: str | None,
    timeout: float = 30.0,
) -> httpx.Response:
    """Send one request as the merchant: a bearer token, and, for every method but GET, a
    signature over the body and an Idempotency-Key (the one given, else a new one). Raises
    ShellError when the server cannot be reached or refuses the credentials."""
    headers: dict[str, str] = {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    auth = BankrailAuth(who.client_id, who.client_secret, who.kid, who.private_key_pem)
    target = path if path.startswith("/") else f"/{path}"
    try:
        with httpx.Client(base_url=who.url, auth=auth, timeout=timeout) as client:
            return client.request(method.upper(), target, content=body, headers=headers)
    except httpx.HTTPStatusError as exc:  # the token request was refused
        raise ShellError(str(exc)) from None
    except httpx.HTTPError as exc:
        raise ShellError(f"cannot reach {who.url}: {exc}") from None


def render(response: httpx.Response, pretty: bool) -> str:
    """`HTTP <status>` and then the body: indented JSON when `pretty` and the body is JSON,
    else the body exactly as it came."""
    text = response.text
    if pretty and text:
        with contextlib.suppress(ValueError):  # not JSON: as it came
            text = json.dumps(response.json(), indent=2, ensure_ascii=False)
    return f"HTTP {response.status_code}\n{text}" if text else f"HTTP {response.status_code}"


# An entry is written a moment after its request (the log is written in batches, by every
# API process): each poll asks again for this much before the newest entry printed, and
# prints what it had not printed yet.
_OVERLAP = timedelta(seconds=10)
_PAGES = 20  # at most this many pages of 200 new entries per poll


def entry_line(entry: dict[str, Any]) -> str:
    """One request-log entry as `logs tail` prints it: time, method, path, status, duration
    and id (and `replayed` for a stored answer sent again)."""
    line = (
        f"{entry['created_at']}  {entry['method']:<6} {entry['path']}  {entry['status']}"
        f"  {entry['duration_ms']:.1f}ms  {entry['id']}"
    )
    return f"{line}  replayed" if entry.get("replayed") else line


def _newest(
    client: httpx.Client, filters: dict[str, str], since: datetime | None, pages: int = _PAGES
) -> Iterator[dict[str, Any]]:
    """The entries matching `filters` made at or after `since`, newest first, from at most
    `pages` pages."""
    params: dict[str, Any] = {**filters, "limit": 200}
    if since is not None:
        params["from"] = since.isoformat()
    for _ in range(pages):
        answer = client.get("/v3/request-log", params=params)
        if answer.status_code != 200:
            raise ShellError(f"GET /v3/request-log answered {answer.status_code}: {answer.text}")
        page = answer.json()
        yield from page["items"]
        cursor = page["pagination"]["next_cursor"]
        if cursor is None:
            return
        params["cursor"] = cursor


def tail(
    who: Credentials,
    *,
    status: str | None,
    path: str | None,
    emit: Callable[[str], None],
    ready: Callable[[], None] = lambda: None,
    interval: float = 0.5,
    polls: int | None = None,
) -> None:
    """Follow the merchant's request log: call `emit` with one line (`entry_line`) per entry
    made from now on that matches the filters, oldest first, polling every `interval`
    seconds (`ready` is called once what came before is known, and skipped); runs until
    interrupted (or for `polls` polls). Raises ShellError when the server cannot be reached,
    refuses the credentials or the filters."""
    filters = {name: value for name, value in (("status", status), ("path", path)) if value}
    auth = BankrailAuth(who.client_id, who.client_secret, who.kid, who.private_key_pem)
    printed: dict[str, datetime] = {}
    since: datetime | None = None
    try:
        with httpx.Client(base_url=who.url, auth=auth, timeout=30.0) as client:
            # What is there already is not followed: the newest page is only marked seen.
            for entry in _newest(client, filters, None, pages=1):
                printed[entry["id"]] = datetime.fromisoformat(entry["created_at"])
            ready()
            done = 0
            while polls is None or done < polls:
                if printed:
                    since = max(printed.values()) - _OVERLAP
                    printed = {k: at for k, at in printed.items() if at >= since}
                time.sleep(interval)
                fresh = []
                for entry in _newest(client, filters, since):
                    if entry["id"] not in printed:
                        printed[entry["id"]] = datetime.fromisoformat(entry["created_at"])
                        fresh.append(entry)
                for entry in reversed(fresh):  # oldest first
                    emit(entry_line(entry))
                done += 1
    except httpx.HTTPStatusError as exc:  # the token request was refused
        raise ShellError(str(exc)) from None
    except httpx.HTTPError as exc:
        raise ShellError(f"cannot reach {who.url}: {exc}") from None
