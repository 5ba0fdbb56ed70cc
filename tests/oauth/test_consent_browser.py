"""§5.3 the consent page in a real browser: headless Chromium at a phone's size, driven by Playwright.

The whole hand-off as a User lives it: the personal agent starts a device authorization over
HTTP, the User opens ``verification_uri_complete`` in the browser, a stand-in Brand login on
loopback signs them in and auto-posts its assertion to the consent URL, the User unticks a
scope and allows, the browser follows the 303 to the landing page (which the page's CSP
``form-action`` must allow), and the personal agent's next token poll gets exactly the scopes
left ticked. Every page the User sees is checked with axe-core (WCAG 2.1 AA) at a phone's size and
a desktop's, with RFC 9396 details shown as conditions of their scope too.

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
from playwright.async_api import Browser, BrowserContext, Page, ViewportSize, async_playwright

from tests.support.axe import assert_accessible
from tests.support.consent import (
    DETAIL_TYPES,
    device_authorization,
    oauth_urls,
    order,
    parse_consent_form,
    poll_token,
    post_decision,
    sign_in,
)
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
DESKTOP = ViewportSize(width=1280, height=800)
SIZES = pytest.mark.parametrize("size", [PHONE, DESKTOP], ids=["phone", "desktop"])
"""Issue 18: every page at a phone's size and a desktop's."""
BROWSER_WAIT_MS = 60_000
"""A bound, not a timing claim: the slowest step (Chromium's first page) on a busy 2-core machine."""
USER = "jane-4471"
ENTER_SETTLE_MS = 1_000
"""How long a pressed Enter is given to start a submission before the test says none started."""


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


async def new_page(browser: Browser, size: ViewportSize) -> tuple[BrowserContext, Page]:
    phone = size == PHONE
    context = await browser.new_context(viewport=size, is_mobile=phone, has_touch=phone)
    return context, await context.new_page()


async def assert_fits(page: Page, size: ViewportSize, screenshot: Path) -> None:
    """Readable at ``size`` with no sideways scrolling and comfortable tap targets; no axe violation."""
    assert await page.screenshot(path=str(screenshot), full_page=True)  # kept in tmp_path to look at
    widths = await page.evaluate(
        "() => [document.documentElement.scrollWidth, document.body.scrollWidth, window.innerWidth]"
    )
    assert max(widths[:2]) <= widths[2] == size["width"]  # no horizontal scroll
    for button in await page.locator("button").all():
        box = await button.bounding_box()
        assert box is not None
        assert box["height"] >= 44  # a comfortable tap target
    assert "Acme Support" in await page.title()  # the title names the Brand
    await assert_accessible(page)


def landing_query(url: str) -> dict[str, list[str]]:
    """The conformance notes' part of the landing URL (all but ``r``, the record's id)."""
    query = parse_qs(urlsplit(url).query)
    assert len(query.pop("r", [""])[0]) >= 43
    return query


@SIZES
async def test_s5_3_consent_in_a_browser_grants_what_stays_ticked(
    make_gateway: MakeGateway,
    stand_in: StandInLogin,
    provider_key_pem: str,
    browser: Browser,
    tmp_path: Path,
    size: ViewportSize,
) -> None:
    gw = await delegating_gateway(make_gateway, stand_in, provider_key_pem)
    started = await device_authorization(gw)
    context, page = await new_page(browser, size)
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
    assert await page.get_by_text(started["user_code"], exact=True).is_visible()  # RFC 8628 §3.3.1
    assert await page.get_by_text(USER, exact=True).is_visible()  # "Signed in to Acme Support as …"
    await assert_fits(page, size, tmp_path / "consent.png")

    await page.locator('input[name="scope"][value="orders:cancel"]').uncheck()
    await page.locator('button[name="decision"][value="allow"]').click()
    landing = oauth_urls(gw).landing
    await page.wait_for_url(lambda url: url.startswith(landing), timeout=BROWSER_WAIT_MS)
    assert landing_query(page.url) == {"status": ["approved"], "scope": ["orders:read profile:read"]}
    assert await page.get_by_role("heading", name="You're connected").is_visible()
    assert await page.get_by_role("listitem").count() == 2
    await assert_fits(page, size, tmp_path / "landing.png")
    await context.close()

    status, answer = await poll_token(gw, started["device_code"])
    assert status == 200
    assert answer["scope"] == "orders:read profile:read"


@SIZES
async def test_s5_3_enter_in_a_scope_checkbox_neither_allows_nor_ends_the_request(
    make_gateway: MakeGateway,
    stand_in: StandInLogin,
    provider_key_pem: str,
    browser: Browser,
    tmp_path: Path,
    size: ViewportSize,
) -> None:
    """Issue 18 (serious): a person tabs to a checkbox and presses Enter to untick it. The browser's
    implicit submission pressed the form's first button: Allow, granting every ticked scope. Issue
    32: then Deny, ending the request. Now nothing happens (the page's one script, allowed by its
    CSP hash): no request leaves the page, the box stays as it was, the authorization is still
    pending, and the person goes on to tick and Allow."""
    gw = await delegating_gateway(make_gateway, stand_in, provider_key_pem)
    started = await device_authorization(gw)
    context, page = await new_page(browser, size)
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    await open_consent(page, started["verification_uri_complete"])
    consent_url = page.url
    sent: list[str] = []
    page.on("request", lambda request: sent.append(f"{request.method} {request.url}"))
    for _ in range(10):
        await page.keyboard.press("Tab")
        if await page.evaluate("() => document.activeElement.type === 'checkbox'"):
            break
    focused = await page.evaluate(
        "() => { const box = document.activeElement; const card = box.closest('label');"
        " return [box.value, getComputedStyle(card).outlineStyle, getComputedStyle(box).outlineStyle]; }"
    )
    assert focused == [
        "orders:read",
        "solid",
        "solid",
    ]  # :focus-within on the card, :focus-visible on the box
    await page.screenshot(path=str(tmp_path / "focused.png"))
    await page.keyboard.press("Enter")
    # A submission would be on its way at once; a page round trip on loopback is far shorter.
    await page.wait_for_timeout(ENTER_SETTLE_MS)
    assert sent == []
    assert page.url == consent_url
    assert await page.locator('input[name="scope"][value="orders:read"]').is_checked()
    assert not [text for text in console if "Content Security Policy" in text]
    assert await poll_token(gw, started["device_code"]) == (400, {"error": "authorization_pending"})
    # Space still unticks, and the buttons still decide.
    await page.keyboard.press("Space")
    assert not await page.locator('input[name="scope"][value="orders:read"]').is_checked()
    await page.locator('button[name="decision"][value="allow"]').click()
    landing = oauth_urls(gw).landing
    await page.wait_for_url(lambda url: url.startswith(landing), timeout=BROWSER_WAIT_MS)
    # (No second poll here: RFC 8628 §3.5 would answer slow_down to one this soon after the first.)
    assert landing_query(page.url) == {"status": ["approved"], "scope": ["orders:cancel profile:read"]}
    await assert_fits(page, size, tmp_path / "landing.png")
    await context.close()


async def test_s5_3_allow_stands_apart_from_deny_in_forced_colours(
    make_gateway: MakeGateway, stand_in: StandInLogin, provider_key_pem: str, browser: Browser, tmp_path: Path
) -> None:
    """Issue 32: under forced colours (Windows high contrast) the browser paints both buttons in the
    same system colours, so Allow's blue fill, its only mark, was gone. Its border and weight stay."""
    gw = await delegating_gateway(make_gateway, stand_in, provider_key_pem)
    started = await device_authorization(gw)
    context, page = await new_page(browser, DESKTOP)
    await page.emulate_media(forced_colors="active")
    await open_consent(page, started["verification_uri_complete"])
    await page.screenshot(path=str(tmp_path / "forced-colours.png"))
    look = (
        "button => { const style = getComputedStyle(button);"
        " return [style.backgroundColor, style.borderTopWidth, style.fontWeight]; }"
    )
    allow = await page.locator('button[name="decision"][value="allow"]').evaluate(look)
    deny = await page.locator('button[name="decision"][value="deny"]').evaluate(look)
    assert allow[0] == deny[0]  # the fill is forced to one system colour: it tells them apart no more
    assert float(allow[1].removesuffix("px")) >= float(deny[1].removesuffix("px")) + 2
    assert int(allow[2]) >= int(deny[2]) + 300
    await assert_accessible(page)
    await context.close()


async def grant(gw: Harness, login: BrandLogin, scopes: tuple[str, ...]) -> dict[str, Any]:
    """A live grant of the stand-in's user for ``scopes``, made over HTTP: its token answer."""
    started = await device_authorization(gw, scopes)
    form = parse_consent_form(await (await sign_in(gw, login, started["user_code"], user=USER)).text())
    assert (await post_decision(gw, form.session, "allow", list(scopes))).status == 303
    status, answer = await poll_token(gw, started["device_code"])
    assert status == 200
    return answer


@SIZES
async def test_s5_3_step_up_lets_the_person_drop_a_carried_scope(
    make_gateway: MakeGateway,
    stand_in: StandInLogin,
    provider_key_pem: str,
    browser: Browser,
    tmp_path: Path,
    size: ViewportSize,
) -> None:
    """Issue 18 I3: the earlier grant's scopes are on the page, ticked; unticking one leaves it out of
    the new grant, and the landing page says the assistant can no longer do it."""
    gw = await delegating_gateway(make_gateway, stand_in, provider_key_pem)
    await grant(gw, stand_in.login, ("orders:read", "profile:read"))
    started = await device_authorization(gw, ("orders:cancel",))
    context, page = await new_page(browser, size)
    await open_consent(page, started["verification_uri_complete"])
    keep = page.locator('input[type="checkbox"][name="keep"]')
    assert [await box.get_attribute("value") for box in await keep.all()] == ["orders:read", "profile:read"]
    assert all([await box.is_checked() for box in await keep.all()])
    await assert_fits(page, size, tmp_path / "consent.png")
    await page.get_by_label(SCOPES["orders:read"]).uncheck()
    await page.locator('button[name="decision"][value="allow"]').click()
    await page.wait_for_url(lambda url: url.startswith(oauth_urls(gw).landing), timeout=BROWSER_WAIT_MS)
    assert await page.get_by_text("can no longer:").is_visible()
    await assert_fits(page, size, tmp_path / "landing.png")
    await context.close()
    status, answer = await poll_token(gw, started["device_code"])
    assert (status, answer["scope"]) == (200, "orders:cancel profile:read")


@SIZES
async def test_s5_3_every_end_state_says_what_is_true(
    make_gateway: MakeGateway,
    stand_in: StandInLogin,
    provider_key_pem: str,
    browser: Browser,
    tmp_path: Path,
    size: ViewportSize,
) -> None:
    """Issue 18: denying while an earlier grant lives, re-opening a decided link, a crafted landing
    link, the consent URL opened by hand and a bad link each say what is now true."""
    gw = await delegating_gateway(make_gateway, stand_in, provider_key_pem)
    await grant(gw, stand_in.login, ("orders:read",))
    started = await device_authorization(gw, ("orders:cancel",))
    context, page = await new_page(browser, size)
    await open_consent(page, started["verification_uri_complete"])
    await page.locator('button[name="decision"][value="deny"]').click()
    urls = oauth_urls(gw)
    await page.wait_for_url(lambda url: url.startswith(urls.landing), timeout=BROWSER_WAIT_MS)
    assert await page.get_by_role("heading", name="Request declined").is_visible()
    assert await page.get_by_text("Your earlier approval still stands").is_visible()
    assert await page.get_by_role("listitem").all_inner_texts() == [SCOPES["orders:read"]]
    await assert_fits(page, size, tmp_path / "declined.png")

    await page.goto(started["verification_uri_complete"], timeout=BROWSER_WAIT_MS)
    await page.get_by_role("heading", name="Already declined").wait_for(timeout=BROWSER_WAIT_MS)
    await assert_fits(page, size, tmp_path / "reopened.png")

    await page.goto(f"{urls.landing}?status=approved&scope=orders:cancel", timeout=BROWSER_WAIT_MS)
    assert await page.get_by_role("heading", name="This page has expired").is_visible()
    assert await page.get_by_text("connected").count() == 0
    await assert_fits(page, size, tmp_path / "spoofed.png")

    response = await page.goto(urls.consent, timeout=BROWSER_WAIT_MS)
    assert response is not None
    assert response.status == 405
    assert await page.get_by_role("heading", name="Open this from your assistant").is_visible()
    await assert_fits(page, size, tmp_path / "opened.png")

    bad = started["verification_uri_complete"].replace(started["user_code"], "BCDF-GHJK")
    await page.goto(bad, timeout=BROWSER_WAIT_MS)
    await page.get_by_role("heading", name="This sign-in link is invalid or has expired").wait_for(
        timeout=BROWSER_WAIT_MS
    )
    await assert_fits(page, size, tmp_path / "invalid.png")
    await context.close()


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


async def test_s5_3_without_javascript_enter_in_a_scope_checkbox_denies_never_allows(
    make_gateway: MakeGateway, stand_in: StandInLogin, provider_key_pem: str, browser: Browser
) -> None:
    """Issue 18's guard where the page's script cannot run: implicit submission presses the form's
    first button, Deny, so the request is declined and no grant is made."""
    gw = await delegating_gateway(make_gateway, stand_in, provider_key_pem)
    started = await device_authorization(gw)
    context = await browser.new_context(viewport=PHONE, is_mobile=True, java_script_enabled=False)
    page = await context.new_page()
    await page.goto(started["verification_uri_complete"], timeout=BROWSER_WAIT_MS)
    await page.locator("#continue").click()
    await page.locator('input[name="scope"]').first.focus(timeout=BROWSER_WAIT_MS)
    await page.keyboard.press("Enter")
    landing = oauth_urls(gw).landing
    await page.wait_for_url(lambda url: url.startswith(landing), timeout=BROWSER_WAIT_MS)
    assert landing_query(page.url) == {"status": ["denied"]}
    await context.close()
    assert await poll_token(gw, started["device_code"]) == (400, {"error": "access_denied"})


DETAILS = (order("A-10001"), order("A-10002"))
CONDITIONS = ["Only order A-10001", "Only order A-10002"]


async def detail_request(
    make_gateway: MakeGateway, stand_in: StandInLogin, provider_key_pem: str
) -> tuple[Harness, dict[str, Any]]:
    """A gateway whose Brand accepts the order detail type, and a request to read orders and to cancel
    two of them (RFC 9396 details)."""
    gw = await delegating_gateway(
        make_gateway, stand_in, provider_key_pem, authorization_details=DETAIL_TYPES
    )
    started = await device_authorization(gw, ("orders:read", "orders:cancel"), details=DETAILS)
    return gw, started


@SIZES
async def test_rfc9396_consent_in_a_browser_shows_each_detail_under_its_scope_and_grants_it(
    make_gateway: MakeGateway,
    stand_in: StandInLogin,
    provider_key_pem: str,
    browser: Browser,
    tmp_path: Path,
    size: ViewportSize,
) -> None:
    """Each detail is a condition inside its scope's box: visible, part of that box's accessible name,
    and no box of its own; the page stays WCAG 2.1 AA, and Allow grants the details."""
    gw, started = await detail_request(make_gateway, stand_in, provider_key_pem)
    context, page = await new_page(browser, size)
    await open_consent(page, started["verification_uri_complete"])
    assert await page.locator('input[type="checkbox"]').count() == 2
    for condition in CONDITIONS:
        assert await page.get_by_text(condition, exact=True).is_visible()
        box = page.get_by_role("checkbox", name=condition)
        assert await box.get_attribute("value") == "orders:cancel"
    await assert_fits(page, size, tmp_path / "consent-details.png")

    await page.locator('button[name="decision"][value="allow"]').click()
    await page.wait_for_url(lambda url: url.startswith(oauth_urls(gw).landing), timeout=BROWSER_WAIT_MS)
    assert landing_query(page.url) == {"status": ["approved"], "scope": ["orders:read orders:cancel"]}
    assert await page.get_by_role("listitem").all_inner_texts() == [
        SCOPES["orders:read"],
        "\n".join([SCOPES["orders:cancel"], *CONDITIONS]),
        *CONDITIONS,
    ]
    await assert_fits(page, size, tmp_path / "landing-details.png")
    await context.close()
    status, answer = await poll_token(gw, started["device_code"])
    assert (status, answer["authorization_details"]) == (200, list(DETAILS))


@SIZES
async def test_rfc9396_unticking_the_scope_in_a_browser_grants_none_of_its_details(
    make_gateway: MakeGateway,
    stand_in: StandInLogin,
    provider_key_pem: str,
    browser: Browser,
    tmp_path: Path,
    size: ViewportSize,
) -> None:
    gw, started = await detail_request(make_gateway, stand_in, provider_key_pem)
    context, page = await new_page(browser, size)
    await open_consent(page, started["verification_uri_complete"])
    await page.get_by_label(SCOPES["orders:cancel"]).uncheck()
    await page.locator('button[name="decision"][value="allow"]').click()
    await page.wait_for_url(lambda url: url.startswith(oauth_urls(gw).landing), timeout=BROWSER_WAIT_MS)
    assert landing_query(page.url) == {"status": ["approved"], "scope": ["orders:read"]}
    assert await page.get_by_role("listitem").all_inner_texts() == [SCOPES["orders:read"]]
    assert await page.get_by_text("A-10001").count() == 0
    await assert_fits(page, size, tmp_path / "landing-unticked.png")
    await context.close()
    status, answer = await poll_token(gw, started["device_code"])
    assert status == 200
    assert answer["scope"] == "orders:read"
    assert "authorization_details" not in answer


FOCUSED = (
    "() => { const e = document.activeElement;"
    " return e instanceof HTMLInputElement || e instanceof HTMLButtonElement"
    " ? `${e.name}=${e.value}` : e.tagName; }"
)
"""What has the keyboard focus, as ``name=value`` (a box or a button)."""


@SIZES
async def test_rfc9396_consent_with_details_by_keyboard_only(
    make_gateway: MakeGateway,
    stand_in: StandInLogin,
    provider_key_pem: str,
    browser: Browser,
    tmp_path: Path,
    size: ViewportSize,
) -> None:
    """Tab reaches each scope's box, then Deny, then Allow, and nothing else: a condition is no stop
    of its own. Space unticks and ticks the box that holds the conditions; Enter on Allow grants
    them. The focused box is outlined with its conditions (the label's ``:focus-within``)."""
    gw, started = await detail_request(make_gateway, stand_in, provider_key_pem)
    context, page = await new_page(browser, size)
    await open_consent(page, started["verification_uri_complete"])
    stops = []
    for _ in range(4):
        await page.keyboard.press("Tab")
        stops.append(await page.evaluate(FOCUSED))
    assert stops == ["scope=orders:read", "scope=orders:cancel", "decision=deny", "decision=allow"]
    await page.keyboard.press("Shift+Tab")
    await page.keyboard.press("Shift+Tab")
    assert await page.evaluate(FOCUSED) == "scope=orders:cancel"
    outline = await page.evaluate(
        "() => getComputedStyle(document.activeElement.closest('label')).outlineStyle"
    )
    assert outline == "solid"
    await page.screenshot(path=str(tmp_path / "keyboard-focus.png"))
    cancel = page.locator('input[name="scope"][value="orders:cancel"]')
    await page.keyboard.press("Space")
    assert not await cancel.is_checked()
    await page.keyboard.press("Space")
    assert await cancel.is_checked()
    await assert_fits(page, size, tmp_path / "keyboard.png")
    await page.keyboard.press("Tab")
    await page.keyboard.press("Tab")
    assert await page.evaluate(FOCUSED) == "decision=allow"
    await page.keyboard.press("Enter")
    await page.wait_for_url(lambda url: url.startswith(oauth_urls(gw).landing), timeout=BROWSER_WAIT_MS)
    assert landing_query(page.url) == {"status": ["approved"], "scope": ["orders:read orders:cancel"]}
    await assert_fits(page, size, tmp_path / "keyboard-landing.png")
    await context.close()
    status, answer = await poll_token(gw, started["device_code"])
    assert (status, answer["authorization_details"]) == (200, list(DETAILS))


async def test_rfc9396_a_step_up_with_details_past_the_cap_stays_accessible(
    make_gateway: MakeGateway, stand_in: StandInLogin, provider_key_pem: str, browser: Browser, tmp_path: Path
) -> None:
    """The rest of what details add to the pages, under axe: a condition the earlier grant already
    allows, marked so; what would be left out past ``max_authorization_details``, said before the
    decision; and the landing page's kept and left-out conditions."""
    gw = await delegating_gateway(
        make_gateway,
        stand_in,
        provider_key_pem,
        authorization_details=DETAIL_TYPES,
        max_authorization_details=2,
    )
    started = await device_authorization(gw, ("orders:read", "orders:cancel"), details=DETAILS)
    form = parse_consent_form(
        await (await sign_in(gw, stand_in.login, started["user_code"], user=USER)).text()
    )
    assert (await post_decision(gw, form.session, "allow", ["orders:read", "orders:cancel"])).status == 303
    assert (await poll_token(gw, started["device_code"]))[0] == 200
    step_up = await device_authorization(gw, ("orders:cancel", "profile:read"), details=(order("A-10003"),))
    context, page = await new_page(browser, PHONE)
    await open_consent(page, step_up["verification_uri_complete"])
    assert await page.get_by_text("Only order A-10001 (you already allow this)", exact=True).is_visible()
    assert await page.get_by_text("these are left out of it:").is_visible()
    await assert_fits(page, PHONE, tmp_path / "step-up-details.png")
    await page.locator('button[name="decision"][value="allow"]').click()
    await page.wait_for_url(lambda url: url.startswith(oauth_urls(gw).landing), timeout=BROWSER_WAIT_MS)
    assert await page.get_by_text("these were left out of it:").is_visible()
    await assert_fits(page, PHONE, tmp_path / "step-up-landing.png")
    await context.close()
    status, answer = await poll_token(gw, step_up["device_code"])
    assert (status, answer["authorization_details"]) == (200, [order("A-10003"), order("A-10001")])
