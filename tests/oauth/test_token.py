"""§5.3 the token endpoint, through HTTP: RFC 8628 polling in the documented order, the §5.4 token, and
RFC 6749 §6 refresh with rotation, narrowing and reuse detection."""

from __future__ import annotations

import asyncio
from typing import Any

import jwt
import orjson
import pytest
import redis.asyncio as aioredis
from aiohttp import ClientResponse

from gateway.handlers.oauth.tokens import new_refresh_token, open_answer, refresh_token_of
from gateway.handlers.state import METRICS
from gateway.oauth.device import code_hash
from gateway.ops.metrics import Metrics
from gateway.store.oauth import RefreshToken
from tests.oauth.test_device_authorization import oauth_error
from tests.support.delegation import (
    BRAND_USER,
    DEVICE_CODE_GRANT,
    BrandLogin,
    approve_via_store,
    delegated,
    deny_via_store,
    device_authorize,
    enable_delegation,
    obtain_tokens,
    poll_token,
    post_form,
    refresh,
)
from tests.support.gateway import OTHER_PA, PUBLIC_URL, Harness, MakeGateway
from tests.support.pa import ManualClock

INTERFACE = f"{PUBLIC_URL}/a2a/acme"
ISSUER = f"{INTERFACE}/oauth"


@pytest.fixture
def clock() -> ManualClock:
    # Starts at the real time: Redis still expires keys by its own clock, a little after ours.
    return ManualClock()


@pytest.fixture
async def cgw(
    make_gateway: MakeGateway,
    cache_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    clock: ManualClock,
) -> Harness:
    """A delegating gateway on each backend whose §5 decisions run on ``clock``."""
    return await make_gateway(cache_url, edit=enable_delegation(brand_login, provider_key_pem), clock=clock)


async def error_of(response: ClientResponse, status: int = 400) -> str:
    assert response.status == status, await response.text()
    return await oauth_error(response)


def events(h: Harness, event: str) -> float:
    value = h.client.app[METRICS].registry.get_sample_value(
        "pact_delegation_events_total", {"brand": "acme", "event": event}
    )
    return value or 0.0


async def tokens_of(response: ClientResponse) -> dict[str, Any]:
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["Pragma"] == "no-cache"
    answer: dict[str, Any] = orjson.loads(await response.read())
    return answer


async def verify_with_served_keys(h: Harness, token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The token's header and claims, verified with PyJWT against the keys the metadata's jwks_uri serves."""
    metadata = await (await h.client.get("/a2a/acme/oauth/.well-known/oauth-authorization-server")).json()
    assert metadata["jwks_uri"].startswith(PUBLIC_URL)
    jwks = await (await h.client.get(metadata["jwks_uri"].removeprefix(PUBLIC_URL))).json()
    header = jwt.get_unverified_header(token)
    key = jwt.PyJWKSet.from_dict(jwks)[header["kid"]]
    claims: dict[str, Any] = jwt.decode(
        token,
        key.key,
        algorithms=[key.algorithm_name],
        audience=INTERFACE,
        issuer=metadata["issuer"],
        options={"require": ["iss", "aud", "sub", "iat", "exp", "jti"]},
    )
    return header, claims


async def test_s5_3_unknown_device_code_is_invalid_grant(cgw: Harness) -> None:
    assert await error_of(await poll_token(cgw, "dc-never-issued")) == "invalid_grant"


async def test_s5_3_pending_then_slow_down_raises_the_interval(cgw: Harness, clock: ManualClock) -> None:
    started = await device_authorize(cgw)
    code = started["device_code"]
    assert await error_of(await poll_token(cgw, code)) == "authorization_pending"
    assert await error_of(await poll_token(cgw, code)) == "slow_down"
    # RFC 8628 §3.5: after slow_down the interval is 5 s longer for good, so the old 5 s is too soon.
    clock.advance(5)
    assert await error_of(await poll_token(cgw, code)) == "slow_down"
    clock.advance(15)
    assert await error_of(await poll_token(cgw, code)) == "authorization_pending"


async def test_s5_3_denied_is_access_denied_even_when_polled_too_fast(cgw: Harness) -> None:
    started = await device_authorize(cgw)
    assert await error_of(await poll_token(cgw, started["device_code"])) == "authorization_pending"
    await deny_via_store(cgw, started)
    assert await error_of(await poll_token(cgw, started["device_code"])) == "access_denied"
    assert await error_of(await poll_token(cgw, started["device_code"])) == "access_denied"


async def test_s5_3_expired_comes_before_denied_and_approved(cgw: Harness, clock: ManualClock) -> None:
    denied, approved, pending = [await device_authorize(cgw) for _ in range(3)]
    await deny_via_store(cgw, denied)
    await approve_via_store(cgw, approved)
    clock.advance(601)
    for started in (denied, approved, pending):
        assert await error_of(await poll_token(cgw, started["device_code"])) == "expired_token"


async def test_s5_3_a_device_code_is_redeemed_once(cgw: Harness, clock: ManualClock) -> None:
    started = await device_authorize(cgw)
    await approve_via_store(cgw, started)
    await tokens_of(await poll_token(cgw, started["device_code"]))
    # Redeemed comes before slow_down: the second poll, however soon, is invalid_grant.
    assert await error_of(await poll_token(cgw, started["device_code"])) == "invalid_grant"
    clock.advance(30)
    assert await error_of(await poll_token(cgw, started["device_code"])) == "invalid_grant"


def test_rfc9700_a_refresh_token_names_its_grant_and_family_and_old_tokens_are_read_by_hash() -> None:
    grant_id, family = "a2agrant_" + "G" * 22, "F" * 22
    token, stored = new_refresh_token(grant_id, family)
    assert refresh_token_of(token) == (stored, family)
    assert stored == RefreshToken(grant_id, code_hash(family), code_hash(token))
    # The previous release's tokens (rt_ and 256 random bits), and anything else, name no grant.
    previous = "rt_" + "p" * 43
    assert refresh_token_of(previous) == (RefreshToken("", "", code_hash(previous)), "")
    made_up = token.replace("GGGG", "G:GG", 1)
    assert refresh_token_of(made_up) == (RefreshToken("", "", code_hash(made_up)), "")


@pytest.mark.parametrize("back", [1, 3])
async def test_rfc9700_the_previous_or_an_older_refresh_token_revokes_the_family(
    cgw: Harness, clock: ManualClock, back: int
) -> None:
    """RFC 9700 §4.14.2 with one record per family: every token of it names its grant and family, so
    the store knows any of them but the current one as spent (issue 17 row 4), past the refresh grace."""
    issued = [await obtain_tokens(cgw)]
    for _ in range(3):
        issued.append(await tokens_of(await refresh(cgw, issued[-1]["refresh_token"])))
    clock.advance(5)
    grant_id, family, _ = issued[0]["refresh_token"].removeprefix("rt_").split(".")
    assert all(tokens["refresh_token"].startswith(f"rt_{grant_id}.{family}.") for tokens in issued)
    assert await error_of(await refresh(cgw, issued[-1 - back]["refresh_token"])) == "invalid_grant"
    assert await error_of(await refresh(cgw, issued[-1]["refresh_token"])) == "invalid_grant"


async def _graced(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, pem: str, clock: ManualClock
) -> Harness:
    """A gateway with a 30 s refresh grace (wide, so Redis's own clock never ends it first)."""
    edit = enable_delegation(brand_login, pem, refresh_grace=30)
    return await make_gateway(cache_url, edit=edit, clock=clock)


async def test_rfc9700_a_refresh_retried_just_inside_the_grace_gets_the_same_pair(
    make_gateway: MakeGateway,
    cache_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    clock: ManualClock,
) -> None:
    """Issue 18 I2: the answer was lost; the previous token presented again gets that answer again."""
    h = await _graced(make_gateway, cache_url, brand_login, provider_key_pem, clock)
    tokens = await obtain_tokens(h)
    first = await refresh(h, tokens["refresh_token"])
    answer = await first.read()
    clock.advance(29.999)
    for _ in range(2):
        again = await refresh(h, tokens["refresh_token"])
        assert (again.status, await again.read()) == (200, answer)
        assert again.headers["Cache-Control"] == "no-store"
    pair = orjson.loads(answer)
    # That one pair is live: its access token serves turns, its refresh token rotates.
    assert (await h.send("list my orders", headers=delegated(pair["access_token"]))).status == 200
    await tokens_of(await refresh(h, pair["refresh_token"]))
    assert events(h, "refresh_retried") == 2
    assert events(h, "refresh_reuse_detected") == 0


async def test_rfc9700_a_refresh_retried_just_after_the_grace_is_reuse_and_revokes_the_family(
    make_gateway: MakeGateway,
    cache_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    clock: ManualClock,
) -> None:
    h = await _graced(make_gateway, cache_url, brand_login, provider_key_pem, clock)
    tokens = await obtain_tokens(h)
    pair = await tokens_of(await refresh(h, tokens["refresh_token"]))
    clock.advance(30)
    assert await error_of(await refresh(h, tokens["refresh_token"])) == "invalid_grant"
    assert await error_of(await refresh(h, pair["refresh_token"])) == "invalid_grant"
    assert (await h.send("list my orders", headers=delegated(pair["access_token"]))).status == 401
    assert events(h, "refresh_reuse_detected") == 1


async def test_rfc9700_the_grace_serves_the_previous_token_only_not_an_older_one(
    make_gateway: MakeGateway,
    cache_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    clock: ManualClock,
) -> None:
    """Two quick rotations: the first token is two back, spent beyond any grace."""
    h = await _graced(make_gateway, cache_url, brand_login, provider_key_pem, clock)
    tokens = await obtain_tokens(h)
    second = await tokens_of(await refresh(h, tokens["refresh_token"]))
    third = await tokens_of(await refresh(h, second["refresh_token"]))
    assert await error_of(await refresh(h, tokens["refresh_token"])) == "invalid_grant"
    assert await error_of(await refresh(h, third["refresh_token"])) == "invalid_grant"


async def test_rfc9700_the_kept_answer_is_sealed_and_lives_only_the_grace(
    make_gateway: MakeGateway,
    redis_url: str,
    redis_client: aioredis.Redis,
    brand_login: BrandLogin,
    provider_key_pem: str,
    clock: ManualClock,
) -> None:
    """Issue 18 I2 (THREAT_MODEL D5): Redis holds the new pair only sealed under the previous token."""
    h = await _graced(make_gateway, redis_url, brand_login, provider_key_pem, clock)
    tokens = await obtain_tokens(h)
    pair = await tokens_of(await refresh(h, tokens["refresh_token"]))
    (key,) = [key async for key in redis_client.scan_iter("pact:acme:{*}o.r:*")]
    kept: dict[bytes, bytes] = {}
    for field, value in (await redis_client.hgetall(key)).items():
        assert isinstance(field, bytes)
        assert isinstance(value, bytes)
        kept[field] = value
    assert 0 < await redis_client.pttl(key) <= 30_000
    stored = b"".join(kept.values())
    for secret in (pair["access_token"], pair["refresh_token"], tokens["refresh_token"]):
        for piece in (secret, secret.split(".")[-1]):
            assert piece.encode() not in stored
    grant_id = pair["refresh_token"].removeprefix("rt_").split(".")[0]
    assert orjson.loads(open_answer(tokens["refresh_token"], grant_id, kept[b"b"]) or b"null") == pair
    assert open_answer(pair["refresh_token"], grant_id, kept[b"b"]) is None


async def test_rfc9700_a_token_naming_the_grant_with_another_family_changes_nothing(cgw: Harness) -> None:
    """A grant id is public (receipts carry it): guessing a family must not revoke anyone's grant."""
    tokens = await obtain_tokens(cgw)
    grant_id, family, secret = tokens["refresh_token"].removeprefix("rt_").split(".")
    forged = f"rt_{grant_id}.{family[::-1]}.{secret}"
    assert await error_of(await refresh(cgw, forged)) == "invalid_grant"
    await tokens_of(await refresh(cgw, tokens["refresh_token"]))


@pytest.mark.parametrize(
    ("issuer", "sub"), [(OTHER_PA, "alice"), (None, "bob")], ids=["other_pa", "other_sub"]
)
async def test_s5_3_a_device_code_belongs_to_its_pa_and_sub(
    cgw: Harness, issuer: str | None, sub: str
) -> None:
    started = await device_authorize(cgw)
    await approve_via_store(cgw, started)
    stolen = await poll_token(cgw, started["device_code"], issuer=issuer, sub=sub)
    assert await error_of(stolen) == "invalid_grant"
    # The foreign poll changed nothing: the rightful (PA, sub) still redeems it.
    await tokens_of(await poll_token(cgw, started["device_code"]))


async def test_s5_4_access_token_verifies_against_the_served_jwks(cgw: Harness, clock: ManualClock) -> None:
    started = await device_authorize(cgw, ["orders:cancel", "orders:read"])
    await approve_via_store(cgw, started)
    answer = await tokens_of(await poll_token(cgw, started["device_code"]))
    assert set(answer) == {"token_type", "access_token", "refresh_token", "expires_in", "scope"}
    assert answer["token_type"] == "Bearer"
    assert answer["expires_in"] == 3600
    assert answer["scope"] == "orders:read orders:cancel"
    assert answer["refresh_token"].startswith("rt_")
    header, claims = await verify_with_served_keys(cgw, answer["access_token"])
    assert header["typ"] == "at+jwt"
    assert header["alg"] == "ES256"
    assert isinstance(header["kid"], str)
    assert claims["iss"] == ISSUER
    assert claims["aud"] == INTERFACE
    assert claims["sub"] == BRAND_USER
    assert claims["client_id"] == cgw.issuer
    assert claims["scope"] == "orders:read orders:cancel"
    assert claims["grant_id"].startswith("a2agrant_")
    assert claims["iat"] == int(clock.now)
    assert claims["exp"] - claims["iat"] == 3600
    assert isinstance(claims["jti"], str)
    assert claims["jti"]


async def test_s5_3_scope_is_what_the_user_approved(cgw: Harness) -> None:
    started = await device_authorize(cgw, ["orders:read", "orders:cancel", "profile:read"])
    await approve_via_store(cgw, started, scopes=["orders:read"])
    answer = await tokens_of(await poll_token(cgw, started["device_code"]))
    assert answer["scope"] == "orders:read"
    _, claims = await verify_with_served_keys(cgw, answer["access_token"])
    assert claims["scope"] == "orders:read"


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({}, "invalid_request"),
        ({"grant_type": "authorization_code", "code": "x"}, "unsupported_grant_type"),
        ({"grant_type": "password", "username": "u", "password": "p"}, "unsupported_grant_type"),
        ({"grant_type": DEVICE_CODE_GRANT}, "invalid_request"),
        ({"grant_type": "refresh_token"}, "invalid_request"),
        ({"grant_type": "refresh_token", "refresh_token": ""}, "invalid_request"),
    ],
)
async def test_s5_3_malformed_token_requests(dgw_memory: Harness, form: dict[str, str], error: str) -> None:
    response = await post_form(dgw_memory, "token", {"client_id": dgw_memory.issuer, **form})
    assert await error_of(response) == error


async def test_s5_3_token_endpoint_authenticates_the_pa_first(dgw_memory: Harness) -> None:
    form = {"grant_type": DEVICE_CODE_GRANT, "device_code": "x", "client_id": dgw_memory.issuer}
    response = await dgw_memory.client.post("/a2a/acme/oauth/token", data=form)
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="a2a"'
    assert await response.read() == b""
    response = await post_form(dgw_memory, "token", {**form, "client_id": OTHER_PA})
    assert await error_of(response, 401) == "invalid_client"


async def test_s5_3_refresh_rotates_the_refresh_token(cgw: Harness) -> None:
    first = await obtain_tokens(cgw, ["orders:read", "orders:cancel"])
    second = await tokens_of(await refresh(cgw, first["refresh_token"]))
    assert second["refresh_token"] != first["refresh_token"]
    assert second["access_token"] != first["access_token"]
    assert second["scope"] == "orders:read orders:cancel"
    _, before = await verify_with_served_keys(cgw, first["access_token"])
    _, after = await verify_with_served_keys(cgw, second["access_token"])
    assert after["grant_id"] == before["grant_id"]
    assert after["jti"] != before["jti"]
    third = await tokens_of(await refresh(cgw, second["refresh_token"]))
    assert third["refresh_token"] not in {first["refresh_token"], second["refresh_token"]}


async def test_rfc6749_s6_narrower_scope_limits_only_that_access_token(cgw: Harness) -> None:
    first = await obtain_tokens(cgw, ["orders:read", "orders:cancel"])
    narrow = await tokens_of(await refresh(cgw, first["refresh_token"], scope="orders:read"))
    assert narrow["scope"] == "orders:read"
    _, claims = await verify_with_served_keys(cgw, narrow["access_token"])
    assert claims["scope"] == "orders:read"
    # The grant keeps what the User approved: the next refresh without scope gets all of it back.
    full = await tokens_of(await refresh(cgw, narrow["refresh_token"]))
    assert full["scope"] == "orders:read orders:cancel"


@pytest.mark.parametrize("scope", ["profile:read", "orders:read profile:read", "orders:read orders:read"])
async def test_rfc6749_s6_wider_scope_is_invalid_scope_and_spends_nothing(cgw: Harness, scope: str) -> None:
    first = await obtain_tokens(cgw, ["orders:read", "orders:cancel"])
    assert await error_of(await refresh(cgw, first["refresh_token"], scope=scope)) == "invalid_scope"
    await tokens_of(await refresh(cgw, first["refresh_token"]))


async def test_rfc9700_refresh_reuse_revokes_the_grant(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    metrics = Metrics()
    # No grace: the spent token presented at once is reuse.
    edit = enable_delegation(brand_login, provider_key_pem, refresh_grace=0)
    h = await make_gateway(cache_url, edit=edit, metrics=metrics)
    first = await obtain_tokens(h)
    second = await tokens_of(await refresh(h, first["refresh_token"]))
    assert await error_of(await refresh(h, first["refresh_token"])) == "invalid_grant"
    # Whoever holds the newest refresh token loses it too: the grant is gone.
    assert await error_of(await refresh(h, second["refresh_token"])) == "invalid_grant"
    events = {
        event: metrics.registry.get_sample_value(
            "pact_delegation_events_total", {"brand": "acme", "event": event}
        )
        for event in ("token_issued", "token_refreshed", "refresh_reuse_detected")
    }
    assert events == {"token_issued": 1, "token_refreshed": 1, "refresh_reuse_detected": 1}


@pytest.mark.parametrize(
    ("issuer", "sub"), [(OTHER_PA, "alice"), (None, "bob")], ids=["other_pa", "other_sub"]
)
async def test_s5_3_refresh_token_of_another_pa_or_sub_is_invalid_grant_and_not_spent(
    cgw: Harness, issuer: str | None, sub: str
) -> None:
    tokens = await obtain_tokens(cgw)
    assert (
        await error_of(await refresh(cgw, tokens["refresh_token"], issuer=issuer, sub=sub)) == "invalid_grant"
    )
    # Neither rotated nor treated as reuse: the owner's token still works.
    await tokens_of(await refresh(cgw, tokens["refresh_token"]))


async def test_s5_4_tokens_never_outlive_the_grant(
    make_gateway: MakeGateway,
    cache_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    clock: ManualClock,
) -> None:
    edit = enable_delegation(brand_login, provider_key_pem, grant_ttl=60)
    h = await make_gateway(cache_url, edit=edit, clock=clock)
    first = await obtain_tokens(h)
    assert first["expires_in"] == 60
    _, claims = await verify_with_served_keys(h, first["access_token"])
    assert claims["exp"] == int(clock.now) + 60
    clock.advance(30)
    second = await tokens_of(await refresh(h, first["refresh_token"]))
    assert second["expires_in"] == 30
    clock.advance(31)
    assert await error_of(await refresh(h, second["refresh_token"])) == "invalid_grant"


async def test_s5_3_concurrent_polls_issue_one_token(cgw: Harness) -> None:
    started = await device_authorize(cgw)
    await approve_via_store(cgw, started)
    responses = await asyncio.gather(*(poll_token(cgw, started["device_code"]) for _ in range(20)))
    statuses = [response.status for response in responses]
    assert statuses.count(200) == 1
    for response in responses:
        if response.status != 200:
            assert await error_of(response) == "invalid_grant"


async def test_rfc9700_concurrent_refreshes_rotate_once(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """Without a grace, the refreshes that lose the race present a spent token: reuse."""
    edit = enable_delegation(brand_login, provider_key_pem, refresh_grace=0)
    h = await make_gateway(cache_url, edit=edit)
    tokens = await obtain_tokens(h)
    responses = await asyncio.gather(*(refresh(h, tokens["refresh_token"]) for _ in range(20)))
    assert [response.status for response in responses].count(200) == 1
    for response in responses:
        if response.status != 200:
            assert await error_of(response) == "invalid_grant"


async def test_rfc9700_concurrent_refreshes_within_the_grace_all_get_the_one_rotation(
    make_gateway: MakeGateway,
    cache_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    clock: ManualClock,
) -> None:
    """With the opt-in grace, the losers of the race get the winner's answer, byte for byte."""
    h = await _graced(make_gateway, cache_url, brand_login, provider_key_pem, clock)
    tokens = await obtain_tokens(h)
    responses = await asyncio.gather(*(refresh(h, tokens["refresh_token"]) for _ in range(20)))
    assert {response.status for response in responses} == {200}
    assert len({await response.read() for response in responses}) == 1
    await tokens_of(await refresh(h, (await responses[0].json())["refresh_token"]))
