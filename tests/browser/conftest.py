"""Browser tests: Playwright driving the system Chromium (`/usr/bin/chromium`) against the
session's `bankrail serve`.

Without Chromium the browser tests are skipped with the reason, except in CI (`CI=true`),
where a missing browser fails them: CI must run them. Every page a test visits is saved as a
PNG under `test-artifacts/screenshots/` (see `shot`) and checked for the basics of access
(see `check_page`).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

from support.api import MerchantClient, Operator
from support.server import RunningServer

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 375, "height": 740}
REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO_ROOT / "test-artifacts" / "screenshots"

# Background steps (the service's workers, the result page's polling) take a moment; give
# assertions more than Playwright's default 5 s on a slow CI machine.
expect.set_options(timeout=10_000)


@pytest.fixture(scope="session", autouse=True)
def _require_chromium() -> None:
    """Skip (locally) or fail (in CI) every browser test when Chromium is missing."""
    if CHROMIUM.exists():
        return
    reason = (
        f"Chromium is not installed at {CHROMIUM}: browser tests need it "
        "(`./dev test` installs it with apt when run as root, or `apt-get install chromium`)."
    )
    if os.environ.get("CI") == "true":
        pytest.fail(reason + " CI=true, so this is a failure, not a skip.", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def playwright_driver(server: RunningServer) -> Iterator[Playwright]:
    """The Playwright driver, for one test module at a time.

    The sync API leaves its own event loop marked as running in this thread while the driver
    is alive, so no `asyncio.run()` (nor pytest-asyncio's loop) may run meanwhile: the server
    and its database (which use asyncio to start) come up first, and the driver is stopped
    when the module's tests are done rather than at the end of the session.
    """
    del server
    driver = sync_playwright().start()
    yield driver
    driver.stop()
    assert asyncio._get_running_loop() is None, "Playwright left its event loop running"


@pytest.fixture(scope="module")
def browser(playwright_driver: Playwright) -> Iterator[Browser]:
    """One headless Chromium per test module."""
    launched = playwright_driver.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS
    )
    yield launched
    launched.close()


def new_page(browser: Browser, *, phone: bool = False) -> Page:
    """A page in a fresh context: desktop 1280x800, or a 375x740 phone."""
    if phone:
        context = browser.new_context(
            viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=2
        )
    else:
        context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(15_000)
    return context.new_page()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A desktop-sized page in a new browser context."""
    opened = new_page(browser)
    yield opened
    opened.context.close()


@pytest.fixture
def phone_page(browser: Browser) -> Iterator[Page]:
    """A phone-sized (375x740) page in a new browser context."""
    opened = new_page(browser, phone=True)
    yield opened
    opened.context.close()


def shot(page: Page, name: str) -> Path:
    """Save a full-page PNG of what the page shows now as
    `test-artifacts/screenshots/<name>.png`."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


_ACCESS_BASICS = """
() => {
  const issues = [];
  if (document.documentElement.lang !== "en") issues.push("<html> has no lang=en");
  const viewport = document.querySelector('meta[name="viewport"]');
  if (!viewport || !/width=device-width/.test(viewport.content)) issues.push("no viewport meta");
  if (!document.title.trim()) issues.push("no title");
  if (document.querySelectorAll("h1").length !== 1) issues.push("not exactly one h1");
  for (const el of document.querySelectorAll("input:not([type=hidden]), select, textarea")) {
    if (!el.labels || el.labels.length === 0) issues.push("unlabelled field " + (el.id || el.name));
  }
  for (const el of document.querySelectorAll("[onclick], [role=button], a:not([href])")) {
    issues.push("not a real button/link: " + el.outerHTML.slice(0, 80));
  }
  for (const el of document.querySelectorAll("button")) {
    if (!el.textContent.trim() && !el.getAttribute("aria-label")) {
      issues.push("button without a name");
    }
  }
  for (const el of document.querySelectorAll("img")) {
    if (!el.hasAttribute("alt")) issues.push("img without alt: " + el.src);
  }
  const ids = Array.from(document.querySelectorAll("[id]"), (el) => el.id);
  for (const id of ids) {
    if (ids.indexOf(id) !== ids.lastIndexOf(id)) { issues.push("duplicate id " + id); break; }
  }
  if (document.documentElement.scrollWidth > window.innerWidth + 1) {
    issues.push("horizontal scrolling: " + document.documentElement.scrollWidth + "px wide");
  }
  return issues;
}
"""

_CONTRAST = """
() => {
  function parse(value) {
    const m = value.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 };
  }
  function luminance(c) {
    const f = (v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b);
  }
  function background(el) {
    for (; el; el = el.parentElement) {
      const c = parse(getComputedStyle(el).backgroundColor);
      if (c && c.a > 0) return c;
    }
    return { r: 255, g: 255, b: 255, a: 1 };
  }
  const issues = [];
  for (const el of document.querySelectorAll("body *")) {
    const hasText = Array.from(el.childNodes).some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!hasText || el.closest(".skip-link, .visually-hidden, [hidden]")) continue;
    const style = getComputedStyle(el);
    if (style.visibility === "hidden" || style.display === "none") continue;
    const fg = parse(style.color);
    if (!fg) continue;
    const l1 = luminance(fg), l2 = luminance(background(el));
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const size = parseFloat(style.fontSize), bold = parseInt(style.fontWeight, 10) >= 700;
    const large = size >= 24 || (bold && size >= 18.66);
    if (ratio < (large ? 3 : 4.5)) {
      issues.push(el.tagName + " '" + el.textContent.trim().slice(0, 40) + "' " + ratio.toFixed(2));
    }
  }
  return issues;
}
"""


def access_issues(page: Page) -> list[str]:
    """What the page gets wrong of the access basics: lang, viewport, one h1, labelled fields,
    real buttons, image alternatives, unique ids, no sideways scrolling, AA text contrast."""
    issues: list[str] = page.evaluate(_ACCESS_BASICS)
    issues += page.evaluate(_CONTRAST)
    return issues


def check_page(page: Page, name: str) -> None:
    """Screenshot the page and assert it meets the access basics."""
    shot(page, name)
    issues = access_issues(page)
    assert not issues, f"{name}: {issues}"


@pytest.fixture(scope="session")
def merchant_site() -> Iterator[str]:
    """A tiny merchant website on loopback that payers are returned to."""

    class Shop(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the http.server API
            body = (
                b'<!doctype html><html lang="en"><head><meta charset="utf-8">'
                b"<title>Shop</title></head><body><h1>Back at the shop</h1></body></html>"
            )
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Shop)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


class Payments:
    """Payments of one merchant, made and read as the merchant's integration would."""

    def __init__(self, server: RunningServer, merchant: MerchantClient, site: str) -> None:
        self.server = server
        self.merchant = merchant
        self.site = site

    def create(
        self,
        *,
        amount: int = 1234,
        currency: str = "GBP",
        selection: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A payment awaiting authorisation: `{id, resource_token, ...}`."""
        body = {
            "amount_in_minor": amount,
            "currency": currency,
            "payment_method": {
                "type": "bank_transfer",
                "provider_selection": selection or {"type": "user_selected"},
                "beneficiary": {
                    "type": "merchant_account",
                    "merchant_account_id": self.merchant.accounts[currency]["id"],
                },
            },
            "user": {"id": f"payer-{uuid.uuid4().hex[:8]}", "name": "Pat Payer"},
        }
        answer = self.merchant.signed_post("/v3/payments", body)
        assert answer.status_code == 201, answer.text
        created: dict[str, Any] = answer.json()
        return created

    def return_uri(self, order: str = "42") -> str:
        """Where the merchant wants its payer back (on the tiny merchant site)."""
        return f"{self.site}/shop/return?order={order}"

    def hpp_url(self, payment: dict[str, Any], return_uri: str | None = None, **extra: str) -> str:
        """The hosted payment page link the merchant sends its payer to."""
        query = {
            "payment_id": payment["id"],
            "resource_token": payment["resource_token"],
            "return_uri": return_uri or self.return_uri(),
            **extra,
        }
        return f"{self.server.base_url}/hpp/payments?{urlencode(query)}"

    def read(self, payment_id: str) -> dict[str, Any]:
        """The payment as the merchant reads it."""
        answer = self.merchant.get(f"/v3/payments/{payment_id}")
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    def wait_for(self, payment_id: str, status: str, timeout: float = 20) -> dict[str, Any]:
        """Poll the payment until it reaches `status`."""
        deadline = time.monotonic() + timeout
        while True:
            body = self.read(payment_id)
            if body["status"] == status or time.monotonic() > deadline:
                assert body["status"] == status, body
                return body
            time.sleep(0.1)


@pytest.fixture
def payments(server: RunningServer, operator: Operator, merchant_site: str) -> Payments:
    """A new merchant ("Acme Books") and helpers for its payments."""
    merchant = operator.new_merchant("Acme Books")
    return Payments(server, merchant, merchant_site)


@pytest.fixture(name="shot")
def shot_fixture() -> Callable[[Page, str], Path]:
    """`shot(page, name)`: save a screenshot as test-artifacts/screenshots/<name>.png."""
    return shot


@pytest.fixture(name="check_page")
def check_page_fixture() -> Callable[[Page, str], None]:
    """`check_page(page, name)`: screenshot the page and assert the access basics."""
    return check_page
