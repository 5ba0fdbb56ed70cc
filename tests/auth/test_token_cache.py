"""The verified-token cache: never accepts a token the full §3.2 check would reject."""

from __future__ import annotations

import time

import aiohttp
import pytest

from gateway.auth.jwks import JwksCache
from gateway.auth.pa_jwt import AuthFailure, PAVerifier
from gateway.auth.token_cache import TokenCache
from gateway.config import PersonalAgentsConfig
from tests.support.pa import FakeJwksServer, ManualClock, PAKey, allowlist, jwks_policy

SUB = "user-1"


# --- the LRU itself ---------------------------------------------------------------------------


def test_token_cache_entry_is_unusable_at_exp() -> None:
    cache: TokenCache[str] = TokenCache(10)
    cache.put("tok", "identity", issuer="https://pa", expires_at=100.0)
    assert cache.get("tok", 99.999) == "identity"
    assert cache.get("tok", 100.0) is None
    assert len(cache) == 0  # dropped, not kept around
    assert cache.get("tok", 50.0) is None


def test_token_cache_is_a_bounded_lru() -> None:
    cache: TokenCache[int] = TokenCache(2)
    cache.put("a", 1, issuer="i", expires_at=100.0)
    cache.put("b", 2, issuer="i", expires_at=100.0)
    assert cache.get("a", 0.0) == 1  # "a" is now the most recently used
    cache.put("c", 3, issuer="i", expires_at=100.0)
    assert (cache.get("a", 0.0), cache.get("b", 0.0), cache.get("c", 0.0)) == (1, None, 3)
    assert len(cache) == 2


def test_token_cache_drops_entries_per_issuer() -> None:
    cache: TokenCache[int] = TokenCache(10)
    cache.put("a", 1, issuer="keep", expires_at=100.0)
    cache.put("b", 2, issuer="drop", expires_at=100.0)
    cache.retain_issuers(lambda issuer: issuer == "keep")
    assert (cache.get("a", 0.0), cache.get("b", 0.0)) == (1, None)


def test_token_cache_of_size_zero_stores_nothing() -> None:
    cache: TokenCache[int] = TokenCache(0)
    cache.put("a", 1, issuer="i", expires_at=100.0)
    assert cache.get("a", 0.0) is None


# --- through the verifier ---------------------------------------------------------------------


@pytest.fixture
def wall() -> ManualClock:
    return ManualClock()


@pytest.fixture
def mono() -> ManualClock:
    return ManualClock(start=1000.0)


@pytest.fixture
def jwks(fetch_session: aiohttp.ClientSession, mono: ManualClock) -> JwksCache:
    return JwksCache(fetch_session, jwks_policy(), development=True, clock=mono)


@pytest.fixture
def verifier(
    pa_agents: PersonalAgentsConfig, pa_audience: str, jwks: JwksCache, wall: ManualClock
) -> PAVerifier:
    return PAVerifier(pa_agents, pa_audience, jwks, clock=wall)


async def test_token_cache_hit_returns_the_cached_identity(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str, wall: ManualClock
) -> None:
    token = es256_key.mint(pa_issuer, SUB, pa_audience, iat=wall.now)
    first = await verifier.verify(token)
    assert await verifier.verify(token) is first
    assert await verifier.verify(es256_key.mint(pa_issuer, SUB, pa_audience, iat=wall.now)) is not first


async def test_token_cache_entry_is_not_used_at_or_past_exp(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str, wall: ManualClock
) -> None:
    token = es256_key.mint(pa_issuer, SUB, pa_audience, iat=wall.now, exp=wall.now + 60)
    first = await verifier.verify(token)
    wall.advance(59.9)
    assert await verifier.verify(token) is first
    wall.advance(0.1)  # exactly exp: the cache no longer answers; the full check (30 s skew) still does
    second = await verifier.verify(token)
    assert second is not first
    wall.advance(30)  # exp + 30 s: the full check refuses, and so must the cache
    with pytest.raises(AuthFailure) as failure:
        await verifier.verify(token)
    assert failure.value.reason == "expired"


async def test_s3_1_token_cache_dropped_when_issuer_disabled(
    verifier: PAVerifier,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    pa_issuer: str,
    pa_audience: str,
    wall: ManualClock,
) -> None:
    token = es256_key.mint(pa_issuer, SUB, pa_audience, iat=wall.now)
    first = await verifier.verify(token)
    verifier.update(allowlist(pa_issuer, jwks_server.jwks_uri, enabled=False), pa_audience)
    with pytest.raises(AuthFailure) as failure:
        await verifier.verify(token)
    assert failure.value.reason == "disabled_issuer"
    verifier.update(allowlist(pa_issuer, jwks_server.jwks_uri), pa_audience)
    assert await verifier.verify(token) is not first  # the entry was dropped, not just hidden


async def test_s3_1_token_cache_dropped_when_issuer_removed(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str, wall: ManualClock
) -> None:
    token = es256_key.mint(pa_issuer, SUB, pa_audience, iat=wall.now)
    await verifier.verify(token)
    verifier.update(allowlist("https://other.example", "https://other.example/jwks.json"), pa_audience)
    with pytest.raises(AuthFailure) as failure:
        await verifier.verify(token)
    assert failure.value.reason == "unknown_issuer"


async def test_s3_1_token_cache_kept_for_issuers_still_enabled(
    verifier: PAVerifier,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    pa_issuer: str,
    pa_audience: str,
    wall: ManualClock,
) -> None:
    token = es256_key.mint(pa_issuer, SUB, pa_audience, iat=wall.now)
    first = await verifier.verify(token)
    verifier.update(allowlist(pa_issuer, jwks_server.jwks_uri), pa_audience)
    assert await verifier.verify(token) is first


async def test_s3_1_audience_change_on_reload_clears_the_token_cache(
    verifier: PAVerifier,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    pa_issuer: str,
    pa_audience: str,
    wall: ManualClock,
) -> None:
    token = es256_key.mint(pa_issuer, SUB, pa_audience, iat=wall.now)
    await verifier.verify(token)
    verifier.update(allowlist(pa_issuer, jwks_server.jwks_uri), "new-audience")
    with pytest.raises(AuthFailure) as failure:
        await verifier.verify(token)
    assert failure.value.reason == "bad_audience"


async def test_s3_1_token_cache_not_used_after_its_key_was_rotated_out(
    verifier: PAVerifier,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    pa_issuer: str,
    pa_audience: str,
    wall: ManualClock,
    mono: ManualClock,
) -> None:
    """Once a refetch drops the key, a cached verdict for a token it signed is not trusted."""
    token = es256_key.mint(pa_issuer, SUB, pa_audience, iat=wall.now)
    await verifier.verify(token)
    rotated = PAKey.es256()
    jwks_server.set_keys(rotated)
    mono.advance(301)
    await verifier.verify(rotated.mint(pa_issuer, SUB, pa_audience, iat=wall.now))
    with pytest.raises(AuthFailure) as failure:
        await verifier.verify(token)
    assert failure.value.reason == "unknown_kid"


async def test_token_cache_hit_is_at_least_10x_cheaper_than_full_es256_verification(
    jwks: JwksCache, pa_agents: PersonalAgentsConfig, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    cached = PAVerifier(pa_agents, pa_audience, jwks)
    uncached = PAVerifier(pa_agents, pa_audience, jwks, token_cache_size=0)
    token = es256_key.mint(pa_issuer, SUB, pa_audience)
    await cached.verify(token)  # warm: keys fetched, token cached

    async def best_of(verifier: PAVerifier, rounds: int = 5, n: int = 200) -> float:
        timings = []
        for _ in range(rounds):
            started = time.perf_counter()
            for _ in range(n):
                await verifier.verify(token)
            timings.append(time.perf_counter() - started)
        return min(timings)

    assert await best_of(uncached) >= 10 * await best_of(cached)
