"""The demo's §5.3 walk in a real browser: headless Chromium at a phone's size, driven by Playwright.

The demo runs as ``pact-gateway demo`` runs it (:func:`gateway.demo.start_demo` on loopback
ports); the personal agent starts a device authorization over HTTP, and the User opens
``verification_uri_complete``: the stand-in Brand login, its auto-posting hand-off (its inline
script must run under its own CSP), the gateway's consent page, the landing page. The personal
agent's token poll then gets the scope. Without JavaScript the hand-off's Continue button does it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from playwright.async_api import Browser, Page, async_playwright

from gateway.config import GatewayConfig
from gateway.demo import DEFAULT_CONFIG, DEMO_SUB, demo_config, demo_environ, new_signing_key, start_demo
from gateway.oauth.metadata import DEVICE_CODE_GRANT
from gateway.pa_keys import generate_private_jwk, mint_token
from gateway.protocol.urls import OAuthUrls
from tests.oauth.test_consent_browser import BROWSER_WAIT_MS, CHROMIUM, CHROMIUM_ARGS, PHONE


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Debian's Chromium (scripts/setup.sh); missing, the test skips on a workstation and fails under CI."""
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: run scripts/setup.sh as root (Debian's chromium package)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True, timeout=BROWSER_WAIT_MS
        )
        yield launched
        await launched.close()


@dataclass
class Demo:
    config: GatewayConfig
    private: dict[str, Any]
    urls: OAuthUrls

    def pa_headers(self) -> dict[str, str]:
        agent = self.config.personal_agents.registered[0]
        token = mint_token(self.private, iss=agent.issuer, sub=DEMO_SUB, aud=self.config.provider.audience)
        return {"Authorization": f"Bearer {token}"}

    async def authorize(self, scope: str) -> dict[str, Any]:
        client_id = self.config.personal_agents.registered[0].issuer
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                self.urls.device_authorization,
                data={"client_id": client_id, "scope": scope},
                headers=self.pa_headers(),
            ) as response,
        ):
            assert response.status == 200
            started: dict[str, Any] = await response.json()
            return started

    async def poll(self, device_code: str) -> tuple[int, dict[str, Any]]:
        form = {
            "grant_type": DEVICE_CODE_GRANT,
            "device_code": device_code,
            "client_id": self.config.personal_agents.registered[0].issuer,
        }
        async with (
            aiohttp.ClientSession() as http,
            http.post(self.urls.token, data=form, headers=self.pa_headers()) as response,
        ):
            answer: dict[str, Any] = await response.json()
            return response.status, answer


@pytest.fixture
async def demo() -> AsyncIterator[Demo]:
    port, bot_port = free_port(), free_port()
    config = demo_config(DEFAULT_CONFIG, port, bot_port, demo_environ(new_signing_key()))
    private = generate_private_jwk("ES256")
    runners: list[web.AppRunner] = await start_demo(config, private, bot_port)
    yield Demo(config, private, OAuthUrls.of(config.public_url, "acme"))
    for runner in reversed(runners):
        await runner.cleanup()


async def assert_fits_the_phone(page: Page) -> None:
    widths = await page.evaluate(
        "() => [document.documentElement.scrollWidth, document.body.scrollWidth, window.innerWidth]"
    )
    assert max(widths[:2]) <= widths[2] == PHONE["width"]  # no horizontal scroll
    for control in await page.locator("button, input:not([type=hidden])").all():
        box = await control.bounding_box()
        assert box is not None
        assert box["height"] >= 44  # a comfortable tap target


async def sign_in(page: Page, started: dict[str, Any]) -> None:
    """The stand-in login as the User sees it: labelled, prefilled, any password."""
    await page.goto(started["verification_uri_complete"], timeout=BROWSER_WAIT_MS)
    assert await page.get_by_text("a stand-in for the Brand's real login").is_visible()
    assert await page.locator("#user").input_value() == "jane"
    assert await page.locator("#user_code").input_value() == started["user_code"]
    await assert_fits_the_phone(page)
    await page.locator("#password").fill("anything")
    await page.get_by_role("button", name="Sign in").click()


async def test_s5_3_demo_login_hands_off_to_consent_in_a_phone_browser(demo: Demo, browser: Browser) -> None:
    started = await demo.authorize("orders:read orders:cancel")
    context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = await context.new_page()
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    await sign_in(page, started)
    # The hand-off page posts itself: only its own script, by nonce, may run.
    await page.locator('input[name="scope"]').first.wait_for(timeout=BROWSER_WAIT_MS)
    assert page.url == demo.urls.consent
    assert not [text for text in console if "Content Security Policy" in text]
    await page.locator('input[name="scope"][value="orders:cancel"]').uncheck()
    await page.locator('button[name="decision"][value="allow"]').click()
    await page.wait_for_url(lambda url: url.startswith(demo.urls.landing), timeout=BROWSER_WAIT_MS)
    await context.close()
    status, answer = await demo.poll(started["device_code"])
    assert (status, answer["scope"]) == (200, "orders:read")


async def test_s5_3_demo_login_hand_off_works_without_javascript(demo: Demo, browser: Browser) -> None:
    started = await demo.authorize("orders:read")
    context = await browser.new_context(viewport=PHONE, is_mobile=True, java_script_enabled=False)
    page = await context.new_page()
    await sign_in(page, started)
    await page.get_by_role("button", name="Continue").click()
    await page.locator('input[name="scope"]').first.wait_for(timeout=BROWSER_WAIT_MS)
    await page.locator('button[name="decision"][value="allow"]').click()
    await page.wait_for_url(lambda url: url.startswith(demo.urls.landing), timeout=BROWSER_WAIT_MS)
    await context.close()
    status, answer = await demo.poll(started["device_code"])
    assert (status, answer["scope"]) == (200, "orders:read")
