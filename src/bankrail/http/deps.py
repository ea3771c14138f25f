"""Typed FastAPI dependencies every route may take: the process's AppContext."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from bankrail.http.context import AppContext

__all__ = ["AppContext", "Context", "get_context"]


def get_context(request: Request) -> AppContext:
    """The AppContext of the application serving this request."""
    context: AppContext = request.app.state.context
    return context


async def _context(request: Request) -> AppContext:
    # A coroutine on purpose: FastAPI runs a plain-`def` dependency in a worker thread, which
    # would cost a thread hop on every request for a one-attribute lookup.
    return get_context(request)


Context = Annotated[AppContext, Depends(_context)]
