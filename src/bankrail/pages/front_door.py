"""The front door: `GET /`, a page of links to everything a newcomer looks for, and
`/favicon.ico`, which every browser asks for."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse

from bankrail import __version__
from bankrail.http.deps import get_context
from bankrail.pages.errors import templates

router = APIRouter(include_in_schema=False)

FAVICON = Path(__file__).parent / "static" / "favicon.ico"


@router.get("/", response_class=HTMLResponse)
async def front_door(request: Request) -> HTMLResponse:
    """A small HTML page linking the console, the API reference (when it is on), the
    OpenAPI document and the error reference, saying which mode the service runs in."""
    settings = get_context(request).settings
    html = templates.get_template("front_door.html").render(
        version=__version__,
        sandbox=settings.sandbox,
        api_docs=settings.api_docs,
        public_url=settings.public_url,
    )
    return HTMLResponse(html)


@router.get("/favicon.ico")
async def favicon() -> FileResponse:
    """Bankrail's icon, cached by browsers for a day."""
    return FileResponse(
        FAVICON, media_type="image/x-icon", headers={"Cache-Control": "public, max-age=86400"}
    )
