"""RFC 7662 introspection for the Brand's back-end, through HTTP: the credential, (in)active tokens."""

from __future__ import annotations

import asyncio
from typing import Any

import jwt
import orjson
import pytest
from aiohttp import ClientResponse

from gateway.http.state import METRICS
from tests.oauth.test_device_authorization import oauth_error
from tests.support.delegation import BrandLogin, enable_delegation, obtain_tokens, post_form
from tests.support.gateway import PUBLIC_URL, Harness, MakeGateway
from tests.support.pa import ManualClock

SECRET = "brand-backend-secret-0123456789abcdef"
ENVIRON = {"ACME_INTROSPECTION_SECRET": SECRET}
BURST = 3
FAILURES = {"rate": 0.5, "burst": BURST}
"""``delegation.introspection.failures`` of these tests: 3 wrong credentials, then one per 2 s."""
URL = "/a2a/acme/oauth/introspect"
INTERFACE = f"{PUBLIC_URL}/a2a/acme"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def igw(
    make_gateway: MakeGateway,
    cache_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    clock: ManualClock,
) -> Harness:
    """A delegating gateway whose Brand configured an introspection secret, on each backend."""
    edit = enable_delegation(
        brand_login,
        provider_key_pem,
        introspection={"secret": "${ACME_INTROSPECTION_SECRET}", "failures": FAILURES},
    )
    return await make_gateway(cache_url, edit=edit, clock=clock, environ=ENVIRON)


async def introspect(h: Harness, token: str, *, secret: str = SECRET) -> ClientResponse:
    return await h.client.post(URL, data={"token": token}, headers={"Authorization": f"Bearer {secret}"})


async def answer_of(response: ClientResponse) -> dict[str, Any]:
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Cache-Control"] == "no-store"
    body: dict[str, Any] = orjson.loads(await response.read())
    return body


async def test_rfc7662_a_live_access_token_is_active_with_its_claims(igw: Harness) -> None:
    tokens = await obtain_tokens(igw, ["orders:read", "orders:cancel"])
    claims = jwt.decode(tokens["access_token"], options={"verify_signature": False})
    answer = await answer_of(await introspect(igw, tokens["access_token"]))
    assert answer == {
        "active": True,
        "scope": "orders:read orders:cancel",
        "client_id": igw.issuer,
        "sub": claims["sub"],
        "exp": claims["exp"],
        "iat": claims["iat"],
        "iss": f"{INTERFACE}/oauth",
        "aud": INTERFACE,
        "token_type": "Bearer",
        "grant_id": claims["grant_id"],
    }


async def test_rfc7662_a_revoked_grant_makes_its_access_token_inactive(igw: Harness) -> None:
    tokens = await obtain_tokens(igw)
    revoked = await post_form(igw, "revoke", {"token": tokens["refresh_token"], "client_id": igw.issuer})
    assert revoked.status == 200
    assert await answer_of(await introspect(igw, tokens["access_token"])) == {"active": False}


async def test_rfc7662_an_expired_access_token_is_inactive(igw: Harness, clock: ManualClock) -> None:
    tokens = await obtain_tokens(igw)
    clock.advance(3600)
    assert await answer_of(await introspect(igw, tokens["access_token"])) == {"active": False}


@pytest.mark.parametrize("token", ["garbage", "a.b.c", "rt_never-issued"])
async def test_rfc7662_unknown_tokens_are_inactive(igw: Harness, token: str) -> None:
    assert await answer_of(await introspect(igw, token)) == {"active": False}


async def test_rfc7662_refresh_tokens_are_never_described_to_the_brand(igw: Harness) -> None:
    # The Brand's back-end never legitimately holds one (they pass only between PA and Provider).
    tokens = await obtain_tokens(igw)
    assert await answer_of(await introspect(igw, tokens["refresh_token"])) == {"active": False}


async def test_rfc7662_a_pa_jwt_is_not_a_delegation_token(igw: Harness) -> None:
    assert await answer_of(await introspect(igw, igw.token())) == {"active": False}


@pytest.mark.parametrize(
    "authorization",
    [None, f"Bearer {SECRET}x", f"Bearer {SECRET[:-1]}", f"Basic {SECRET}", "Bearer", "pa_jwt"],
)
async def test_rfc7662_bad_credential_is_401_invalid_client(igw: Harness, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    if authorization == "pa_jwt":
        headers = igw.auth()
    tokens = await obtain_tokens(igw)
    response = await igw.client.post(URL, data={"token": tokens["access_token"]}, headers=headers)
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="oauth"'
    assert await oauth_error(response) == "invalid_client"


async def test_rfc7662_a_token_is_required(igw: Harness) -> None:
    response = await igw.client.post(
        URL, data={"token_type_hint": "access_token"}, headers={"Authorization": f"Bearer {SECRET}"}
    )
    assert response.status == 400
    assert await oauth_error(response) == "invalid_request"


async def test_rfc7662_no_secret_configured_means_no_endpoint(dgw_memory: Harness) -> None:
    tokens = await obtain_tokens(dgw_memory)
    response = await introspect(dgw_memory, tokens["access_token"])
    assert response.status == 404
    assert await response.read() == b""


# Issue 18 F7: wrong credentials are limited per client address, and a locked-out address is
# refused before its credential is compared, so its guesses tell it nothing.


def refusals(h: Harness) -> float | None:
    app = h.client.app
    assert app is not None
    value: float | None = app[METRICS].registry.get_sample_value(
        "pact_rate_limited_total", {"brand": "acme", "limit": "introspection_failures"}
    )
    return value


async def test_rfc6585_too_many_wrong_credentials_lock_the_address_out_even_with_the_right_one(
    igw: Harness, clock: ManualClock
) -> None:
    tokens = await obtain_tokens(igw)

    async def attempt(secret: str) -> ClientResponse:
        clock.advance(0.001)  # each request a moment after the last, as on a real clock
        return await introspect(igw, tokens["access_token"], secret=secret)

    for _ in range(BURST):
        assert (await attempt("guess")).status == 401
    for secret in ("guess", SECRET):  # the right secret now gets the same answer as a wrong one
        locked = await attempt(secret)
        assert locked.status == 429
        assert locked.headers["Retry-After"] == "2"
        assert await locked.read() == b""
    assert refusals(igw) == 2.0
    clock.advance(2.0)  # one more failure's worth of budget back
    assert (await answer_of(await attempt(SECRET)))["active"] is True
    assert (await attempt("guess")).status == 401
    assert (await attempt(SECRET)).status == 429


async def test_rfc6585_concurrent_wrong_credentials_get_no_more_answers_than_the_budget(igw: Harness) -> None:
    """Issue 28 M1: a wrong credential takes its token in one atomic step. Looked at, then spent
    after the comparison, 20 concurrent guesses on Redis all passed the look and all were answered."""
    tokens = await obtain_tokens(igw)
    guesses = [introspect(igw, tokens["access_token"], secret=f"guess-{n}") for n in range(20)]
    statuses = sorted(response.status for response in await asyncio.gather(*guesses))
    assert statuses == [401] * BURST + [429] * (20 - BURST)
    assert refusals(igw) == 20 - BURST


async def test_rfc7662_right_credentials_never_spend_the_failure_budget(igw: Harness) -> None:
    tokens = await obtain_tokens(igw)
    for _ in range(3 * BURST):
        assert (await answer_of(await introspect(igw, tokens["access_token"])))["active"] is True
    assert (await introspect(igw, tokens["access_token"], secret="guess")).status == 401
    assert refusals(igw) is None
