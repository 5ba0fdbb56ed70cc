"""The bench's personal agent getting §5.4 delegation tokens the way a real one does: §5.3 over HTTP.

For each bench user, once before the timed rounds: RFC 8628 device authorization with its PA JWT;
a Brand-login assertion for the ``user_code``, signed by the bench's login key and posted to the
consent URL; the consent page's hidden ``session`` and ticked scopes posted back with
``decision=allow``; the token endpoint polled (RFC 8628 §3.4). :func:`grant_users` writes the tokens
in user order (the load generator's ``--delegation-file``) and says how long the flows took; no token, code,
assertion or consent session is ever printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Mapping
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, urljoin, urlsplit

import aiohttp

from bench.loadgen import AUDIENCE, ISSUER, Minter, user_sub
from bench.procs import ChildFailed
from gateway.protocol.urls import OAuthUrls

BRAND: Final = "acme"
LOGIN_ISSUER: Final = "https://login.bench.invalid"
LOGIN_URL: Final = "https://login.bench.invalid/pact/login"
"""The Brand login the gateway links to; never opened: the bench posts its assertion straight back."""
SCOPES: Final = {
    "orders:read": "Look up your orders and their status",
    "orders:cancel": "Cancel an order that has not shipped",
}
DEVICE_CODE_GRANT: Final = "urn:ietf:params:oauth:grant-type:device_code"
ASSERTION_TTL: Final = 120
"""Seconds a login assertion lives (the conformance notes: "about 2 minutes")."""
FLOWS_AT_ONCE: Final = 8


class FlowFailed(Exception):
    """A step of §5.3 did not answer as the contract says; the message names the step and the answer."""


def delegation_config(login_jwks: Mapping[str, Any]) -> dict[str, Any]:
    """The Brand's ``delegation`` block in the bench gateway's configuration: its scopes and login."""
    return {"scopes": dict(SCOPES), "login": {"url": LOGIN_URL, "issuer": LOGIN_ISSUER, "jwks": login_jwks}}


class ConsentForm(HTMLParser):
    """The consent page's form as a browser submits it: its action, hidden fields and ticked scopes."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "form" and self.action is None:
            self.action = attributes.get("action") or ""
        if tag != "input":
            return
        kind = (attributes.get("type") or "text").lower()
        name, value = attributes.get("name"), attributes.get("value")
        if name is None or value is None:
            return
        if kind == "hidden" or (kind == "checkbox" and "checked" in attributes):
            self.fields.append((name, value))


def _oauth_error(status: int, body: bytes) -> str:
    """``error`` of an RFC 6749 §5.2 answer, or a short description of whatever came instead."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        error = None
    return str(error) if isinstance(error, str) else f"HTTP {status}"


async def _log_in_and_consent(
    session: aiohttp.ClientSession, urls: OAuthUrls, login: Minter, user: int, started: Mapping[str, Any]
) -> None:
    """What the User's browser does: the Brand login's hand-off, then "allow" on the consent page."""
    complete = str(started["verification_uri_complete"])
    return_to = parse_qs(urlsplit(complete).query).get("return_to", [""])[0]
    if not return_to:
        raise FlowFailed("verification_uri_complete has no return_to")
    # The Brand's own id of the User (§5.4 ``sub``), distinct from its PA ``sub``.
    assertion = login.mint(f"acme-customer-{user}", ASSERTION_TTL, extra={"user_code": started["user_code"]})
    async with session.post(return_to, data={"assertion": assertion}, allow_redirects=False) as response:
        page = await response.text()
        if response.status == 303:
            # §5.3: consent skipped, an unexpired grant already covers the request.
            _approved(response, "the consent URL")
            return
        if response.status != 200:
            raise FlowFailed(f"the consent URL answered HTTP {response.status} to the login's assertion")
    form = ConsentForm()
    form.feed(page)
    if not any(name == "session" for name, _ in form.fields):
        raise FlowFailed("the consent page has no hidden session field")
    action = urljoin(return_to, form.action) if form.action else urls.consent_decision
    async with session.post(
        action, data=[*form.fields, ("decision", "allow")], allow_redirects=False
    ) as answer:
        _approved(answer, "the consent decision")


def _approved(response: aiohttp.ClientResponse, step: str) -> None:
    """The conformance notes' answer to an approval: ``303`` to the landing page with ``status=approved``."""
    location = response.headers.get("Location", "")
    if response.status != 303 or parse_qs(urlsplit(location).query).get("status") != ["approved"]:
        raise FlowFailed(f"{step} answered HTTP {response.status}, not 303 to status=approved")


async def _poll_token(
    session: aiohttp.ClientSession,
    urls: OAuthUrls,
    bearer: dict[str, str],
    client_id: str,
    started: Mapping[str, Any],
) -> tuple[str, str]:
    """RFC 8628 §3.4-3.5: poll until the token comes, waiting ``interval`` (longer after ``slow_down``)."""
    form = {
        "grant_type": DEVICE_CODE_GRANT,
        "device_code": str(started["device_code"]),
        "client_id": client_id,
    }
    interval = float(started.get("interval", 5))
    deadline = time.monotonic() + float(started.get("expires_in", 600))
    while time.monotonic() < deadline:
        async with session.post(urls.token, data=form, headers=bearer) as response:
            body, status = await response.read(), response.status
        if status == 200:
            granted = json.loads(body)
            return str(granted["access_token"]), str(granted.get("scope", ""))
        error = _oauth_error(status, body)
        if error == "slow_down":
            interval += 5
        elif error != "authorization_pending":
            raise FlowFailed(f"the token endpoint answered {error}")
        await asyncio.sleep(interval)
    raise FlowFailed("the device code expired before a token came")


async def obtain_token(
    session: aiohttp.ClientSession, urls: OAuthUrls, *, pa: Minter, login: Minter, user: int
) -> tuple[str, str]:
    """The whole §5.3 flow for the bench's ``user``-th User: its delegation token and granted scope."""
    bearer = {"Authorization": f"Bearer {pa.mint(user_sub(user))}"}
    form = {"client_id": pa.issuer, "scope": " ".join(SCOPES)}
    async with session.post(urls.device_authorization, data=form, headers=bearer) as response:
        body = await response.read()
        if response.status != 200:
            raise FlowFailed(f"device_authorization answered {_oauth_error(response.status, body)}")
    started = json.loads(body)
    await _log_in_and_consent(session, urls, login, user, started)
    return await _poll_token(session, urls, bearer, pa.issuer, started)


def grant_users(url: str, users: int, key_file: Path, login_key_file: Path, out: Path) -> dict[str, Any]:
    """§5.3 for ``users`` bench users against the gateway at ``url``, a few flows at once: their tokens
    written to ``out`` in user order (the load generator's ``--delegation-file``), how long the flows took and
    the scopes granted."""
    urls, pa = OAuthUrls.of(url, BRAND), Minter(json.loads(key_file.read_text()), ISSUER, AUDIENCE)
    # The Brand login addresses its assertion to the consent URL (§5.3, the notes: ``aud``).
    login = Minter(json.loads(login_key_file.read_text()), LOGIN_ISSUER, urls.consent)

    async def flows() -> list[tuple[str, str]]:
        gate = asyncio.Semaphore(FLOWS_AT_ONCE)
        # Cookies off: a consent page must work from the form alone, as the contract says it does.
        async with aiohttp.ClientSession(
            cookie_jar=aiohttp.DummyCookieJar(), timeout=aiohttp.ClientTimeout(total=30)
        ) as session:

            async def one(user: int) -> tuple[str, str]:
                async with gate:
                    return await obtain_token(session, urls, pa=pa, login=login, user=user)

            return list(await asyncio.gather(*(one(user) for user in range(users))))

    started = time.monotonic()
    try:
        granted = asyncio.run(flows())
    except (FlowFailed, aiohttp.ClientError, TimeoutError, KeyError, ValueError) as exc:
        raise ChildFailed(f"the §5.3 flows against {url} failed: {type(exc).__name__}: {exc}") from None
    seconds = time.monotonic() - started
    # Bearer credentials, even if only the bench's: readable by this user alone.
    descriptor = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as tokens:
        json.dump([token for token, _ in granted], tokens)
    return {"users": users, "seconds": seconds, "scopes_granted": sorted({scope for _, scope in granted})}
