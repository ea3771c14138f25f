"""Human-facing pages that need no sign-in: `/errors`."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from bankrail.core.problems import CATALOGUE

router = APIRouter(include_in_schema=False)

templates = Environment(
    loader=PackageLoader("bankrail.pages", "templates"),
    autoescape=select_autoescape(["html"]),
)


@router.get("/errors", response_class=HTMLResponse)
async def errors_page(request: Request) -> HTMLResponse:
    """Every problem type the API answers with, one anchored section each."""
    html = templates.get_template("errors.html").render(problems=CATALOGUE)
    return HTMLResponse(html)
