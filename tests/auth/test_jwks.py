"""JWKS fetching and caching (§3.1 ``jwksUri``, conformance notes "Authentication").

Real HTTP to the fake JWKS server; time is a ManualClock so TTLs and cool-downs are exact.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from gateway.auth.jwks import JwksCache, parse_jwk, parse_jwks, ttl_from_cache_control
from gateway.auth.pa_jwt import AuthFailure, PAVerifier
from gateway.config import JwksPolicy, PersonalAgentsConfig
from tests.support.pa import FailureMode, FakeJwksServer, ManualClock, PAKey, jwks_policy

SUB = "user-1"
FAILURES: list[FailureMode] = [
    "error",
    "hang",
    "redirect",
    "oversize",
    "oversize_chunked",
    "not_json",
    "not_object",
]


@pytest.fixture
def clock() -> ManualClock:
    """The JWKS cache's monotonic clock; tokens keep real wall-clock time."""
    return ManualClock(start=1000.0)


@pytest.fixture
def policy() -> JwksPolicy:
    return jwks_policy()


@pytest.fixture
def fetches() -> list[tuple[str, bool]]:
    return []


@pytest.fixture
def jwks(
    fetch_session: aiohttp.ClientSession,
    policy: JwksPolicy,
    clock: ManualClock,
    fetches: list[tuple[str, bool]],
) -> JwksCache:
    return JwksCache(
        fetch_session,
        policy,
        development=True,
        clock=clock,
        on_fetch=lambda issuer, ok: fetches.append((issuer, ok)),
    )


@pytest.fixture
def verifier(pa_agents: PersonalAgentsConfig, pa_audience: str, jwks: JwksCache) -> PAVerifier:
    return PAVerifier(pa_agents, pa_audience, jwks, token_cache_size=0)


async def key_for(jwks: JwksCache, server: FakeJwksServer, key: PAKey) -> Any:
    return await jwks.key_for(server.issuer, server.jwks_uri, key.kid, key.alg)


async def failure_of(jwks: JwksCache, server: FakeJwksServer, kid: str, alg: str = "ES256") -> str:
    with pytest.raises(AuthFailure) as failure:
        await jwks.key_for(server.issuer, server.jwks_uri, kid, alg)
    return failure.value.reason


# --- fetch and parse --------------------------------------------------------------------------


async def test_s3_2_keys_are_parsed_once_and_reused(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey, fetches: list[tuple[str, bool]]
) -> None:
    assert not jwks.has_keys(jwks_server.issuer)
    first = await key_for(jwks, jwks_server, es256_key)
    second = await key_for(jwks, jwks_server, es256_key)
    assert isinstance(first, ec.EllipticCurvePublicKey)
    assert first is second
    assert first.public_numbers() == es256_key.private_key.public_key().public_numbers()
    assert jwks_server.fetch_count == 1
    assert jwks.has_keys(jwks_server.issuer)
    assert fetches == [(jwks_server.issuer, True)]


async def test_s3_2_unsupported_keys_are_skipped_not_fatal(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey, rs256_key: PAKey
) -> None:
    p384 = ec.generate_private_key(ec.SECP384R1())
    numbers = p384.public_key().public_numbers()
    jwks_server.set_keys(
        {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
        {"kty": "OKP", "crv": "Ed25519", "kid": "ed", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
        {"kty": "EC", "crv": "P-384", "kid": "p384", "x": str(numbers.x), "y": str(numbers.y)},
        {"kty": "EC", "crv": "P-256", "kid": "broken", "x": "AA", "y": "AA"},
        {**rs256_key.public_jwk(), "kid": "enc", "use": "enc"},
        {**rs256_key.public_jwk(), "kid": "rs512", "alg": "RS512"},
        es256_key,
    )
    jwks_server.keys.append("not-an-object")
    assert isinstance(await key_for(jwks, jwks_server, es256_key), ec.EllipticCurvePublicKey)
    for kid in ("hmac", "ed", "p384", "broken", "enc", "rs512"):
        assert await failure_of(jwks, jwks_server, kid) == "unknown_kid"


def test_s3_2_parse_jwk_reads_only_public_members(rs256_key: PAKey) -> None:
    """A published private key is parsed as its public half (and costs no prime recovery)."""
    parsed = parse_jwk(rs256_key.private_jwk())
    assert parsed is not None
    assert parsed.alg == "RS256"
    assert parsed.key.public_numbers() == rs256_key.private_key.public_key().public_numbers()


@pytest.mark.parametrize("document", [{}, {"keys": {}}, {"keys": "none"}])
def test_s3_1_a_jwks_needs_a_keys_array(document: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="keys array"):
        parse_jwks(document)


async def test_s3_1_document_without_keys_array_is_a_failed_fetch(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey, fetches: list[tuple[str, bool]]
) -> None:
    jwks_server.fail("not_object")
    assert await failure_of(jwks, jwks_server, es256_key.kid) == "jwks_unavailable"
    assert fetches == [(jwks_server.issuer, False)]


async def test_s3_1_preloaded_keys_are_never_fetched(jwks: JwksCache, jwks_server: FakeJwksServer) -> None:
    key = PAKey.es256()
    jwks.preload("https://airgapped.example", {"keys": [key.public_jwk()]})
    assert jwks.has_keys("https://airgapped.example")
    found = await jwks.key_for("https://airgapped.example", None, key.kid, "ES256")
    assert isinstance(found, ec.EllipticCurvePublicKey)
    with pytest.raises(AuthFailure) as failure:
        await jwks.key_for("https://airgapped.example", None, "other-kid", "ES256")
    assert failure.value.reason == "unknown_kid"
    assert jwks_server.fetch_count == 0


async def test_s3_1_preload_replaced_by_jwks_uri_is_fetched(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey
) -> None:
    """A reload that moves an issuer from inline keys to a jwksUri must not keep the old pin."""
    jwks.preload(jwks_server.issuer, {"keys": [PAKey.es256().public_jwk()]})
    await key_for(jwks, jwks_server, es256_key)
    assert jwks_server.fetch_count == 1


async def test_s3_1_changed_jwks_uri_starts_afresh(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey
) -> None:
    await key_for(jwks, jwks_server, es256_key)
    before = jwks.version(jwks_server.issuer)
    other_uri = jwks_server.jwks_uri + "?v=2"
    await jwks.key_for(jwks_server.issuer, other_uri, es256_key.kid, "ES256")
    assert jwks_server.fetch_count == 2
    assert jwks.version(jwks_server.issuer) != before  # cached verdicts are re-checked


async def test_jwks_cache_never_closes_the_session(
    jwks: JwksCache, fetch_session: aiohttp.ClientSession, jwks_server: FakeJwksServer, es256_key: PAKey
) -> None:
    await key_for(jwks, jwks_server, es256_key)
    assert not fetch_session.closed


# --- Cache-Control ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "ttl"),
    [
        (None, 300),
        ("", 300),
        ("public, max-age=600", 600),
        ('max-age="600"', 600),
        ("MAX-AGE=600", 600),
        ("max-age=5", 60),  # clamped up to min_ttl
        ("max-age=0", 60),
        ("max-age=999999999", 86400),  # clamped down to max_ttl
        ("no-cache", 300),
        ("no-store, max-age=600", 300),
        ("max-age=soon", 300),
        ("max-age=-5", 300),
        ("max-age=1e3", 300),
        ("public", 300),
    ],
)
def test_cache_control_max_age_clamped_to_policy(header: str | None, ttl: float) -> None:
    assert ttl_from_cache_control(header, JwksPolicy()) == ttl


@pytest.mark.parametrize(
    ("cache_control", "ttl"), [("max-age=5", 60), ("max-age=999999999", 86400), (None, 300)]
)
async def test_cache_control_ttl_decides_when_keys_are_refetched(
    jwks: JwksCache,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    clock: ManualClock,
    cache_control: str | None,
    ttl: float,
) -> None:
    jwks_server.cache_control = cache_control
    await key_for(jwks, jwks_server, es256_key)
    clock.advance(ttl - 1)
    await key_for(jwks, jwks_server, es256_key)
    assert jwks_server.fetch_count == 1
    clock.advance(1)
    await key_for(jwks, jwks_server, es256_key)
    assert jwks_server.fetch_count == 2


# --- rotation and the unknown-kid cool-down ---------------------------------------------------


async def test_s3_1_rotation_picked_up_after_unknown_kid(
    verifier: PAVerifier,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    pa_issuer: str,
    pa_audience: str,
    clock: ManualClock,
    policy: JwksPolicy,
) -> None:
    await verifier.verify(es256_key.mint(pa_issuer, SUB, pa_audience))
    rotated = PAKey.es256()
    jwks_server.set_keys(es256_key, rotated)
    clock.advance(policy.refetch_cooldown)
    identity = await verifier.verify(rotated.mint(pa_issuer, SUB, pa_audience))
    assert identity.sub == SUB
    assert jwks_server.fetch_count == 2


async def test_s3_1_unknown_kid_inside_the_cooldown_does_not_refetch(
    verifier: PAVerifier,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    pa_issuer: str,
    pa_audience: str,
    clock: ManualClock,
    policy: JwksPolicy,
) -> None:
    await verifier.verify(es256_key.mint(pa_issuer, SUB, pa_audience))
    rotated = PAKey.es256()
    jwks_server.set_keys(rotated)
    clock.advance(policy.refetch_cooldown - 0.5)
    with pytest.raises(AuthFailure) as failure:
        await verifier.verify(rotated.mint(pa_issuer, SUB, pa_audience))
    assert failure.value.reason == "unknown_kid"
    assert jwks_server.fetch_count == 1


async def test_s3_1_flood_of_50_random_kids_causes_no_extra_fetch_within_cooldown(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey, clock: ManualClock, policy: JwksPolicy
) -> None:
    await key_for(jwks, jwks_server, es256_key)
    for _ in range(50):
        assert await failure_of(jwks, jwks_server, secrets.token_hex(8)) == "unknown_kid"
    assert jwks_server.fetch_count == 1
    # Once the cool-down has passed, the next flood buys exactly one refetch.
    clock.advance(policy.refetch_cooldown)
    results = await asyncio.gather(
        *(failure_of(jwks, jwks_server, secrets.token_hex(8)) for _ in range(50)),
    )
    assert set(results) == {"unknown_kid"}
    assert jwks_server.fetch_count == 2


# --- single flight ----------------------------------------------------------------------------


async def test_single_flight_20_concurrent_verifies_on_a_cold_cache_fetch_once(
    verifier: PAVerifier, jwks_server: FakeJwksServer, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    jwks_server.delay = 0.05
    tokens = [es256_key.mint(pa_issuer, f"user-{i}", pa_audience) for i in range(20)]
    identities = await asyncio.gather(*(verifier.verify(token) for token in tokens))
    assert [identity.sub for identity in identities] == [f"user-{i}" for i in range(20)]
    assert jwks_server.fetch_count == 1


async def test_single_flight_a_cancelled_caller_does_not_cancel_the_fetch(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey
) -> None:
    jwks_server.delay = 0.1
    first = asyncio.create_task(key_for(jwks, jwks_server, es256_key))
    second = asyncio.create_task(key_for(jwks, jwks_server, es256_key))
    await asyncio.sleep(0.02)
    first.cancel()
    assert isinstance(await second, ec.EllipticCurvePublicKey)
    assert jwks_server.fetch_count == 1


# --- failures: refused responses and last good keys --------------------------------------------


@pytest.mark.parametrize("mode", FAILURES)
async def test_failed_first_fetch_is_jwks_unavailable(
    jwks: JwksCache,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    fetches: list[tuple[str, bool]],
    mode: FailureMode,
) -> None:
    """500, timeout, redirect, oversize (with and without Content-Length), non-JSON, non-object."""
    jwks_server.fail(mode)
    started = time.monotonic()
    assert await failure_of(jwks, jwks_server, es256_key.kid) == "jwks_unavailable"
    assert time.monotonic() - started < 0.9  # a hang ends at the policy timeout
    assert fetches == [(jwks_server.issuer, False)]
    assert not jwks.has_keys(jwks_server.issuer)


async def test_redirect_is_not_followed(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey
) -> None:
    jwks_server.fail("redirect")
    assert await failure_of(jwks, jwks_server, es256_key.kid) == "jwks_unavailable"
    assert jwks_server.fetch_count == 1  # the redirect target was never requested


@pytest.mark.parametrize("mode", ["oversize", "oversize_chunked"])
async def test_body_over_max_bytes_refused(
    fetch_session: aiohttp.ClientSession,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    mode: FailureMode,
) -> None:
    jwks = JwksCache(fetch_session, jwks_policy(max_bytes=4096), development=True)
    jwks_server.oversize_bytes = 5000
    jwks_server.fail(mode)
    assert await failure_of(jwks, jwks_server, es256_key.kid) == "jwks_unavailable"
    jwks_server.fail(None)
    jwks_server.oversize_bytes = 1000
    jwks_server.fail(mode)
    fresh = JwksCache(fetch_session, jwks_policy(max_bytes=4096), development=True)
    assert isinstance(await key_for(fresh, jwks_server, es256_key), ec.EllipticCurvePublicKey)


@pytest.mark.parametrize("mode", FAILURES)
async def test_last_good_keys_survive_an_outage_after_ttl_expiry(
    verifier: PAVerifier,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    pa_issuer: str,
    pa_audience: str,
    clock: ManualClock,
    fetches: list[tuple[str, bool]],
    mode: FailureMode,
) -> None:
    await verifier.verify(es256_key.mint(pa_issuer, SUB, pa_audience))
    jwks_server.fail(mode)
    clock.advance(301)  # past the default TTL
    identity = await verifier.verify(es256_key.mint(pa_issuer, SUB, pa_audience))
    assert identity.sub == SUB
    assert fetches == [(pa_issuer, True), (pa_issuer, False)]  # the refetch was tried, and failed


async def test_failed_fetches_are_retried_only_after_the_cooldown(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey, clock: ManualClock, policy: JwksPolicy
) -> None:
    jwks_server.fail("error")
    for _ in range(5):
        assert await failure_of(jwks, jwks_server, es256_key.kid) == "jwks_unavailable"
    assert jwks_server.fetch_count == 1
    jwks_server.fail(None)
    clock.advance(policy.refetch_cooldown)
    assert isinstance(await key_for(jwks, jwks_server, es256_key), ec.EllipticCurvePublicKey)
    assert jwks_server.fetch_count == 2


async def test_version_changes_only_when_the_keys_do(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey, clock: ManualClock
) -> None:
    assert jwks.version(jwks_server.issuer) is None
    await key_for(jwks, jwks_server, es256_key)
    first = jwks.version(jwks_server.issuer)
    clock.advance(300)
    await key_for(jwks, jwks_server, es256_key)
    assert jwks.version(jwks_server.issuer) == first
    jwks_server.add_key(PAKey.es256())
    clock.advance(300)
    await key_for(jwks, jwks_server, es256_key)
    assert jwks_server.fetch_count == 3
    assert jwks.version(jwks_server.issuer) != first
