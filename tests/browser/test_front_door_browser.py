"""The front door and the API reference in Chromium with the network blocked to anything but
the server on loopback: `/` and `/docs` render all the same, and every link of the front door
and of the console's sign-in page (its footer's "API documentation" among them) leads to a
page that answers. Screenshots: test-artifacts/screenshots/front-door*.png."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from support.server import RunningServer

CheckPage = Callable[[Page, str], None]
Shot = Callable[[Page, str], Path]


@pytest.fixture
def offline_page(browser: Browser) -> Iterator[tuple[Page, list[str]]]:
    """A page whose every request to a host other than loopback is aborted, and the list of
    the URLs that were."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    blocked: list[str] = []

    def only_loopback(route: Route) -> None:
        if urlsplit(route.request.url).hostname in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort("internetdisconnected")

    context.route("**/*", only_loopback)
    page = context.new_page()
    yield page, blocked
    context.close()


def _hrefs(page: Page) -> list[str]:
    hrefs: list[str] = page.eval_on_selector_all(
        "a[href]", "links => links.map(a => a.getAttribute('href'))"
    )
    return [h for h in hrefs if not h.startswith("#")]


def _all_answer(page: Page, base_url: str, hrefs: list[str]) -> None:
    for href in hrefs:
        answer = page.request.get(f"{base_url}{href}" if href.startswith("/") else href)
        assert answer.status == 200, (href, answer.status)


def test_front_door_and_api_reference_render_offline(
    offline_page: tuple[Page, list[str]], server: RunningServer, check_page: CheckPage, shot: Shot
) -> None:
    page, blocked = offline_page
    page.goto(f"{server.base_url}/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Bankrail is running")
    check_page(page, "front-door")
    hrefs = _hrefs(page)
    assert {"/console", "/docs", "/openapi.json", "/errors"} <= set(hrefs)
    _all_answer(page, server.base_url, hrefs)

    page.get_by_role("link", name="API reference").click()
    page.wait_for_url(f"{server.base_url}/docs")
    # Swagger UI drew the document: its title and an operation of the payments API.
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Bankrail")
    expect(page.locator(".opblock-summary-path", has_text="/v3/payouts").first).to_be_visible()
    shot(page, "front-door-api-reference")
    assert blocked == []


def test_the_console_links_work(
    offline_page: tuple[Page, list[str]], server: RunningServer
) -> None:
    page, blocked = offline_page
    page.goto(f"{server.base_url}/console")
    hrefs = _hrefs(page)
    assert "/docs" in hrefs
    _all_answer(page, server.base_url, hrefs)
    page.get_by_role("link", name="API documentation").click()
    page.wait_for_url(f"{server.base_url}/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Bankrail")
    favicon = page.request.get(f"{server.base_url}/favicon.ico")
    assert favicon.status == 200
    assert blocked == []
