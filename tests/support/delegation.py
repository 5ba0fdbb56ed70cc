"""Shared §5 fixtures: a test Brand login that signs assertions, the Provider's signing key, and a
gateway whose ``acme`` Brand delegates.

``enable_delegation`` edits a raw configuration (the ``edit=`` hook of ``make_gateway``), so a
test builds a delegating gateway in one call: ``await make_gateway(cache_url, edit=...)``, or
just takes the ``dgw`` fixture (both backends) or ``dgw_memory``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gateway.handlers.oauth.tokens import new_family, new_refresh_token
from gateway.handlers.state import RUNTIME
from gateway.oauth.access_token import mint_access_token
from gateway.oauth.device import code_hash, start_device_authorization
from gateway.oauth.server import AuthorizationServer
from gateway.store import keys as store_keys
from gateway.store.base import Owner
from gateway.store.oauth import Grant, PollOutcome
from tests.support.gateway import Harness, MakeGateway
from tests.support.pa import Omit, PAKey
from tests.support.secrets_scan import remember

__all__ = [
    "BRAND_USER",
    "DEVICE_CODE_GRANT",
    "LOGIN_ISSUER",
    "LOGIN_URL",
    "SCOPES",
    "BrandLogin",
    "approve_via_store",
    "brand_login",
    "delegated",
    "deny_via_store",
    "device_authorize",
    "dgw",
    "dgw_memory",
    "enable_delegation",
    "grant_id",
    "grant_via_store",
    "mint_for",
    "new_provider_key_pem",
    "oauth_path",
    "oauth_server",
    "obtain_tokens",
    "poll_token",
    "post_form",
    "provider_key_pem",
    "redeem_via_store",
    "refresh",
    "remember_token_answer",
]

LOGIN_ISSUER = "https://login.acme.test"
LOGIN_URL = "https://login.acme.test/pact/login"
SCOPES = {
    "orders:read": "Look up your orders and their status",
    "orders:cancel": "Cancel an order that has not shipped",
    "profile:read": "See your name & <email> address",
}
"""The test Brand's scopes; the last description carries HTML metacharacters on purpose."""


def new_provider_key_pem() -> str:
    """A fresh ES256 (P-256) private key as PKCS#8 PEM, as an operator's file would hold it."""
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


class BrandLogin:
    """The Brand's login as §5.3 needs it: a key that signs the single-use assertion it posts back."""

    def __init__(self, key: PAKey | None = None) -> None:
        self.key = key or PAKey.es256(kid="login-1")
        self.issuer = LOGIN_ISSUER

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self.key.public_jwk()]}

    def assertion(
        self,
        *,
        user: str,
        user_code: str | Omit,
        audience: str,
        jti: str | Omit | None = None,
        iss: str | None = None,
        iat: float | None = None,
        ttl: float = 120,
        key: PAKey | None = None,
        claims: Mapping[str, object] | None = None,
    ) -> str:
        """An assertion for ``user`` bound to ``user_code``, for the consent URL ``audience``, with
        ``claims`` added (e.g. the optional display name)."""
        issued = int(time.time()) if iat is None else iat
        extra: dict[str, object] = {
            "user_code": user_code,
            "jti": secrets.token_hex(8) if jti is None else jti,
            **(claims or {}),
        }
        assertion = (key or self.key).mint(
            iss or self.issuer, user, audience, iat=issued, exp=issued + ttl, extra_claims=extra
        )
        remember("a Brand-login assertion", assertion)
        remember("a Brand user id", user)
        return assertion


def enable_delegation(
    login: BrandLogin,
    signing_key_pem: str,
    *,
    brand_index: int = 0,
    **overrides: Any,
) -> Callable[[dict[str, Any]], None]:
    """An ``edit=`` hook: the Brand at ``brand_index`` (``acme``) delegates with :data:`SCOPES`."""

    def edit(raw: dict[str, Any]) -> None:
        raw["oauth"] = {"signing_keys": [{"value": signing_key_pem}]}
        raw["brands"][brand_index]["delegation"] = {
            "scopes": dict(SCOPES),
            "login": {"url": LOGIN_URL, "issuer": login.issuer, "jwks": login.jwks()},
            **overrides,
        }

    return edit


@pytest.fixture
def brand_login() -> BrandLogin:
    return BrandLogin()


@pytest.fixture(scope="session")
def provider_key_pem() -> str:
    return new_provider_key_pem()


@pytest.fixture
async def dgw(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> Harness:
    """A gateway whose ``acme`` Brand delegates, on each backend in turn."""
    return await make_gateway(cache_url, edit=enable_delegation(brand_login, provider_key_pem))


@pytest.fixture
async def dgw_memory(make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str) -> Harness:
    """A delegating gateway on the memory store."""
    return await make_gateway(edit=enable_delegation(brand_login, provider_key_pem))


# §5.3 as a personal agent runs it: device authorization, token polls and refreshes over HTTP, with
# the User's approval given through the store (the consent page has its own tests).

DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
BRAND_USER = "jane-4471"
"""The Brand user id :func:`approve_via_store` approves as by default."""


async def remember_token_answer(response: ClientResponse) -> None:
    """The delegation and refresh tokens of a token endpoint's answer, for the log scan.

    The body is read here (aiohttp keeps it, so the caller can still read it); an answer that
    is not a JSON object carries no token.
    """
    try:
        answer = await response.json(content_type=None)
    except ValueError:
        return
    if isinstance(answer, dict):
        remember("a delegation token", answer.get("access_token"))
        remember("a refresh token", answer.get("refresh_token"))


def oauth_path(endpoint: str, brand: str = "acme") -> str:
    """A Brand's OAuth endpoint, relative to the gateway: ``/a2a/{brand}/oauth/{endpoint}``."""
    return f"/a2a/{brand}/oauth/{endpoint}"


def oauth_server(h: Harness) -> AuthorizationServer:
    """The gateway's live §5 authorization server (keys, store, clock)."""
    server: AuthorizationServer | None = h.client.app[RUNTIME].current.oauth
    assert server is not None, "no Brand delegates in this gateway"
    return server


async def post_form(
    h: Harness,
    endpoint: str,
    form: Mapping[str, str],
    *,
    sub: str = "alice",
    issuer: str | None = None,
    brand: str = "acme",
    headers: Mapping[str, str] | None = None,
) -> ClientResponse:
    """POST ``form`` (``application/x-www-form-urlencoded``) with the PA JWT of ``(issuer, sub)``."""
    return await h.client.post(
        oauth_path(endpoint, brand),
        data=dict(form),
        headers={**h.auth(sub, issuer=issuer), **(headers or {})},
    )


async def device_authorize(
    h: Harness,
    scopes: Iterable[str] = ("orders:read",),
    *,
    sub: str = "alice",
    issuer: str | None = None,
    brand: str = "acme",
    details: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Start a device authorization for ``scopes`` (asserting ``200``): the RFC 8628 §3.2 answer.

    ``details``, if any, go as RFC 9396 ``authorization_details`` (a JSON array)."""
    form = {"client_id": issuer or h.issuer, "scope": " ".join(scopes)}
    if details:
        form["authorization_details"] = orjson.dumps(list(details)).decode()
    response = await post_form(h, "device_authorization", form, sub=sub, issuer=issuer, brand=brand)
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json()
    remember("a device code", answer.get("device_code"))
    remember("a user code", answer.get("user_code"))
    return answer


async def poll_token(
    h: Harness, device_code: str, *, sub: str = "alice", issuer: str | None = None, brand: str = "acme"
) -> ClientResponse:
    """One RFC 8628 §3.4 token poll for ``device_code``, as ``(issuer, sub)``."""
    form = {"grant_type": DEVICE_CODE_GRANT, "device_code": device_code, "client_id": issuer or h.issuer}
    remember("a device code", device_code)
    response = await post_form(h, "token", form, sub=sub, issuer=issuer, brand=brand)
    await remember_token_answer(response)
    return response


async def refresh(
    h: Harness,
    refresh_token: str,
    *,
    scope: str | None = None,
    sub: str = "alice",
    issuer: str | None = None,
    brand: str = "acme",
) -> ClientResponse:
    """One RFC 6749 §6 refresh, narrowed to ``scope`` if given."""
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": issuer or h.issuer}
    if scope is not None:
        form["scope"] = scope
    remember("a refresh token", refresh_token)
    response = await post_form(h, "token", form, sub=sub, issuer=issuer, brand=brand)
    await remember_token_answer(response)
    return response


async def approve_via_store(
    h: Harness,
    started: Mapping[str, Any],
    *,
    user: str = BRAND_USER,
    scopes: Iterable[str] | None = None,
    brand: str = "acme",
) -> None:
    """Approve the authorization ``started`` (a :func:`device_authorize` answer) as the consent page would.

    ``scopes`` defaults to everything requested.
    """
    server = oauth_server(h)
    now = server.clock()
    remember("a Brand user id", user)
    remember("a device code", started.get("device_code"))
    remember("a user code", started.get("user_code"))
    pending = await server.store.authorization_by_user_code(brand, started["user_code"], now)
    assert pending is not None, "the authorization is not live"
    assert pending.device_hash == code_hash(started["device_code"])
    scopes = pending.scopes if scopes is None else scopes
    approved = await server.store.approve(brand, pending, user, tuple(scopes), now)
    assert approved, "the authorization was not pending"


async def deny_via_store(h: Harness, started: Mapping[str, Any], *, brand: str = "acme") -> None:
    """Deny the authorization ``started``, as a User pressing "deny" would."""
    server = oauth_server(h)
    pending = await server.store.authorization_by_user_code(brand, started["user_code"], server.clock())
    assert pending is not None, "the authorization is not live"
    assert await server.store.deny(brand, pending, server.clock())


async def obtain_tokens(
    h: Harness,
    scopes: Iterable[str] = ("orders:read",),
    *,
    sub: str = "alice",
    user: str = BRAND_USER,
    issuer: str | None = None,
    brand: str = "acme",
) -> dict[str, Any]:
    """The whole §5.3 flow for ``scopes``, all approved: the token answer (``access_token`` …)."""
    started = await device_authorize(h, scopes, sub=sub, issuer=issuer, brand=brand)
    await approve_via_store(h, started, user=user, brand=brand)
    response = await poll_token(h, started["device_code"], sub=sub, issuer=issuer, brand=brand)
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json()
    return answer


async def redeem_via_store(
    h: Harness, device_code: str, *, sub: str = "alice", issuer: str | None = None, brand: str = "acme"
) -> Grant:
    """Redeem an approved ``device_code`` straight through the store, as the token endpoint would."""
    server = oauth_server(h)
    delegation = h.config.brands[brand].delegation
    assert delegation is not None, f"{brand} does not delegate"
    remember("a device code", device_code)
    owner_digest = Owner(brand, issuer or h.issuer, sub).digest
    result = await server.store.poll(
        brand,
        code_hash(device_code),
        owner_digest,
        server.clock(),
        refresh=new_refresh_token(server.store.new_grant_id(owner_digest), new_family())[1],
        grant_ttl=delegation.grant_ttl,
    )
    assert result.outcome is PollOutcome.ISSUED, result
    assert result.grant is not None
    return result.grant


async def grant_via_store(
    h: Harness,
    scopes: Iterable[str] = ("orders:read",),
    *,
    sub: str = "alice",
    user: str = BRAND_USER,
    issuer: str | None = None,
    brand: str = "acme",
) -> Grant:
    """A live grant of ``scopes`` to ``(issuer, sub)`` as Brand user ``user``, made through the store
    (device authorization, approval, redemption) without the OAuth endpoints."""
    server = oauth_server(h)
    config = h.config.brands[brand]
    assert config.delegation is not None, f"{brand} does not delegate"
    started = await start_device_authorization(
        server.store,
        config.delegation,
        server.urls(config),
        brand_id=brand,
        client_id=issuer or h.issuer,
        owner_digest=Owner(brand, issuer or h.issuer, sub).digest,
        scopes=tuple(scopes),
        now=server.clock(),
    )
    await approve_via_store(h, started.as_json(), user=user, brand=brand)
    return await redeem_via_store(h, started.device_code, sub=sub, issuer=issuer, brand=brand)


def mint_for(
    h: Harness,
    grant: Grant,
    *,
    scopes: Iterable[str] | None = None,
    now: float | None = None,
    ttl: int = 3600,
) -> str:
    """A §5.4 token for ``grant`` (its Brand's ``iss`` and ``aud``), signed by the gateway's keys."""
    server = oauth_server(h)
    urls = server.urls(h.config.brands[grant.brand_id])
    token, _ = mint_access_token(
        server.keys,
        grant,
        issuer=urls.issuer,
        audience=urls.interface,
        scopes=grant.scopes if scopes is None else tuple(scopes),
        now=server.clock() if now is None else now,
        ttl=ttl,
    )
    remember("a delegation token", token)
    return token


def delegated(token: str) -> dict[str, str]:
    """The §5.5 request header carrying ``token``."""
    return {"X-A2A-User-Delegation": f"Bearer {token}"}


def grant_id(name: str, owner: Owner) -> str:
    """Grant ``name`` of ``owner`` as an id of the tagged layout (``OAuthStore.new_grant_id``'s shape,
    readable in a failure), so that on a Redis Cluster it is in its owner's slot (issue 20); an id
    already minted (``a2agrant_…``) stays as it is."""
    if name.startswith(store_keys.GRANT_ID_PREFIX):
        return name
    return store_keys.GRANT_ID_PREFIX + store_keys.owner_tag(owner.digest) + name.rjust(22, "0")
