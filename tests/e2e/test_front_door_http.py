"""The front door over HTTP: `GET /` is an HTML page linking the console, the API reference,
the OpenAPI document and the error reference; `/docs` is Swagger UI whose every asset is
served by Bankrail itself; `/favicon.ico` is an icon (docs/console.md, "The front door")."""

from __future__ import annotations

import re

import httpx

from support.server import RunningServer


def _links(html: str) -> set[str]:
    return set(re.findall(r'(?:href|src)="([^"]+)"', html))


def test_the_front_door_links_what_a_newcomer_looks_for(server: RunningServer) -> None:
    answer = httpx.get(f"{server.base_url}/")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    links = _links(answer.text)
    assert {"/console", "/docs", "/openapi.json", "/errors"} <= links
    for link in links - {"#main"}:
        assert link.startswith("/"), link  # nothing from elsewhere
        followed = httpx.get(f"{server.base_url}{link}", follow_redirects=True)
        assert followed.status_code == 200, link  # /console: to its sign-in page


def test_the_api_reference_is_served_offline(server: RunningServer) -> None:
    answer = httpx.get(f"{server.base_url}/docs")
    assert answer.status_code == 200
    assert "SwaggerUIBundle" in answer.text
    assert "url: '/openapi.json'" in answer.text
    assets = _links(answer.text)
    assert "/docs/assets/swagger-ui-bundle.js" in assets
    for asset in assets:
        assert asset.startswith("/"), asset
        fetched = httpx.get(f"{server.base_url}{asset}")
        assert fetched.status_code == 200, asset
        assert fetched.content, asset


def test_the_favicon_is_an_icon(server: RunningServer) -> None:
    answer = httpx.get(f"{server.base_url}/favicon.ico")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "image/x-icon"
    assert answer.content[:4] == b"\x00\x00\x01\x00"  # an ICO file's header
