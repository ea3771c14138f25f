"""Process logging: readable lines in the sandbox, one JSON object per line in production.

Every line names the host and process it comes from (`BANKRAIL_HOST_ID` and the pid) and
carries the trace id of the request it was written for (`Svc-Trace-Id`), and
anything that looks like a credential (client secrets, bearer and resource tokens, JWTs) is
replaced by `[redacted]` before it is written, in both modes: the rule of core/redaction.py,
the one the request log applies too.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from datetime import UTC, datetime

import orjson

from bankrail.core.redaction import redact
from bankrail.core.tracing import trace_id_var

__all__ = ["configure_logging", "redact", "write_access_line"]

# What the logging module itself fills in from the code that logged: never request data,
# so not worth a pass of the patterns on every line.
_CODE_FIELDS = frozenset(
    (
        "name",
        "levelname",
        "pathname",
        "filename",
        "module",
        "funcName",
        "processName",
        "threadName",
        "taskName",
    )
)


class _TraceAndRedact(logging.Filter):
    def __init__(self, host: str) -> None:
        super().__init__()
        self._host = host

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the host and trace id, then redact every text field of the record (the
        message, the exception, and whatever the caller passed as `extra`, such as an access
        line's `path`), so that no formatter can write a credential whichever fields it uses."""
        record.host = self._host
        trace_id = trace_id_var.get()
        record.trace_id = trace_id or None
        record.trace = trace_id or "-"
        record.msg, record.args = record.getMessage(), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        fields = vars(record)
        for name, value in fields.items():
            if isinstance(value, str) and name not in _CODE_FIELDS:
                fields[name] = redact(value)
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


_access = logging.getLogger("bankrail.access")
_clock: list[object] = [-1, ""]  # the second last printed, and its HH:MM:SS


def write_access_line(message: str) -> None:
    """Print one sandbox access line on stderr: the time (HH:MM:SS), then `message`,
    redacted as every record is; nothing when BANKRAIL_LOG_LEVEL is above INFO.

    It runs once per request, so it makes no log record (whose making and formatting cost
    several times the line itself) and formats the time once a second."""
    if not _access.isEnabledFor(logging.INFO):
        return
    now = int(time.time())
    if now != _clock[0]:
        _clock[:] = [now, time.strftime("%H:%M:%S", time.localtime(now))]
    sys.stderr.write(f"{_clock[1]} {redact(message)}\n")
