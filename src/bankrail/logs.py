"""Process logging: readable lines in the sandbox, one JSON object per line in production.

Every line names the host and process it comes from (`BANKRAIL_HOST_ID` and the pid) and
carries the trace id of the request it was written for (`Svc-Trace-Id`), and
anything that looks like a credential (client secrets, bearer and resource tokens, JWTs) is
replaced by `[redacted]` before it is written, in both modes.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
from datetime import UTC, datetime

import orjson

from bankrail.core.tracing import trace_id_var

__all__ = ["configure_logging", "redact"]

_SECRET_PATTERNS = (
    # key=value pairs in forms, query strings and reprs
    re.compile(
        r"(?i)\b(client_secret|access_token|resource_token|refresh_token|admin_token|"
        r"password|secret|token)([\"']?\s*[=:]\s*[\"']?)([^\s&\"',;}]+)"
    ),
    re.compile(r"(?i)\b(bearer)(\s+)([A-Za-z0-9._~+/=-]+)"),
    re.compile(r"()()\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*"),
)


def redact(text: str) -> str:
    """`text` with every credential-like value replaced by `[redacted]`."""
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}[redacted]", text)
    return text


class _TraceAndRedact(logging.Filter):
    def __init__(self, host: str) -> None:
        super().__init__()
        self._host = host

    def filter(self, record: logging.LogRecord) -> bool:
        record.host = self._host
        trace_id = trace_id_var.get()
        record.trace_id = trace_id or None
        record.trace = trace_id or "-"
        message = redact(record.getMessage())
        record.msg, record.args = message, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


class _JsonFormatter(logging.Formatter):
    _EXTRA = ("method", "path", "status", "duration_ms")

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "trace_id": getattr(record, "trace_id", None),
            "host": getattr(record, "host", None),
            "pid": record.process,
        }
        for name in self._EXTRA:
            if hasattr(record, name):
                document[name] = getattr(record, name)
        if record.exc_text:
            document["exception"] = record.exc_text
        return orjson.dumps(document).decode()


def configure_logging(production: bool, host: str | None = None) -> None:
    """Send every logger's records to stderr: JSON lines in production, text otherwise;
    each names `host` (the machine's name by default) and the pid. The level comes from
    BANKRAIL_LOG_LEVEL (default INFO)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_TraceAndRedact(host or socket.gethostname()))
    if production:
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter(
                "%(asctime)s %(host)s[%(process)d] %(levelname)s %(name)s [%(trace)s]: %(message)s"
            )
        )
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(os.environ.get("BANKRAIL_LOG_LEVEL", "INFO").upper())
    _configure_access_lines(production, host)


def _configure_access_lines(production: bool, host: str | None) -> None:
    """In the sandbox, the access log's records (http/middleware.py, `log_access_line`) are
    printed as the time then the message alone, as uvicorn prints its own; in production
    they are JSON lines like every other record."""
    access = logging.getLogger("bankrail.access")
    for existing in list(access.handlers):
        access.removeHandler(existing)
    access.propagate = production
    if production:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_TraceAndRedact(host or socket.gethostname()))
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    access.addHandler(handler)
