"""A stand-in for a Brand's own login page, so the §5.3 hand-off can be walked in a browser.

A real Brand already has a login; what PACT asks of it is one extra step after it: sign a
short-lived assertion (``iss`` the login, ``aud`` the Provider's consent URL, ``sub`` the
Brand's user id, ``user_code``, ``jti``, ``iat``, ``exp``) and auto-post it as the form field
``assertion`` to ``return_to``. This app does exactly that and nothing more: any password
passes, and the user id is whatever is typed. It knows nothing of the gateway beyond the
consent URLs it may return to, and, like the sample bot, imports nothing from it.

``return_to`` must be one of those consent URLs exactly (at most with the ``user_code`` the
Provider put there), so the page can never be used to send someone, or a signed assertion,
anywhere else.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from html import escape
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import jwt
import orjson
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

__all__ = ["ASSERTION_TTL", "DEFAULT_USER", "LoginSite", "consent_target", "create_login_app"]

ASSERTION_TTL: Final = 120
"""Seconds an assertion lives (the conformance notes: "about 2 minutes, at most 5")."""
DEFAULT_USER: Final = "jane"

_STYLE: Final = """
*{box-sizing:border-box}
body{margin:0;font:17px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a1a1a;
background:#f4f4f6;overflow-wrap:anywhere}
main{max-width:28rem;margin:0 auto;padding:24px 16px 32px}
h1{font-size:1.4rem;margin:0 0 12px}
.standin{background:#fff3c4;border:1px solid #e0b400;border-radius:10px;padding:10px 12px;margin:0 0 20px}
label{display:block;font-weight:600;margin:0 0 4px}
input{display:block;width:100%;min-height:48px;padding:10px 12px;margin:0 0 16px;font:inherit;
border:1px solid #6b6b76;border-radius:10px;background:#fff;color:#1a1a1a}
button{width:100%;min-height:48px;padding:12px 16px;font:inherit;font-weight:600;border-radius:10px;
border:1px solid #1d4ed8;background:#1d4ed8;color:#fff;cursor:pointer}
:focus-visible{outline:3px solid #1d4ed8;outline-offset:2px}
button:focus-visible{outline-color:#1a1a1a}
.error{color:#b00020;font-weight:600}
"""
_STANDIN: Final = (
    '<p class="standin"><strong>Demo only:</strong> this page stands in for {brand}\'s real login. '
    "Any password works.</p>\n"
)
_HANDOFF_SCRIPT: Final = 'document.getElementById("handoff").submit();'


@dataclass(frozen=True, slots=True)
class LoginSite:
    """The stand-in's whole state: who it signs as, with which key, and where it may return to."""

    issuer: str
    consent_urls: Mapping[str, str]
    """Each consent URL it may return to, and the name of the Brand it stands in for there."""
    key: ec.EllipticCurvePrivateKey
    kid: str

    @classmethod
    def generate(cls, issuer: str, consent_urls: Mapping[str, str]) -> LoginSite:
        """A fresh ES256 key, made at start-up and never written anywhere."""
        return cls(issuer, dict(consent_urls), ec.generate_private_key(ec.SECP256R1()), secrets.token_hex(8))

    def jwks(self) -> dict[str, Any]:
        public = ECAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return {"keys": [{**public, "kid": self.kid, "alg": "ES256", "use": "sig"}]}

    def assertion(self, *, user: str, user_code: str, consent_url: str, now: float) -> str:
        """The §5.3 hand-off JWT for ``user`` who came for ``user_code``, for ``consent_url`` only."""
        issued = int(now)
        claims = {
            "iss": self.issuer,
            "aud": consent_url,
            "sub": user,
            "user_code": user_code,
            "jti": secrets.token_urlsafe(16),
            "iat": issued,
            "exp": issued + ASSERTION_TTL,
        }
        return jwt.encode(claims, self.key, algorithm="ES256", headers={"kid": self.kid, "typ": "JWT"})


SITE = web.AppKey("site", LoginSite)


def consent_target(return_to: str, consent_urls: Collection[str]) -> tuple[str, str] | None:
    """``(consent URL, user_code or "")`` when ``return_to`` is a known consent URL, else ``None``.

    Exactly one of ``consent_urls``, with no query or only the one ``user_code`` parameter
    (what ``verification_uri_complete`` carries), and no fragment: no open redirect.
    """
    if "#" in return_to:
        return None
    parts = urlsplit(return_to)
    base = urlunsplit(parts._replace(query=""))
    if base not in consent_urls:
        return None
    if not parts.query:
        return base, ""
    query = parse_qsl(parts.query, keep_blank_values=True)
    if len(query) != 1 or query[0][0] != "user_code":
        return None
    return base, query[0][1]


def _headers(nonce: str, form_action: str) -> dict[str, str]:
    """Never framed (§5.3: the personal agent must not frame the login), cached or leaked by Referer;
    the only script that runs is this page's own, by nonce."""
    return {
        "Content-Type": "text/html; charset=utf-8",
        "Cache-Control": "no-store",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
            f"form-action {form_action}; frame-ancestors 'none'; base-uri 'none'"
        ),
    }


def _page(
    title: str,
    body: str,
    *,
    brand: str,
    status: int = 200,
    form_action: str = "'self'",
    script: str = "",
) -> web.Response:
    """A whole page naming the Brand it stands in for (``brand``, escaped here, in the title and the
    notice); ``body`` must already be safe HTML, ``script`` runs under this answer's nonce."""
    nonce = secrets.token_urlsafe(16)
    tail = f'<script nonce="{nonce}">{script}</script>\n' if script else ""
    notice = _STANDIN.replace("{brand}", escape(brand))
    html = (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="robots" content="noindex">\n'
        f"<title>{escape(title)} - {escape(brand)} (stand-in login)</title>\n"
        f'<style nonce="{nonce}">{_STYLE}</style>\n</head>\n'
        f"<body>\n<main>\n{notice}{body}</main>\n{tail}</body>\n</html>\n"
    )
    return web.Response(body=html.encode(), status=status, headers=_headers(nonce, form_action))


def _refuse_return_to() -> web.Response:
    body = (
        "<h1>Cannot continue</h1>\n"
        "<p>This sign-in link does not lead back to a known consent page. "
        "Start again from your assistant.</p>\n"
    )
    return _page("Cannot continue", body, brand="the Brand", status=400)


ERROR_ID: Final = "login-error"


def _login_form(
    action: str,
    return_to: str,
    brand: str,
    user: str,
    user_code: str,
    error: str = "",
    invalid: Collection[str] = (),
) -> str:
    """The sign-in form; with ``error``, the fields named in ``invalid`` are marked as the ones to
    fix (``aria-invalid``, described by the error), so a screen reader says so on each of them."""
    # role=alert: a screen reader announces the error as the page with it loads.
    notice = f'<p class="error" id="{ERROR_ID}" role="alert">{escape(error)}</p>\n' if error else ""

    def marked(name: str) -> str:
        return f' aria-invalid="true" aria-describedby="{ERROR_ID}"' if error and name in invalid else ""

    return (
        f"<h1>Sign in to {escape(brand)}</h1>\n"
        f"{notice}"
        f'<form method="post" action="{escape(action)}">\n'
        f'<input type="hidden" name="return_to" value="{escape(return_to)}">\n'
        '<label for="user">User id</label>\n'
        f'<input id="user" name="user" value="{escape(user)}" autocomplete="username" required'
        f"{marked('user')}>\n"
        '<label for="password">Password</label>\n'
        '<input id="password" name="password" type="password" autocomplete="current-password">\n'
        '<label for="user_code">Code shown by your assistant</label>\n'
        f'<input id="user_code" name="user_code" value="{escape(user_code)}" autocapitalize="characters" '
        f'autocomplete="off" required{marked("user_code")}>\n'
        '<button type="submit">Sign in</button>\n'
        "</form>\n"
    )


async def show_login(request: web.Request) -> web.Response:
    """``GET login?return_to=…``: the form, the user code taken from ``return_to`` when it has one."""
    return_to = request.query.get("return_to", "")
    consent_urls = request.app[SITE].consent_urls
    target = consent_target(return_to, consent_urls)
    if target is None:
        return _refuse_return_to()
    brand = consent_urls[target[0]]
    return _page("Sign in", _login_form(request.path, return_to, brand, DEFAULT_USER, target[1]), brand=brand)


def _handoff(consent_url: str, assertion: str, user: str) -> str:
    """The auto-posting form; the button is for browsers that run no script."""
    return (
        f"<h1>Signed in as {escape(user)}</h1>\n"
        f'<form id="handoff" method="post" action="{escape(consent_url)}">\n'
        f'<input type="hidden" name="assertion" value="{escape(assertion)}">\n'
        "<p>Taking you to the permissions page…</p>\n"
        '<button type="submit">Continue</button>\n'
        "</form>\n"
    )


async def sign_in(request: web.Request) -> web.Response:
    """``POST login``: any password passes; answer with the assertion auto-posted to the consent URL."""
    site = request.app[SITE]
    form = await request.post()
    return_to, user, user_code = (
        str(form.get(name, "")).strip() for name in ("return_to", "user", "user_code")
    )
    target = consent_target(return_to, site.consent_urls)
    if target is None:
        return _refuse_return_to()
    consent_url = target[0]
    brand = site.consent_urls[consent_url]
    if not user or not user_code:
        missing = [name for name, value in (("user", user), ("user_code", user_code)) if not value]
        body = _login_form(
            request.path, return_to, brand, user, user_code, "Enter your user id and the code.", missing
        )
        return _page("Sign in", body, brand=brand, status=400)
    assertion = site.assertion(user=user, user_code=user_code, consent_url=consent_url, now=time.time())
    parts = urlsplit(consent_url)
    return _page(
        "Signed in",
        _handoff(consent_url, assertion, user),
        brand=brand,
        form_action=f"{parts.scheme}://{parts.netloc}",
        script=_HANDOFF_SCRIPT,
    )


async def jwks(request: web.Request) -> web.Response:
    """The public keys the Provider verifies assertions with (its ``login.jwks_uri``)."""
    body = orjson.dumps(request.app[SITE].jwks())
    return web.Response(body=body, content_type="application/json", headers={"Cache-Control": "max-age=300"})


def create_login_app(issuer: str, consent_urls: Mapping[str, str]) -> web.Application:
    """The stand-in as an aiohttp app: ``GET|POST login`` and ``GET jwks.json``, to mount anywhere.

    ``issuer`` is the ``login.issuer`` the gateway is configured with; ``consent_urls`` maps the
    consent URL of each Brand whose login this is to that Brand's name, which its pages show.
    """
    app = web.Application()
    app[SITE] = LoginSite.generate(issuer, consent_urls)
    app.router.add_get("/login", show_login, allow_head=False)
    app.router.add_post("/login", sign_in)
    app.router.add_get("/jwks.json", jwks, allow_head=False)
    return app
