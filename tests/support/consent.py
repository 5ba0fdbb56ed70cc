"""§5.3 as the three parties drive it over HTTP: the personal agent asks, the Brand login hands off,
the User decides on the consent form.

Plain helpers over a delegating :class:`Harness` (``dgw``): each step is the request the real
party sends, so a test reads as the flow it checks. :func:`parse_consent_form` reads the page
the way a browser would see its form, with :mod:`html.parser` (no regular expressions over HTML).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

from aiohttp import ClientResponse

from gateway.app import OAUTH_STORE
from gateway.protocol.urls import OAuthUrls
from gateway.store.oauth import AuthorizationStatus, DeviceAuthorization, OAuthStore
from tests.support import delegation
from tests.support.delegation import SCOPES, BrandLogin, device_authorize
from tests.support.gateway import Harness
from tests.support.secrets_scan import remember

__all__ = [
    "CONSENT_USER",
    "DETAIL_TYPES",
    "ORDER_TYPE",
    "ConsentForm",
    "authorization",
    "device_authorization",
    "landing_id",
    "local",
    "oauth_store",
    "oauth_urls",
    "order",
    "parse_consent_form",
    "poll_token",
    "post_assertion",
    "post_decision",
    "redirect_query",
    "sign_in",
    "status_of",
]

CONSENT_USER = "jane-4471"
"""The Brand user id the test Brand login signs in."""
ORDER_TYPE = "https://acme.example/rar/order"
DETAIL_TYPES = [
    {
        "type": ORDER_TYPE,
        "scopes": ["orders:cancel"],
        "actions": ["cancel"],
        "fields": {
            "type": "object",
            "properties": {"identifier": {"type": "string", "maxLength": 64}},
            "required": ["identifier"],
        },
        "consent": "Only order {identifier}",
    }
]
"""The RFC 9396 type the test Brand accepts when a test turns it on (``authorization_details=``
of :func:`~tests.support.delegation.enable_delegation`): one order to cancel, any identifier (so
one can hold HTML)."""


def order(identifier: str, **more: Any) -> dict[str, Any]:
    """An RFC 9396 detail of :data:`ORDER_TYPE`."""
    return {"type": ORDER_TYPE, "identifier": identifier, **more}


def oauth_urls(gw: Harness, brand: str = "acme") -> OAuthUrls:
    return OAuthUrls.of(gw.config.public_url, brand)


def local(url: str) -> str:
    """One of the gateway's own absolute URLs as a path (and query) for the test client."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


def oauth_store(gw: Harness) -> OAuthStore:
    """The gateway's own §5 state, to check what a step did (or did not) change."""
    store: OAuthStore = gw.client.app[OAUTH_STORE]
    return store


async def device_authorization(
    gw: Harness,
    scopes: Iterable[str] = tuple(SCOPES),
    *,
    sub: str = "alice",
    issuer: str | None = None,
    brand: str = "acme",
    details: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """:func:`tests.support.delegation.device_authorize`, asking for every scope of the card by default,
    and for RFC 9396 ``details`` (the ``authorization_details`` parameter, a JSON array) if any."""
    return await device_authorize(gw, scopes, sub=sub, issuer=issuer, brand=brand, details=details)


async def post_assertion(gw: Harness, assertion: str, *, brand: str = "acme") -> ClientResponse:
    """The Brand login's auto-posted form: ``assertion`` to the consent URL (``return_to``)."""
    return await gw.client.post(
        local(oauth_urls(gw, brand).consent), data={"assertion": assertion}, allow_redirects=False
    )


async def sign_in(
    gw: Harness, login: BrandLogin, user_code: str, *, user: str = CONSENT_USER, **claims: Any
) -> ClientResponse:
    """The User signs in at the Brand, which hands off to the consent URL with a fresh assertion."""
    assertion = login.assertion(user=user, user_code=user_code, audience=oauth_urls(gw).consent, **claims)
    return await post_assertion(gw, assertion)


async def post_decision(
    gw: Harness,
    session: str,
    decision: str,
    scopes: Sequence[str],
    *,
    keep: Sequence[str] = (),
    brand: str = "acme",
) -> ClientResponse:
    """The consent form as a browser submits it: ``session``, the pressed button, the ticked boxes
    (``scope`` for what is asked now, ``keep`` for the earlier grant's scopes left ticked)."""
    remember("a consent session", session)
    fields = [
        ("session", session),
        ("decision", decision),
        *(("scope", scope) for scope in scopes),
        *(("keep", scope) for scope in keep),
    ]
    return await gw.client.post(
        local(oauth_urls(gw, brand).consent_decision), data=fields, allow_redirects=False
    )


def redirect_query(response: ClientResponse) -> dict[str, list[str]]:
    """The conformance notes' part of a 303's ``Location`` query: all of it but ``r``, the id of the
    gateway's own landing record (:func:`landing_id`)."""
    query = parse_qs(urlsplit(response.headers["Location"]).query)
    query.pop("r", None)
    return query


def landing_id(response: ClientResponse) -> str:
    """The single ``r`` of a 303 to the gateway's own landing page: its record's unguessable id."""
    (record_id,) = parse_qs(urlsplit(response.headers["Location"]).query)["r"]
    remember("a landing record id", record_id)
    return record_id


async def poll_token(
    gw: Harness, device_code: str, *, sub: str = "alice", brand: str = "acme"
) -> tuple[int, dict[str, Any]]:
    """One RFC 8628 §3.4 token poll (:func:`tests.support.delegation.poll_token`): status and JSON answer."""
    response = await delegation.poll_token(gw, device_code, sub=sub, brand=brand)
    answer: dict[str, Any] = await response.json()
    return response.status, answer


async def authorization(gw: Harness, user_code: str) -> DeviceAuthorization | None:
    return await oauth_store(gw).authorization_by_user_code("acme", user_code, time.time())


async def status_of(gw: Harness, user_code: str) -> AuthorizationStatus | None:
    """Where the authorization ``user_code`` names stands now (``None``: unknown or expired)."""
    found = await authorization(gw, user_code)
    return None if found is None else found.status


@dataclass
class ConsentForm:
    """What a browser sees of the consent form."""

    action: str = ""
    method: str = ""
    session: str = ""
    scopes: dict[str, bool] = field(default_factory=dict)
    """Each ``scope`` checkbox's value, and whether it is ticked."""
    labels: dict[str, str] = field(default_factory=dict)
    """Each scope's label text, unescaped as a browser shows it."""
    decisions: list[str] = field(default_factory=list)
    keep: dict[str, bool] = field(default_factory=dict)
    """Each ``keep`` checkbox (a scope of the earlier grant the new one would carry), and whether ticked."""
    conditions: dict[str, list[str]] = field(default_factory=dict)
    """The conditions (RFC 9396 details) inside each ``scope`` or ``keep`` checkbox's label, by the
    box's value, as the browser shows them; a box without any has no entry."""


class _FormParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.form = ConsentForm()
        self._label_of: str | None = None
        self._box_of: str | None = None
        self._condition_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {name: value or "" for name, value in attrs}
        if tag == "form":
            self.form.action, self.form.method = attr.get("action", ""), attr.get("method", "")
        elif tag == "input" and attr.get("name") == "session":
            self.form.session = attr.get("value", "")
        elif tag == "input" and attr.get("name") == "scope" and attr.get("type") == "checkbox":
            value = attr.get("value", "")
            self.form.scopes[value] = "checked" in {name for name, _ in attrs}
            self.form.labels[value] = ""
            self._label_of = self._box_of = value
        elif tag == "input" and attr.get("name") == "keep" and attr.get("type") == "checkbox":
            self.form.keep[attr.get("value", "")] = "checked" in {name for name, _ in attrs}
            self._box_of = attr.get("value", "")
        elif tag == "span" and self._condition_depth:
            self._condition_depth += 1
        elif tag == "span" and self._box_of is not None and "condition" in attr.get("class", "").split():
            self._condition_depth = 1
            self.form.conditions.setdefault(self._box_of, []).append("")
        elif tag == "button" and attr.get("name") == "decision":
            self.form.decisions.append(attr.get("value", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "label":
            self._label_of = self._box_of = None
        elif tag == "span" and self._condition_depth:
            self._condition_depth -= 1

    def handle_data(self, data: str) -> None:
        if self._condition_depth and self._box_of is not None:
            self.form.conditions[self._box_of][-1] += data
        elif self._label_of is not None:
            self.form.labels[self._label_of] += data


def parse_consent_form(html: str) -> ConsentForm:
    parser = _FormParser()
    parser.feed(html)
    parser.close()
    remember("a consent session", parser.form.session)
    form = parser.form
    form.labels = {value: text.strip() for value, text in form.labels.items()}
    return form
