"""Unit tests for bankrail.core.logs: credentials (client secrets, bearer and resource tokens,
JWTs) are replaced by `[redacted]` before anything is written, whatever shape they come in
(form or query string, JSON body, Authorization header); in production every line is one
JSON object carrying the trace id of the request it was written for (`trace_id`, null outside
a request); in the sandbox lines are text with the trace id in brackets.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bankrail.core.logs import configure_logging, redact, write_access_line
from bankrail.core.problems import IDEMPOTENCY_CONCURRENCY, problem_title_var
from bankrail.core.tracing import trace_id_var
from bankrail.http.middleware import access_line
from bankrail.http.problems import problem_document

SECRET = "cs-Vq3xT9kLmN2pR7sW"
JWT = (
    "eyJhbGciOiJFUzUxMiIsImtpZCI6ImsxIn0"
    ".eyJzdWIiOiJjbGllbnQtMSIsInNjb3BlIjoicGF5bWVudHMifQ"
    ".AbC-dEf_GhI"
)


# --- redact() ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (
            f"grant_type=client_credentials&client_id=abc&client_secret={SECRET}&scope=payments",
            ["grant_type=client_credentials", "client_id=abc", "scope=payments"],
        ),
        (f"/connect/token?client_secret={SECRET}&client_id=abc", ["client_id=abc"]),
        (f"GET /v3/payouts?access_token={SECRET}", ["GET /v3/payouts"]),
        (f"resource_token={SECRET}", []),
        (f"refresh_token = {SECRET}", []),
        (f"admin_token:{SECRET}", []),
        (f"password={SECRET}", []),
        (f"CLIENT_SECRET={SECRET}", []),
        (f"client_secret={SECRET.replace('-', '%2D')}", []),  # percent-encoded
        (f"Authorization: Bearer {SECRET}", ["Authorization: Bearer"]),
        (f"authorization: bearer {JWT}", ["authorization: bearer"]),
        (f"headers={{'authorization': 'Bearer {SECRET}'}}", ["headers="]),
        (f"token {JWT} was refused", ["was refused"]),
        (f"signature of {JWT}", ["signature of"]),
    ],
)
def test_credentials_in_forms_headers_and_jwts_are_redacted(text: str, kept: list[str]) -> None:
    redacted = redact(text)
    assert SECRET not in redacted
    assert SECRET.replace("-", "%2D") not in redacted
    assert JWT not in redacted
    assert "eyJ" not in redacted
    assert "[redacted]" in redacted
    for part in kept:
        assert part in redacted


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"client_id": "abc", "client_secret": SECRET}),
        json.dumps({"client_id": "abc", "client_secret": SECRET}, separators=(",", ":")),
        json.dumps({"access_token": SECRET, "token_type": "Bearer", "expires_in": 3600}),
        json.dumps({"resource_token": SECRET}),
        str({"client_secret": SECRET}),  # a dict's repr, as an f-string or %r would log it
    ],
    ids=["json", "compact-json", "token-answer", "resource-token", "dict-repr"],
)
def test_credentials_in_json_bodies_are_redacted(text: str) -> None:
    assert SECRET not in redact(text)


def test_ordinary_text_is_left_alone() -> None:
    text = (
        'payout 5b1f executed: {"amount_in_minor": 1000, "currency": "GBP"} '
        "status=200 client_id=abc-123 tokens_left=3"
    )
    assert redact(text) == text


# --- configure_logging() -----------------------------------------------------------------------


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """Put the root logger's handlers and level back after a test reconfigures it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def _json_lines(text: str) -> list[dict[str, Any]]:
    lines = text.splitlines()
    assert lines, "nothing was logged"
    documents = []
    for line in lines:
        document = json.loads(line)  # every line is a whole JSON object
        assert isinstance(document, dict), line
        documents.append(document)
    return documents


def test_production_writes_one_json_object_per_line_with_the_trace_id(
    capsys: pytest.CaptureFixture[str],
    restored_logging: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("BANKRAIL_LOG_LEVEL", raising=False)
    configure_logging(production=True)
    log = logging.getLogger("bankrail.test")
    token = trace_id_var.set("5f2c1e0d9a8b7c6d5e4f3a2b1c0d9e8f")
    try:
        log.info("token issued for %s with client_secret=%s", "client-1", SECRET)
        log.warning("line two\nwith a newline, Bearer %s", JWT)
        logging.getLogger("bankrail.access").info(
            "GET /v3/payouts 200",
            extra={"method": "GET", "path": "/v3/payouts", "status": 200, "duration_ms": 1.5},
        )
    finally:
        trace_id_var.reset(token)
    log.info("outside any request")
    log.debug("below the default level")

    output = capsys.readouterr().err
    assert SECRET not in output
    assert JWT not in output
    first, second, access, outside = _json_lines(output)
    assert first["message"] == "token issued for client-1 with client_secret=[redacted]"
    assert first["level"] == "info"
    assert first["logger"] == "bankrail.test"
    assert first["trace_id"] == "5f2c1e0d9a8b7c6d5e4f3a2b1c0d9e8f"
    assert first["pid"] == os.getpid()
    assert first["host"] == socket.gethostname()
    assert first["ts"].endswith("+00:00")
    assert second["level"] == "warning"
    assert second["message"] == "line two\nwith a newline, Bearer [redacted]"
    assert second["trace_id"] == first["trace_id"]
    assert access["trace_id"] == first["trace_id"]
    assert {k: access[k] for k in ("method", "path", "status", "duration_ms")} == {
        "method": "GET",
        "path": "/v3/payouts",
        "status": 200,
        "duration_ms": 1.5,
    }
    assert "trace_id" in outside
    assert outside["trace_id"] is None
    assert outside["message"] == "outside any request"


def test_an_exception_is_logged_in_the_same_json_line_and_redacted(
    capsys: pytest.CaptureFixture[str], restored_logging: None
) -> None:
    configure_logging(production=True)
    token = trace_id_var.set("feedface")
    try:
        try:
            raise ValueError(f"bad form: client_secret={SECRET}")
        except ValueError:
            logging.getLogger("bankrail.test").exception("unhandled error on POST /x")
    finally:
        trace_id_var.reset(token)
    output = capsys.readouterr().err
    assert SECRET not in output
    (document,) = _json_lines(output)
    assert document["level"] == "error"
    assert document["trace_id"] == "feedface"
    assert "Traceback" in document["exception"]
    assert "ValueError: bad form: client_secret=[redacted]" in document["exception"]


def test_every_field_of_a_record_is_redacted_not_only_the_message(
    capsys: pytest.CaptureFixture[str], restored_logging: None
) -> None:
    """An access line's `path` (a token written into a URL path) and the trace id (taken from
    a request header) are written as fields of their own, and are redacted as the message is."""
    configure_logging(production=True)
    token = trace_id_var.set(f"Bearer {SECRET}")
    try:
        logging.getLogger("bankrail.access").info(
            "%s %s %s",
            "GET",
            f"/v3/merchant-accounts/{JWT}",
            200,
            extra={"method": "GET", "path": f"/v3/merchant-accounts/{JWT}", "status": 200},
        )
    finally:
        trace_id_var.reset(token)
    output = capsys.readouterr().err
    (document,) = _json_lines(output)
    assert JWT not in output
    assert SECRET not in output
    assert "eyJ" not in output
    assert document["path"] == "/v3/merchant-accounts/[redacted]"
    assert document["message"] == "GET /v3/merchant-accounts/[redacted] 200"
    assert document["trace_id"] == "Bearer [redacted]"
    assert document["status"] == 200


def test_the_sandbox_writes_text_lines_with_the_trace_id_and_redacts_too(
    capsys: pytest.CaptureFixture[str], restored_logging: None
) -> None:
    configure_logging(production=False)
    log = logging.getLogger("bankrail.test")
    token = trace_id_var.set("abc123")
    try:
        log.info("Authorization: Bearer %s", SECRET)
    finally:
        trace_id_var.reset(token)
    log.info("idle")
    inside, outside = capsys.readouterr().err.splitlines()
    assert SECRET not in inside
    assert inside.endswith("INFO bankrail.test [abc123]: Authorization: Bearer [redacted]")
    assert f" {socket.gethostname()}[{os.getpid()}] INFO " in inside
    assert outside.endswith("INFO bankrail.test [-]: idle")


def test_the_sandbox_access_line_is_time_method_path_status_ms_and_the_problems_title(
    capsys: pytest.CaptureFixture[str], restored_logging: None
) -> None:
    configure_logging(production=False)
    log_access_line = access_line(write_access_line)
    began = time.perf_counter()
    for path, status in (("/healthz", 200), ("/v3/payouts/x", 404), ("/v3/payouts", 409)):
        context = contextvars.copy_context()  # one request's, as the server gives each
        if status == 409:
            # The renderer's title, not the catalogue's first for the status.
            context.run(problem_document, IDEMPOTENCY_CONCURRENCY, "d", "http://x")
        context.run(log_access_line, {"method": "GET", "path": path}, status, began)
    ok, missing, conflict = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\d GET /healthz 200 \d+\.\d ms", ok), ok
    # No problem rendered here (a stored answer replayed): the catalogue's title.
    assert re.fullmatch(r"\d\d:\d\d:\d\d GET /v3/payouts/x 404 \d+\.\d ms Not Found", missing)
    assert conflict.endswith(f" ms {IDEMPOTENCY_CONCURRENCY.title}"), conflict
    assert problem_title_var.get() is None, "each request's title stays in its own context"


def test_the_access_line_is_redacted_and_follows_the_level(
    capsys: pytest.CaptureFixture[str],
    restored_logging: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configure_logging(production=False)
    write_access_line(f"GET /v3/x/{JWT} 404 1.0 ms Not Found")
    monkeypatch.setenv("BANKRAIL_LOG_LEVEL", "warning")
    configure_logging(production=False)
    write_access_line("GET /healthz 200 1.0 ms")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(" GET /v3/x/[redacted] 404 1.0 ms Not Found"), line


def test_the_level_comes_from_the_environment(
    capsys: pytest.CaptureFixture[str],
    restored_logging: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BANKRAIL_LOG_LEVEL", "warning")
    configure_logging(production=True)
    logging.getLogger("bankrail.test").info("quiet")
    logging.getLogger("bankrail.test").warning("loud")
    (document,) = _json_lines(capsys.readouterr().err)
    assert document["message"] == "loud"
