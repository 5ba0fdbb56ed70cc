"""The verified-token cache: never accepts a token the full §3.2 check would reject."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from gateway.auth.jwks import JwksCache
from gateway.auth.pa_jwt import REJECTED_TTL, PAVerifier
from gateway.auth.token_cache import TokenCache
from gateway.config import PersonalAgentsConfig
from tests.auth.conftest import CountedSignatures
from tests.support.pa import PA_AUDIENCE, FakeJwksServer, ManualClock, PAKey, allowlist, jwks_policy, refusal

SUB = "user-1"
EXP = 100.0  # when the LRU tests' entries expire; they read the cache before it
Mint = Callable[..., str]
Reload = Callable[..., None]


# --- the LRU itself ---------------------------------------------------------------------------


def lru(size: int, *entries: tuple[str, int, str]) -> TokenCache[int]:
    """A cache of ``size`` given (token, value, issuer) entries in order, each expiring at EXP."""
    cache: TokenCache[int] = TokenCache(size)
    for token, value, issuer in entries:
        cache.put(token, value, issuer=issuer, expires_at=EXP)
    return cache


def test_token_cache_entry_is_unusable_at_exp() -> None:
    cache: TokenCache[str] = TokenCache(10)
    cache.put("tok", "identity", issuer="https://pa", expires_at=100.0)
    assert cache.get("tok", 99.999) == "identity"
    assert cache.get("tok", 100.0) is None
    assert len(cache) == 0  # dropped, not kept around
    assert cache.get("tok", 50.0) is None


def test_token_cache_is_a_bounded_lru() -> None:
    cache = lru(2, ("a", 1, "i"), ("b", 2, "i"))
    assert cache.get("a", 0.0) == 1  # "a" is now the most recently used
    cache.put("c", 3, issuer="i", expires_at=EXP)
    assert (cache.get("a", 0.0), cache.get("b", 0.0), cache.get("c", 0.0)) == (1, None, 3)
    assert len(cache) == 2


def test_token_cache_drops_entries_per_issuer() -> None:
    cache = lru(10, ("a", 1, "keep"), ("b", 2, "drop"))
    cache.retain_issuers(lambda issuer: issuer == "keep")
    assert (cache.get("a", 0.0), cache.get("b", 0.0)) == (1, None)


def test_token_cache_of_size_zero_stores_nothing() -> None:
    assert lru(0, ("a", 1, "i")).get("a", 0.0) is None


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


@pytest.fixture
def mint(es256_key: PAKey, pa_issuer: str, pa_audience: str, wall: ManualClock) -> Mint:
    """``mint(key=es256_key, **claims)``: a token of the registered issuer for SUB, issued at ``wall`` now."""

    def make(key: PAKey = es256_key, **claims: Any) -> str:
        return key.mint(pa_issuer, SUB, pa_audience, iat=wall.now, **claims)

    return make


@pytest.fixture
def reload(verifier: PAVerifier, jwks_server: FakeJwksServer, pa_issuer: str, pa_audience: str) -> Reload:
    """``reload(issuer=…, jwks_uri=…, enabled=…, audience=…)``: a configuration reload that registers
    one personal agent, by default the test PA unchanged."""

    def apply(
        *,
        issuer: str = pa_issuer,
        jwks_uri: str = jwks_server.jwks_uri,
        enabled: bool = True,
        audience: str = pa_audience,
    ) -> None:
        verifier.update(allowlist(issuer, jwks_uri, enabled=enabled), audience)

    return apply


async def test_token_cache_hit_returns_the_cached_identity(verifier: PAVerifier, mint: Mint) -> None:
    token = mint()
    first = await verifier.verify(token)
    assert await verifier.verify(token) is first
    assert await verifier.verify(mint()) is not first


async def test_token_cache_entry_is_not_used_at_or_past_exp(
    verifier: PAVerifier, mint: Mint, wall: ManualClock
) -> None:
    token = mint(exp=wall.now + 60)
    first = await verifier.verify(token)
    wall.advance(59.9)
    assert await verifier.verify(token) is first
    wall.advance(0.1)  # exactly exp: the cache no longer answers; the full check (30 s skew) still does
    second = await verifier.verify(token)
    assert second is not first
    wall.advance(30)  # exp + 30 s: the full check refuses, and so must the cache
    assert await refusal(verifier, token) == "expired"


async def test_s3_1_token_cache_dropped_when_issuer_disabled(
    verifier: PAVerifier, mint: Mint, reload: Reload
) -> None:
    token = mint()
    first = await verifier.verify(token)
    reload(enabled=False)
    assert await refusal(verifier, token) == "disabled_issuer"
    reload()
    assert await verifier.verify(token) is not first  # the entry was dropped, not just hidden


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            {"issuer": "https://other.example", "jwks_uri": "https://other.example/jwks.json"},
            "unknown_issuer",
        ),
        ({"audience": "new-audience"}, "bad_audience"),
    ],
    ids=["issuer_removed", "audience_changed"],
)
async def test_s3_1_token_cache_dropped_when_a_reload_would_refuse_the_token(
    verifier: PAVerifier, mint: Mint, reload: Reload, change: dict[str, str], reason: str
) -> None:
    token = mint()
    await verifier.verify(token)
    reload(**change)
    assert await refusal(verifier, token) == reason


async def test_s3_1_token_cache_kept_for_issuers_still_enabled(
    verifier: PAVerifier, mint: Mint, reload: Reload
) -> None:
    token = mint()
    first = await verifier.verify(token)
    reload()
    assert await verifier.verify(token) is first


async def test_s3_1_token_cache_not_used_after_its_key_was_rotated_out(
    verifier: PAVerifier, mint: Mint, jwks_server: FakeJwksServer, mono: ManualClock
) -> None:
    """Once a refetch drops the key, a cached verdict for a token it signed is not trusted."""
    token = mint()
    await verifier.verify(token)
    rotated = PAKey.es256()
    jwks_server.set_keys(rotated)
    mono.advance(301)
    await verifier.verify(mint(rotated))
    assert await refusal(verifier, token) == "unknown_kid"


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


async def test_s3_1_token_cache_dropped_when_a_reload_moves_the_issuer_to_another_jwks_uri(
    verifier: PAVerifier, mint: Mint, reload: Reload
) -> None:
    """Issue 12 row 8: the old keys' verdicts must not outlive the move; the new URI decides."""
    token = mint()
    await verifier.verify(token)
    async with FakeJwksServer() as moved_to:
        moved_to.set_keys(PAKey.es256())
        reload(jwks_uri=moved_to.jwks_uri)
        assert await refusal(verifier, token) == "unknown_kid"
        assert moved_to.fetch_count == 1


# --- refused tokens (issue 12 row 4: a replayed bad token costs a lookup) -------------------------


async def test_a_refused_token_sent_again_is_refused_without_another_signature_check(
    verifier: PAVerifier, es256_key: PAKey, mint: Mint, pa_signature_checks: CountedSignatures
) -> None:
    impostor = mint(PAKey.es256(kid=es256_key.kid))  # a published kid, another key's signature
    for _ in range(5):
        assert await refusal(verifier, impostor) == "bad_signature"
    assert pa_signature_checks.count == 1
    listed_audience = mint(extra_claims={"aud": [PA_AUDIENCE]})  # §3.2: one string, never a list
    for _ in range(3):
        assert await refusal(verifier, listed_audience) == "bad_audience"
    assert pa_signature_checks.count == 2


async def test_a_refusal_is_kept_for_rejected_ttl_only(
    verifier: PAVerifier,
    es256_key: PAKey,
    mint: Mint,
    wall: ManualClock,
    pa_signature_checks: CountedSignatures,
) -> None:
    impostor = mint(PAKey.es256(kid=es256_key.kid), ttl=300)
    assert await refusal(verifier, impostor) == "bad_signature"
    wall.advance(REJECTED_TTL - 0.1)
    assert await refusal(verifier, impostor) == "bad_signature"
    assert pa_signature_checks.count == 1
    wall.advance(0.1)
    assert await refusal(verifier, impostor) == "bad_signature"
    assert pa_signature_checks.count == 2


async def test_a_refusal_is_checked_again_once_the_issuers_keys_change(
    verifier: PAVerifier,
    es256_key: PAKey,
    mint: Mint,
    jwks_server: FakeJwksServer,
    mono: ManualClock,
    pa_signature_checks: CountedSignatures,
) -> None:
    """A signature check refused under one key set says nothing of the next (a rotation kept the kid)."""
    successor = PAKey.es256(kid=es256_key.kid)
    token = mint(successor)
    assert await refusal(verifier, token) == "bad_signature"
    jwks_server.set_keys(successor)
    mono.advance(301)  # past the keys' TTL: the next verification refetches them
    assert (await verifier.verify(mint(successor))).sub == SUB
    assert (await verifier.verify(token)).sub == SUB
    assert pa_signature_checks.count == 3


async def test_refusals_that_may_pass_later_are_not_kept(
    verifier: PAVerifier,
    es256_key: PAKey,
    pa_issuer: str,
    pa_audience: str,
    wall: ManualClock,
    pa_signature_checks: CountedSignatures,
) -> None:
    """``iat`` 31 s ahead is refused now and accepted once the clock catches up, so never cached."""
    early = es256_key.mint(pa_issuer, SUB, pa_audience, iat=wall.now + 31)
    assert await refusal(verifier, early) == "iat_future"
    wall.advance(2)
    assert (await verifier.verify(early)).sub == SUB
    assert pa_signature_checks.count == 2


async def test_refusals_are_forgotten_on_reload(
    verifier: PAVerifier, es256_key: PAKey, jwks_server: FakeJwksServer, pa_audience: str, reload: Reload
) -> None:
    newcomer = "https://newcomer.example"
    token = es256_key.mint(newcomer, SUB, pa_audience)
    assert await refusal(verifier, token) == "unknown_issuer"
    reload(issuer=newcomer)
    assert (await verifier.verify(token)).issuer == newcomer
