"""§5.3 the consent page in a real browser: headless Chromium at a phone's size, driven by Playwright.

The whole hand-off as a User lives it: the personal agent starts a device authorization over
HTTP, the User opens ``verification_uri_complete`` in the browser, a stand-in Brand login on
loopback signs them in and auto-posts its assertion to the consent URL, the User unticks a
scope and allows, the browser follows the 303 to the landing page (which the page's CSP
``form-action`` must allow), and the personal agent's next token poll gets exactly the scopes
left ticked.

The browser is Debian's ``chromium`` (scripts/setup.sh installs it), never Playwright's own
download. Without it the tests skip on a workstation and fail under ``CI=true``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, Page, ViewportSize, async_playwright

from tests.support.consent import device_authorization, oauth_urls, poll_token
from tests.support.delegation import SCOPES, BrandLogin, enable_delegation
from tests.support.gateway import Harness, MakeGateway

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PHONE = ViewportSize(width=390, height=844)
BROWSER_WAIT_MS = 60_000
"""A bound, not a timing claim: the slowest step (Chromium's first page) on a busy 2-core machine."""
USER = "jane-4471"


@pytest.fixture
def chromium() -> Path:
    """The system's Chromium; missing, the test skips on a workstation and fails under CI."""
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: run scripts/setup.sh as root (Debian's chromium package)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return CHROMIUM


@pytest.fixture
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(chromium), args=CHROMIUM_ARGS, headless=True, timeout=BROWSER_WAIT_MS
        )
        yield launched
        await launched.close()


class StandInLogin:
    """The Brand's own login, reduced to its hand-off: it "signs in" :data:`USER` at once and
    auto-posts a fresh assertion for the ``user_code`` in ``return_to`` (a self-submitting form,
    with a button for browsers without JavaScript). It also serves the Brand's landing page."""

    def __init__(self, login: BrandLogin) -> None:
        self.login = login
        app = web.Application()
        app.router.add_get("/pact/login", self.login_page)
        app.router.add_get("/connected", self.landing_page)
        self.server = TestServer(app, host="127.0.0.1")

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    async def login_page(self, request: web.Request) -> web.Response:
        return_to = request.query["return_to"]
        parts = urlsplit(return_to)
        user_code = parse_qs(parts.query)["user_code"][0]
        consent_url = urlunsplit(parts._replace(query=""))
        assertion = self.login.assertion(user=USER, user_code=user_code, audience=consent_url)
        html = (
            '<!doctype html><html><head><meta name="viewport" content="width=device-width">'
            "<title>Acme sign-in</title></head><body>"
            f'<form method="post" action="{escape(return_to)}">'
            f'<input type="hidden" name="assertion" value="{escape(assertion)}">'
            '<noscript><button type="submit" id="continue">Continue</button></noscript></form>'
            "<script>document.forms[0].submit()</script></body></html>"
        )
        return web.Response(text=html, content_type="text/html")

    async def landing_page(self, request: web.Request) -> web.Response:
        return web.Response(
            text="<!doctype html><title>Acme</title><h1>Acme: done</h1>", content_type="text/html"
        )


@pytest.fixture
async def stand_in(brand_login: BrandLogin) -> AsyncIterator[StandInLogin]:
    login = StandInLogin(brand_login)
    await login.server.start_server()
    yield login
    await login.server.close()


async def delegating_gateway(
    make_gateway: MakeGateway, login: StandInLogin, provider_key_pem: str, **overrides: Any
) -> Harness:
    """A gateway on its real loopback address whose ``acme`` Brand logs in at the stand-in."""
    delegate = enable_delegation(login.login, provider_key_pem, **overrides)

    def edit(raw: dict[str, Any]) -> None:
        delegate(raw)
        raw["brands"][0]["delegation"]["login"]["url"] = f"{login.url}/pact/login"

    return await make_gateway(edit=edit, self_addressed=True)


async def open_consent(page: Page, verification_uri_complete: str) -> None:
    """Follow the PA's link through the Brand login to the consent form."""
    await page.goto(verification_uri_complete, timeout=BROWSER_WAIT_MS)
    await page.locator('input[name="scope"]').first.wait_for(timeout=BROWSER_WAIT_MS)


async def assert_fits_the_phone(page: Page, screenshot: Path) -> None:
    assert await page.screenshot(path=str(screenshot), full_page=True)  # kept in tmp_path to look at
    widths = await page.evaluate(
        "() => [document.documentElement.scrollWidth, document.body.scrollWidth, window.innerWidth]"
    )
    assert max(widths[:2]) <= widths[2] == PHONE["width"]  # no horizontal scroll
    for button in await page.locator("button").all():
        box = await button.bounding_box()
        assert box is not None
        assert box["height"] >= 44  # a comfortable tap target


async def test_s5_3_consent_in_a_phone_browser_grants_what_stays_ticked(
    make_gateway: MakeGateway, stand_in: StandInLogin, provider_key_pem: str, browser: Browser, tmp_path: Path
) -> None:
    gw = await delegating_gateway(make_gateway, stand_in, provider_key_pem)
    started = await device_authorization(gw)
    context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = await context.new_page()
    await open_consent(page, started["verification_uri_complete"])

    boxes = page.locator('input[type="checkbox"][name="scope"]')
    assert await boxes.count() == len(SCOPES)
    for index, scope_id in enumerate(SCOPES):
        box = boxes.nth(index)
        assert await box.get_attribute("value") == scope_id
        assert await box.is_visible()
        assert await box.is_checked()
    assert await page.get_by_text(SCOPES["profile:read"], exact=True).is_visible()  # verbatim
    assert await page.get_by_text("Acme Support").first.is_visible()
    await assert_fits_the_phone(page, tmp_path / "consent.png")

    await page.locator('input[name="scope"][value="orders:cancel"]').uncheck()
    await page.locator('button[name="decision"][value="allow"]').click()
    landing = oauth_urls(gw).landing
    await page.wait_for_url(lambda url: url.startswith(landing), timeout=BROWSER_WAIT_MS)
    query = parse_qs(urlsplit(page.url).query)
    assert query == {"status": ["approved"], "scope": ["orders:read profile:read"]}
    assert await page.get_by_role("heading", name="You're connected").is_visible()
    await assert_fits_the_phone(page, tmp_path / "landing.png")
    await context.close()

    status, answer = await poll_token(gw, started["device_code"])
    assert status == 200
    assert answer["scope"] == "orders:read profile:read"


async def test_s5_3_consent_without_javascript_lands_on_the_brand_page(
    make_gateway: MakeGateway, stand_in: StandInLogin, provider_key_pem: str, browser: Browser
) -> None:
    """No script anywhere: the Brand's button posts the hand-off, and the 303 to the Brand's own
    landing page (another origin) is allowed by the consent page's CSP ``form-action``."""
    landing = f"{stand_in.url}/connected"
    gw = await delegating_gateway(make_gateway, stand_in, provider_key_pem, landing_url=landing)
    started = await device_authorization(gw, ("orders:read", "orders:cancel"))
    context = await browser.new_context(viewport=PHONE, is_mobile=True, java_script_enabled=False)
    page = await context.new_page()
    await page.goto(started["verification_uri_complete"], timeout=BROWSER_WAIT_MS)
    await page.locator("#continue").click()
    await page.locator('input[name="scope"]').first.wait_for(timeout=BROWSER_WAIT_MS)
    await page.locator('button[name="decision"][value="allow"]').click()
    await page.wait_for_url(lambda url: url.startswith(landing), timeout=BROWSER_WAIT_MS)
    assert parse_qs(urlsplit(page.url).query) == {
        "status": ["approved"],
        "scope": ["orders:read orders:cancel"],
    }
    await context.close()

    status, answer = await poll_token(gw, started["device_code"])
    assert status == 200
    assert answer["scope"] == "orders:read orders:cancel"
