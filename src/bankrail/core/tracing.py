"""The trace id of the request being served, for logs and problem documents."""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["trace_id_var"]

trace_id_var: ContextVar[str] = ContextVar("trace_id", default="")
"""Set by the service middleware for each request; empty outside one."""
