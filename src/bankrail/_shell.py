"""Signed calls from the shell (`bankrail api`): the merchant's credentials, found the way the
debugging tools find them, and one request sent with a token, a signature and an
Idempotency-Key, as an integration would send it."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import httpx

from bankrail.sandbox.trigger import recorded_demo, recorded_server_url
from bankrail.testing import BankrailAuth

__all__ = ["Credentials", "ShellError", "call", "credentials", "render", "request_body"]


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
