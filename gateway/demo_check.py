"""``pact-gateway demo --check``: the printed session, run once over real HTTP, failing loudly.

The §5 part plays each party the way it would really act: the personal agent (device
authorization, token poll, turns, receipt check) with its own JWT, and the User's browser
(the Brand's login, the consent form) with a cookie jar and no JWT at all. Every URL comes
from where a client finds it: the card names the device, token and metadata URLs, the
metadata the ``jwks_uri``, and each page names where its form goes. Pages are read as forms
(:class:`FormReader`), never scraped by pattern, so a page that changes its markup but not
its fields still passes.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from html.parser import HTMLParser
from typing import Any, Final
from urllib.parse import parse_qs, urljoin, urlsplit

import aiohttp
import jwt

from examples.sample_bot import ORDER_DETAIL
from examples.sample_login.login import DEFAULT_USER
from gateway.config import GatewayConfig
from gateway.oauth.metadata import DEVICE_CODE_GRANT
from gateway.pa_keys import mint_token
from gateway.protocol.authorization_details import canonical_detail, consent_sentence
from gateway.protocol.urls import interface_url

__all__ = [
    "DELEGATED_TEXT",
    "STEP_UP_ORDER",
    "STEP_UP_TEXT",
    "DemoCheckFailed",
    "Form",
    "FormReader",
    "log_in_and_allow",
    "read_form",
    "run_check",
]

DELEGATED_TEXT: Final = "list my orders"
"""A turn the sample bot serves with ``orders:read`` (and reports in the receipt)."""
STEP_UP_ORDER: Final = "A-10002"
STEP_UP_TEXT: Final = f"cancel order {STEP_UP_ORDER}"
"""A turn the sample bot serves only with ``orders:cancel`` (and, where the Brand binds a cancellation
to one order, an RFC 9396 detail naming it): a §5.5 step-up under ``orders:read``."""
READ_SCOPE: Final = "orders:read"
CANCEL_SCOPE: Final = "orders:cancel"
_POLLS: Final = 3
"""Token polls before giving up: the User approved before the first, so one is expected to do."""


class DemoCheckFailed(RuntimeError):
    """A step of the demo session did not answer what the spec says it must."""


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise DemoCheckFailed(f"demo check failed: {what}")


@dataclass(slots=True)
class Form:
    """One HTML form as a browser would submit it: its target and its successful controls."""

    action: str
    method: str
    fields: list[tuple[str, str]] = field(default_factory=list)
    buttons: list[tuple[str, str]] = field(default_factory=list)

    def value(self, name: str) -> str | None:
        return next((value for key, value in self.fields if key == name), None)

    def submission(self, *, button: tuple[str, str] | None = None, **overrides: str) -> list[tuple[str, str]]:
        """The fields with ``overrides`` applied, plus the pressed ``button`` (as a browser posts it)."""
        sent = [(key, overrides.get(key, value)) for key, value in self.fields]
        sent += [(key, value) for key, value in overrides.items() if all(key != name for name, _ in sent)]
        return [*sent, button] if button is not None else sent


class FormReader(HTMLParser):
    """Collects the forms of a page: inputs with their values, ticked boxes only, named buttons."""

    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.forms: list[Form] = []
        self._open: Form | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {name: value or "" for name, value in attrs}
        if tag == "form":
            self._open = Form(
                urljoin(self.base_url, attr.get("action", "")), attr.get("method", "get").lower()
            )
            self.forms.append(self._open)
            return
        if self._open is None or not attr.get("name"):
            return
        kind = attr.get("type", "submit" if tag == "button" else "text").lower()
        if tag == "button" or kind == "submit":
            self._open.buttons.append((attr["name"], attr.get("value", "")))
        elif tag == "input" and (kind not in {"checkbox", "radio"} or "checked" in attr):
            self._open.fields.append((attr["name"], attr.get("value", "on" if kind == "checkbox" else "")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._open = None


def read_form(html: str, base_url: str) -> Form:
    """The one form a step's page must have."""
    reader = FormReader(base_url)
    reader.feed(html)
    reader.close()
    _expect(len(reader.forms) == 1, f"{base_url} should show one form, it shows {len(reader.forms)}")
    return reader.forms[0]


Mint = Callable[[], str]


async def _answer(response: aiohttp.ClientResponse) -> dict[str, Any]:
    """A JSON object answer, or ``{}`` for anything else (a bare ``401`` has no body at all)."""
    try:
        document = json.loads(await response.read())
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


async def _identity(http: aiohttp.ClientSession, interface: str, mint: Mint) -> None:
    """§2–§4: the card, a first turn, a second on its context, and a retry of the second."""
    headers = {"Authorization": f"Bearer {mint()}", "A2A-Version": "1.0"}

    def message(message_id: str, text: str, context_id: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
        if context_id:
            body["contextId"] = context_id
        return {"message": body}

    async with http.get(f"{interface}/.well-known/agent-card.json") as response:
        _expect(response.status == 200, f"card answered {response.status}")
    async with http.post(f"{interface}/message:send", json=message("m-1", "Hi", None), headers=headers) as r:
        first = await _answer(r)
        _expect(r.status == 200, f"first turn answered {r.status} {first}")
    context_id = first["message"]["contextId"]
    second = message("m-2", "It is A-10001", context_id)
    async with http.post(f"{interface}/message:send", json=second, headers=headers) as r:
        reply = await r.read()
        _expect(r.status == 200 and b"A-10001" in reply, f"second turn answered {reply!r}")
    async with http.post(f"{interface}/message:send", json=second, headers=headers) as r:
        _expect(await r.read() == reply, "the retry did not replay the stored reply")


@dataclass(frozen=True, slots=True)
class _Endpoints:
    """What a personal agent learns from the card (§5.1) and the RFC 8414 metadata it links."""

    device_authorization: str
    token: str
    jwks_uri: str


async def _get_json(http: aiohttp.ClientSession, url: str, what: str) -> dict[str, Any]:
    async with http.get(url) as response:
        _expect(response.status == 200, f"{what} ({url}) answered {response.status}")
        return await _answer(response)


async def _discover(http: aiohttp.ClientSession, interface: str) -> _Endpoints:
    card = await _get_json(http, f"{interface}/.well-known/agent-card.json", "the card")
    schemes = card.get("securitySchemes", {})
    oauth = next((s["oauth2SecurityScheme"] for s in schemes.values() if "oauth2SecurityScheme" in s), None)
    if oauth is None:
        raise DemoCheckFailed("demo check failed: the card declares no oauth2SecurityScheme (§5.1)")
    flow = oauth["flows"]["deviceCode"]
    _expect({READ_SCOPE, CANCEL_SCOPE} <= set(flow["scopes"]), f"the card's scopes are {flow['scopes']}")
    metadata = await _get_json(http, oauth["oauth2MetadataUrl"], "the RFC 8414 metadata")
    return _Endpoints(flow["deviceAuthorizationUrl"], flow["tokenUrl"], metadata["jwks_uri"])


async def _authorize(http: aiohttp.ClientSession, url: str, client_id: str, mint: Mint) -> dict[str, Any]:
    """RFC 8628 §3.1 device authorization for ``orders:read``, the PA JWT as client credential (§5.3)."""
    form = {"client_id": client_id, "scope": READ_SCOPE}
    async with http.post(url, data=form, headers={"Authorization": f"Bearer {mint()}"}) as response:
        started = await _answer(response)
        _expect(response.status == 200, f"device authorization answered {response.status} {started}")
    return started


async def _browser_post(
    browser: aiohttp.ClientSession, url: str, data: list[tuple[str, str]], what: str
) -> tuple[str, str]:
    """A form post as the User's browser makes it: the page and where it was answered from."""
    async with browser.post(url, data=data, allow_redirects=False) as response:
        page = await response.text()
        _expect(response.status == 200, f"{what} answered {response.status}: {page[:200]!r}")
        return page, str(response.url)


async def log_in_and_allow(
    browser: aiohttp.ClientSession,
    started: Mapping[str, Any],
    *,
    scopes: Sequence[str] = (READ_SCOPE,),
    kept: Sequence[str] = (),
    shows: Sequence[str] = (),
) -> None:
    """The User's part of §5.3: the Brand's login, its hand-off, then Allow on the consent page.

    ``started`` is the device-authorization answer (``verification_uri_complete`` and
    ``user_code``), ``scopes`` what the consent page must tick as requested and ``kept`` what it
    must tick as kept from the live grant (a step-up's); ``shows`` are sentences the page must show
    (an authorization detail's condition). Public: the test that runs the README's session plays
    the person's browser with it, as the check does.
    """
    login_url = started["verification_uri_complete"]
    async with browser.get(login_url) as response:
        _expect(response.status == 200, f"the login page answered {response.status}")
        login = read_form(await response.text(), str(response.url))
    _expect(login.value("user_code") == started["user_code"], "the login page did not prefill the user code")
    _expect(login.value("user") == DEFAULT_USER, f"the login page prefilled user {login.value('user')!r}")
    filled = login.submission(password="demo")  # noqa: S106 - the stand-in takes any password
    handoff_page, handoff_url = await _browser_post(browser, login.action, filled, "the login")
    handoff = read_form(handoff_page, handoff_url)
    _expect(handoff.value("assertion") is not None, "the login answered no assertion to post back")
    _expect(handoff.method == "post", "the login hands the assertion back without POST (§5.3)")
    consent_page, consent_url = await _browser_post(
        browser, handoff.action, handoff.submission(), "the hand-off to the consent page"
    )
    consent = read_form(consent_page, consent_url)
    for sentence in shows:
        _expect(escape(sentence) in consent_page, f"the consent page does not show {sentence!r}")
    ticked = [value for key, value in consent.fields if key == "scope"]
    _expect(ticked == list(scopes), f"the consent page ticks {ticked}, not the requested {list(scopes)}")
    keeps = [value for key, value in consent.fields if key == "keep"]
    _expect(keeps == list(kept), f"the consent page keeps {keeps}, not {list(kept)}")
    _expect(("decision", "allow") in consent.buttons, "the consent page has no Allow button")
    async with browser.post(
        consent.action, data=consent.submission(button=("decision", "allow")), allow_redirects=False
    ) as response:
        location = response.headers.get("Location", "")
        _expect(response.status == 303, f"the decision answered {response.status}, not a 303")
    query = parse_qs(urlsplit(location).query)
    _expect(query.get("status") == ["approved"], f"the decision redirected to {location}")


async def _poll(
    http: aiohttp.ClientSession, url: str, client_id: str, started: Mapping[str, Any], mint: Mint
) -> dict[str, Any]:
    """RFC 8628 §3.4 polling, at the ``interval`` asked for (§3.5 adds 5 s on ``slow_down``)."""
    form = {"grant_type": DEVICE_CODE_GRANT, "device_code": started["device_code"], "client_id": client_id}
    interval = float(started.get("interval", 5))
    for _ in range(_POLLS):
        async with http.post(url, data=form, headers={"Authorization": f"Bearer {mint()}"}) as response:
            answer = await _answer(response)
        if response.status == 200:
            return answer
        error = answer.get("error")
        _expect(error in {"authorization_pending", "slow_down"}, f"the token poll answered {answer}")
        interval += 5 if error == "slow_down" else 0
        await asyncio.sleep(interval)
    raise DemoCheckFailed(f"demo check failed: no token after {_POLLS} polls")


async def _delegated_turn(
    http: aiohttp.ClientSession,
    interface: str,
    text: str,
    message_id: str,
    headers: Mapping[str, str],
    context_id: str | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
    if context_id is not None:
        message["contextId"] = context_id
    body = {"message": message}
    async with http.post(f"{interface}/message:send", json=body, headers=headers) as response:
        reply = await _answer(response)
        _expect(response.status == 200, f"the delegated turn {text!r} answered {response.status} {reply}")
    return reply


def _verify_receipt(receipt: Mapping[str, Any], jwks: Mapping[str, Any]) -> dict[str, Any]:
    """§5.6: ``jws`` verifies with a key at the metadata's ``jwks_uri``; its payload is exactly ``claims``."""
    jws = receipt["jws"]
    header = jwt.get_unverified_header(jws)
    _expect(header.get("typ") == "pact-receipt+jws", f"the receipt's typ is {header.get('typ')!r}")
    keys = {key.key_id: key for key in jwt.PyJWKSet.from_dict(dict(jwks)).keys}
    key = keys.get(header.get("kid"))
    if key is None:
        raise DemoCheckFailed(
            f"demo check failed: the receipt's kid {header.get('kid')!r} is not at the jwks_uri"
        )
    payload = jwt.api_jws.decode(jws, key.key, algorithms=[str(key.algorithm_name)])
    claims: dict[str, Any] = json.loads(payload)
    _expect(claims == receipt["claims"], "the receipt's claims differ from its signed payload")
    return claims


async def _delegation(
    http: aiohttp.ClientSession,
    interface: str,
    login_url: str,
    client_id: str,
    mint: Mint,
    *,
    condition: str | None,
) -> None:
    """§5 end to end: authorize, log in and allow as the User, redeem, act, step up, allow the step-up
    and act with it. ``condition``, when the Brand binds a cancellation to one order (RFC 9396), is
    the consent page's sentence for it: the step-up asks for the order, the page shows it, the
    token carries it and the receipt names it."""
    bound = condition is not None
    endpoints = await _discover(http, interface)
    started = await _authorize(http, endpoints.device_authorization, client_id, mint)
    # The browser is another party: its own cookies, and the PA's JWT is never in it (§5.3).
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        await log_in_and_allow(browser, started)
    issued = await _poll(http, endpoints.token, client_id, started, mint)
    _expect(issued.get("scope") == READ_SCOPE, f"the token grants {issued.get('scope')!r}")
    headers = {
        "Authorization": f"Bearer {mint()}",
        "X-A2A-User-Delegation": f"Bearer {issued['access_token']}",
        "A2A-Version": "1.0",
    }
    reply = await _delegated_turn(http, interface, DELEGATED_TEXT, "d-1", headers)
    message = reply.get("message", {})
    receipt = message.get("metadata", {}).get("pact.receipt")
    _expect(receipt is not None, f"the delegated turn carries no pact.receipt: {reply}")
    claims = _verify_receipt(receipt, await _get_json(http, endpoints.jwks_uri, "the jwks_uri"))
    _expect(READ_SCOPE in claims.get("scopesUsed", []), f"the receipt's scopesUsed are {claims}: {reply}")
    signed_for = (claims.get("user"), claims.get("pa"), claims.get("brand"))
    _expect(signed_for == (DEFAULT_USER, client_id, interface), f"the receipt is for {signed_for}")
    # §5.5 step-up, on the same conversation: a turn that needs the scope the token lacks.
    answered = await _delegated_turn(http, interface, STEP_UP_TEXT, "d-2", headers, message.get("contextId"))
    task = answered.get("task", {})
    state = task.get("status", {}).get("state")
    _expect(state == "TASK_STATE_AUTH_REQUIRED", f"the step-up turn answered {answered}")
    metadata = task.get("metadata", {})
    missing = metadata.get("pact.missingScopes")
    _expect(missing == [CANCEL_SCOPE], f"the step-up task lacks {missing}")
    link = str(metadata.get("pact.verificationUriComplete", ""))
    _expect(link.startswith(login_url), f"the step-up task links to {link!r}, not the Brand's login")
    if bound:
        asked = metadata.get("pact.authorizationDetails")
        _expect(asked == [_order_detail()], f"the step-up task asks the details {asked}")
    # The User approves the step-up: the new grant keeps orders:read and adds the cancellation.
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        started = {"verification_uri_complete": link, "user_code": metadata.get("pact.userCode")}
        shows = [] if condition is None else [condition]
        await log_in_and_allow(browser, started, scopes=[CANCEL_SCOPE], kept=[READ_SCOPE], shows=shows)
    polled = {"device_code": metadata.get("pact.deviceCode"), "interval": metadata.get("pact.interval", 5)}
    stepped = await _poll(http, endpoints.token, client_id, polled, mint)
    if bound:
        carried = stepped.get("authorization_details")
        _expect(carried == [_order_detail()], f"the stepped-up token carries the details {carried}")
    headers = {
        **headers,
        "Authorization": f"Bearer {mint()}",
        "X-A2A-User-Delegation": f"Bearer {stepped['access_token']}",
    }
    reply = await _delegated_turn(http, interface, STEP_UP_TEXT, "d-2", headers, task.get("contextId"))
    receipt = reply.get("message", {}).get("metadata", {}).get("pact.receipt")
    _expect(receipt is not None, f"the stepped-up turn carries no pact.receipt: {reply}")
    claims = _verify_receipt(receipt, await _get_json(http, endpoints.jwks_uri, "the jwks_uri"))
    cancelled = [action for action in claims.get("actions", []) if action.get("tool") == "cancel_order"]
    _expect(len(cancelled) == 1, f"the receipt's actions are {claims.get('actions')}")
    if bound:
        named = cancelled[0].get("authorizationDetail")
        _expect(named == _order_detail(), f"the cancellation's receipt names the detail {named}")


def _order_detail() -> dict[str, Any]:
    """The RFC 9396 detail the sample bot asks for, and the person approves, to cancel the order."""
    return {"type": ORDER_DETAIL, "identifier": STEP_UP_ORDER, "actions": ["cancel"]}


async def run_check(config: GatewayConfig, private: Mapping[str, Any], sub: str) -> None:
    """Run the printed session once through real HTTP; :class:`DemoCheckFailed` names the step that broke."""
    agent = config.personal_agents.registered[0]
    brand = next(iter(config.brands.values()))
    interface = interface_url(config.public_url, brand.id)

    def mint() -> str:
        return mint_token(private, iss=agent.issuer, sub=sub, aud=config.provider.audience)

    async with aiohttp.ClientSession() as http:
        await _identity(http, interface, mint)
        if brand.delegation is None:
            print("demo check passed: card, two turns and a retry", file=sys.stderr)
            return
        types = brand.delegation.authorization_details
        bound = ORDER_DETAIL in types
        condition = consent_sentence(canonical_detail(_order_detail()), types) if bound else None
        await _delegation(
            http, interface, brand.delegation.login.url, agent.issuer, mint, condition=condition
        )
    print(
        "demo check passed: card, two turns and a retry; §5 device authorization, login, consent, "
        "token, a delegated turn with a verified receipt, a step-up"
        + (" for one order (RFC 9396)" if bound else "")
        + ", and the stepped-up turn's receipt",
        file=sys.stderr,
    )
