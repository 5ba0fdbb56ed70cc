"""The stand-in Brand login (§5.3 hand-off), served over loopback HTTP mounted as the demo mounts it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

import aiohttp
import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from examples.sample_login import create_login_app
from examples.sample_login.login import ASSERTION_TTL, consent_target

ISSUER = "http://127.0.0.1/demo-login"
CONSENT = "http://127.0.0.1:8080/a2a/acme/oauth/consent"


class Inputs(HTMLParser):
    """Every ``<input>``'s name → value, the forms' actions, and the scripts' nonces."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self.actions: list[str] = []
        self.nonces: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {name: value or "" for name, value in attrs}
        if tag == "input":
            self.values[attr["name"]] = attr.get("value", "")
        elif tag == "form":
            self.actions.append(attr["action"])
        elif tag == "script":
            self.nonces.append(attr["nonce"])


def inputs(html: str) -> Inputs:
    parser = Inputs()
    parser.feed(html)
    return parser


@pytest.fixture
async def login() -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    """The stand-in under ``/demo-login`` of a real server, and a client for it."""
    app = web.Application()
    app.add_subapp("/demo-login", create_login_app(ISSUER, {CONSENT: "Acme & Sons"}))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    async with aiohttp.ClientSession() as http:
        yield http, str(server.make_url("/demo-login"))
    await server.close()


def login_url(base: str, return_to: str) -> str:
    return f"{base}/login?return_to={quote(return_to, safe='')}"


async def sign_in(http: aiohttp.ClientSession, base: str, **form: str) -> aiohttp.ClientResponse:
    fields = {"return_to": f"{CONSENT}?user_code=WDJB-MJHT", "user": "jane", "password": "x", **form}
    fields.setdefault("user_code", "WDJB-MJHT")
    async with http.post(f"{base}/login", data=fields) as response:
        await response.read()
        return response


async def test_s5_3_login_page_prefills_the_user_code_from_return_to(
    login: tuple[aiohttp.ClientSession, str],
) -> None:
    http, base = login
    async with http.get(login_url(base, f"{CONSENT}?user_code=WDJB-MJHT")) as response:
        page = await response.text()
        assert response.status == 200
        assert response.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    # Issue 18: the stand-in names the Brand it stands in for, escaped, in its title and notice.
    assert "this page stands in for Acme &amp; Sons's real login" in page
    assert "<title>Sign in - Acme &amp; Sons (stand-in login)</title>" in page
    assert "<h1>Sign in to Acme &amp; Sons</h1>" in page
    found = inputs(page)
    assert found.values == {
        "return_to": f"{CONSENT}?user_code=WDJB-MJHT",
        "user": "jane",
        "password": "",
        "user_code": "WDJB-MJHT",
    }
    assert found.actions == ["/demo-login/login"]


async def test_s5_3_login_page_without_user_code_asks_for_it(
    login: tuple[aiohttp.ClientSession, str],
) -> None:
    http, base = login
    async with http.get(login_url(base, CONSENT)) as response:
        assert response.status == 200
        assert inputs(await response.text()).values["user_code"] == ""


async def test_s5_3_login_error_is_announced(login: tuple[aiohttp.ClientSession, str]) -> None:
    """Issue 18 (accessibility): the error is a ``role=alert``, so a screen reader says it."""
    http, base = login
    fields = {"return_to": f"{CONSENT}?user_code=WDJB-MJHT", "user": "", "password": "x", "user_code": ""}
    async with http.post(f"{base}/login", data=fields) as response:
        page = await response.text()
        assert response.status == 400
    assert '<p class="error" id="login-error" role="alert">Enter your user id and the code.</p>' in page
    # Issue 32: both fields left empty say so themselves, described by the error.
    marked = ' aria-invalid="true" aria-describedby="login-error">'
    assert page.count(marked) == 2
    assert f'autocomplete="username" required{marked}' in page
    assert f'autocomplete="off" required{marked}' in page


@pytest.mark.parametrize(
    "return_to",
    [
        "https://evil.example/a2a/acme/oauth/consent",
        "http://127.0.0.1:8080/a2a/other/oauth/consent",
        "http://127.0.0.1:8080/a2a/acme/oauth/consent/decision",
        f"{CONSENT}?user_code=WDJB-MJHT&next=https://evil.example",
        f"{CONSENT}?next=https://evil.example",
        f"{CONSENT}#https://evil.example",
        f"//evil.example{CONSENT}",
        "",
    ],
)
async def test_s5_3_login_returns_only_to_a_known_consent_url(
    login: tuple[aiohttp.ClientSession, str], return_to: str
) -> None:
    """No open redirect: neither the page nor a signed assertion goes anywhere but the consent URL."""
    http, base = login
    async with http.get(login_url(base, return_to)) as response:
        page = await response.text()
        assert response.status == 400
    assert "<form" not in page
    response = await sign_in(http, base, return_to=return_to)
    assert response.status == 400


async def test_s5_3_assertion_is_bound_to_the_consent_url_and_the_user_code(
    login: tuple[aiohttp.ClientSession, str],
) -> None:
    """iss the login, aud the consent URL without its query, sub the user, user_code, jti, iat, exp."""
    http, base = login
    before = int(time.time())
    fields = {
        "return_to": f"{CONSENT}?user_code=WDJB-MJHT",
        "user": "jane",
        "password": "",
        "user_code": "wdjb mjht",
    }
    async with http.post(f"{base}/login", data=fields) as response:
        page = await response.text()
        assert response.status == 200
        policy = response.headers["Content-Security-Policy"]
        assert response.headers["Cache-Control"] == "no-store"
    found = inputs(page)
    assert found.actions == [CONSENT]
    assert f"'nonce-{found.nonces[0]}'" in policy  # the page's own auto-post script may run, no other
    assert "form-action http://127.0.0.1:8080" in policy
    assert ">Continue</button>" in page  # for browsers that run no script
    async with http.get(f"{base}/jwks.json") as response:
        jwks: dict[str, Any] = await response.json()
    assertion = found.values["assertion"]
    key = jwt.PyJWKSet.from_dict(jwks).keys[0]
    assert jwt.get_unverified_header(assertion)["kid"] == key.key_id
    claims = jwt.decode(assertion, key.key, algorithms=["ES256"], audience=CONSENT, issuer=ISSUER)
    assert (claims["sub"], claims["user_code"]) == ("jane", "wdjb mjht")
    assert claims["exp"] - claims["iat"] == ASSERTION_TTL
    assert claims["iat"] >= before
    assert claims["jti"]
    assert "d" not in jwks["keys"][0]


async def test_s5_3_each_sign_in_is_a_new_single_use_assertion(
    login: tuple[aiohttp.ClientSession, str],
) -> None:
    http, base = login
    jtis = set()
    for _ in range(2):
        fields = {"return_to": CONSENT, "user": "jane", "password": "", "user_code": "WDJB-MJHT"}
        async with http.post(f"{base}/login", data=fields) as response:
            assertion = inputs(await response.text()).values["assertion"]
        jtis.add(jwt.decode(assertion, options={"verify_signature": False})["jti"])
    assert len(jtis) == 2


async def test_s5_3_sign_in_without_user_or_code_shows_the_form_again(
    login: tuple[aiohttp.ClientSession, str],
) -> None:
    http, base = login
    fields = {"return_to": CONSENT, "user": "", "password": "", "user_code": "WDJB-MJHT"}
    async with http.post(f"{base}/login", data=fields) as response:
        page = await response.text()
        assert response.status == 400
    assert "assertion" not in inputs(page).values
    assert inputs(page).values["user_code"] == "WDJB-MJHT"


def test_s5_3_consent_target_splits_off_the_user_code() -> None:
    assert consent_target(CONSENT, [CONSENT]) == (CONSENT, "")
    assert consent_target(f"{CONSENT}?user_code=WDJB-MJHT", [CONSENT]) == (CONSENT, "WDJB-MJHT")
    assert consent_target(f"{CONSENT}?user_code=A&user_code=B", [CONSENT]) is None
    assert consent_target(f"{CONSENT}/", [CONSENT]) is None
