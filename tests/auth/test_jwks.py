"""JWKS fetching and caching (§3.1 ``jwksUri``, conformance notes "Authentication").

Real HTTP to the fake JWKS server; time is a ManualClock so TTLs and cool-downs are exact.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from gateway.auth.jwks import (
    MAX_RSA_EXPONENT,
    JwksCache,
    PublicKey,
    parse_jwk,
    parse_jwks,
    ttl_from_cache_control,
)
from gateway.auth.pa_jwt import AuthFailure, PAVerifier
from gateway.config import JwksPolicy, PersonalAgentsConfig
from tests.support.pa import (
    FailureMode,
    FakeJwksServer,
    ManualClock,
    PAKey,
    huge_exponent_key,
    jwks_policy,
    refusal,
)

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
Fetches = list[tuple[str, bool]]
Mint = Callable[..., str]


@dataclass(frozen=True)
class Lookup:
    """``key_for`` as the verifier calls it: one issuer, its ``jwks_uri`` (``None``: inline keys)
    and a token's ``kid``/``alg``, by default those of ``key``."""

    jwks: JwksCache
    issuer: str
    jwks_uri: str | None
    key: PAKey
    open_policy: bool = False

    async def find(self, kid: str | None = None) -> PublicKey:
        return await self.jwks.key_for(
            self.issuer, self.jwks_uri, kid or self.key.kid, self.key.alg, open_policy=self.open_policy
        )

    @property
    def held(self) -> bool:
        """Whether keys of this issuer are held, in either partition."""
        return self.jwks.version(self.issuer) is not None

    async def refusal(self, kid: str | None = None) -> str:
        with pytest.raises(AuthFailure) as failure:
            await self.find(kid)
        return failure.value.reason


@pytest.fixture
def clock() -> ManualClock:
    """The JWKS cache's monotonic clock; tokens keep real wall-clock time."""
    return ManualClock(start=1000.0)


@pytest.fixture
def policy() -> JwksPolicy:
    """The ``jwks`` cache's bounds; a test that needs another parametrizes ``policy`` directly."""
    return jwks_policy()


@pytest.fixture
def fetches() -> Fetches:
    return []


@pytest.fixture
def jwks(
    fetch_session: aiohttp.ClientSession,
    policy: JwksPolicy,
    clock: ManualClock,
    fetches: Fetches,
) -> JwksCache:
    return JwksCache(
        fetch_session,
        policy,
        development=True,
        clock=clock,
        on_fetch=lambda issuer, ok: fetches.append((issuer, ok)),
    )


@pytest.fixture
def lookup(jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey) -> Lookup:
    """The fake server's issuer and ``jwks_uri``, asked for ``es256_key``."""
    return Lookup(jwks, jwks_server.issuer, jwks_server.jwks_uri, es256_key)


@pytest.fixture
def verifier(pa_agents: PersonalAgentsConfig, pa_audience: str, jwks: JwksCache) -> PAVerifier:
    return PAVerifier(pa_agents, pa_audience, jwks, token_cache_size=0)


@pytest.fixture
def mint(es256_key: PAKey, pa_issuer: str, pa_audience: str) -> Mint:
    """``mint(key=es256_key, sub=SUB)``: a token of the registered issuer for the gateway."""

    def make(key: PAKey = es256_key, sub: str = SUB) -> str:
        return key.mint(pa_issuer, sub, pa_audience)

    return make


# --- fetch and parse --------------------------------------------------------------------------


async def test_s3_2_keys_are_parsed_once_and_reused(
    jwks: JwksCache, lookup: Lookup, jwks_server: FakeJwksServer, es256_key: PAKey, fetches: Fetches
) -> None:
    assert not jwks.has_keys(jwks_server.issuer)
    first = await lookup.find()
    second = await lookup.find()
    assert isinstance(first, ec.EllipticCurvePublicKey)
    assert first is second
    assert first.public_numbers() == es256_key.private_key.public_key().public_numbers()
    assert jwks_server.fetch_count == 1
    assert jwks.has_keys(jwks_server.issuer)
    assert fetches == [(jwks_server.issuer, True)]


async def test_s3_2_unsupported_keys_are_skipped_not_fatal(
    lookup: Lookup, jwks_server: FakeJwksServer, es256_key: PAKey, rs256_key: PAKey
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
    assert isinstance(await lookup.find(), ec.EllipticCurvePublicKey)
    for kid in ("hmac", "ed", "p384", "broken", "enc", "rs512"):
        assert await lookup.refusal(kid) == "unknown_kid"


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
    lookup: Lookup, jwks_server: FakeJwksServer, fetches: Fetches
) -> None:
    jwks_server.fail("not_object")
    assert await lookup.refusal() == "jwks_unavailable"
    assert fetches == [(jwks_server.issuer, False)]


async def test_s3_1_preloaded_keys_are_never_fetched(jwks: JwksCache, jwks_server: FakeJwksServer) -> None:
    airgapped = Lookup(jwks, "https://airgapped.example", None, PAKey.es256())
    jwks.preload(airgapped.issuer, {"keys": [airgapped.key.public_jwk()]})
    assert jwks.has_keys(airgapped.issuer)
    assert isinstance(await airgapped.find(), ec.EllipticCurvePublicKey)
    assert await airgapped.refusal("other-kid") == "unknown_kid"
    assert jwks_server.fetch_count == 0


async def test_s3_1_preload_replaced_by_jwks_uri_is_fetched(
    jwks: JwksCache, lookup: Lookup, jwks_server: FakeJwksServer
) -> None:
    """A reload that moves an issuer from inline keys to a jwksUri must not keep the old pin."""
    jwks.preload(jwks_server.issuer, {"keys": [PAKey.es256().public_jwk()]})
    await lookup.find()
    assert jwks_server.fetch_count == 1


async def test_s3_1_changed_jwks_uri_starts_afresh(
    jwks: JwksCache, lookup: Lookup, jwks_server: FakeJwksServer
) -> None:
    await lookup.find()
    before = jwks.version(jwks_server.issuer)
    await replace(lookup, jwks_uri=jwks_server.jwks_uri + "?v=2").find()
    assert jwks_server.fetch_count == 2
    assert jwks.version(jwks_server.issuer) != before  # cached verdicts are re-checked


async def test_jwks_cache_never_closes_the_session(
    lookup: Lookup, fetch_session: aiohttp.ClientSession
) -> None:
    await lookup.find()
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
        ("max-age=" + "9" * 5000, 86400),  # more digits than int() takes from a string: still clamped
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
    lookup: Lookup, jwks_server: FakeJwksServer, clock: ManualClock, cache_control: str | None, ttl: float
) -> None:
    jwks_server.cache_control = cache_control
    await lookup.find()
    clock.advance(ttl - 1)
    await lookup.find()
    assert jwks_server.fetch_count == 1
    clock.advance(1)
    await lookup.find()
    assert jwks_server.fetch_count == 2


# --- rotation and the unknown-kid cool-down ---------------------------------------------------


async def test_s3_1_rotation_picked_up_after_unknown_kid(
    verifier: PAVerifier,
    mint: Mint,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    clock: ManualClock,
    policy: JwksPolicy,
) -> None:
    await verifier.verify(mint())
    rotated = PAKey.es256()
    jwks_server.set_keys(es256_key, rotated)
    clock.advance(policy.refetch_cooldown)
    identity = await verifier.verify(mint(rotated))
    assert identity.sub == SUB
    assert jwks_server.fetch_count == 2


async def test_s3_1_unknown_kid_inside_the_cooldown_does_not_refetch(
    verifier: PAVerifier, mint: Mint, jwks_server: FakeJwksServer, clock: ManualClock, policy: JwksPolicy
) -> None:
    await verifier.verify(mint())
    rotated = PAKey.es256()
    jwks_server.set_keys(rotated)
    clock.advance(policy.refetch_cooldown - 0.5)
    assert await refusal(verifier, mint(rotated)) == "unknown_kid"
    assert jwks_server.fetch_count == 1


async def test_s3_1_flood_of_50_random_kids_causes_no_extra_fetch_within_cooldown(
    lookup: Lookup, jwks_server: FakeJwksServer, clock: ManualClock, policy: JwksPolicy
) -> None:
    await lookup.find()
    for _ in range(50):
        assert await lookup.refusal(secrets.token_hex(8)) == "unknown_kid"
    assert jwks_server.fetch_count == 1
    # Once the cool-down has passed, the next flood buys exactly one refetch.
    clock.advance(policy.refetch_cooldown)
    results = await asyncio.gather(
        *(lookup.refusal(secrets.token_hex(8)) for _ in range(50)),
    )
    assert set(results) == {"unknown_kid"}
    assert jwks_server.fetch_count == 2


# --- single flight ----------------------------------------------------------------------------


async def test_single_flight_20_concurrent_verifies_on_a_cold_cache_fetch_once(
    verifier: PAVerifier, mint: Mint, jwks_server: FakeJwksServer
) -> None:
    jwks_server.delay = 0.05
    tokens = [mint(sub=f"user-{i}") for i in range(20)]
    identities = await asyncio.gather(*(verifier.verify(token) for token in tokens))
    assert [identity.sub for identity in identities] == [f"user-{i}" for i in range(20)]
    assert jwks_server.fetch_count == 1


async def test_single_flight_a_cancelled_caller_does_not_cancel_the_fetch(
    lookup: Lookup, jwks_server: FakeJwksServer
) -> None:
    jwks_server.delay = 0.1
    first = asyncio.create_task(lookup.find())
    second = asyncio.create_task(lookup.find())
    await asyncio.sleep(0.02)
    first.cancel()
    assert isinstance(await second, ec.EllipticCurvePublicKey)
    assert jwks_server.fetch_count == 1


# --- failures: refused responses and last good keys --------------------------------------------


@pytest.mark.parametrize("mode", FAILURES)
async def test_failed_first_fetch_is_jwks_unavailable(
    jwks: JwksCache, lookup: Lookup, jwks_server: FakeJwksServer, fetches: Fetches, mode: FailureMode
) -> None:
    """500, timeout, redirect, oversize (with and without Content-Length), non-JSON, non-object."""
    jwks_server.fail(mode)
    started = time.monotonic()
    assert await lookup.refusal() == "jwks_unavailable"
    assert time.monotonic() - started < 0.9  # a hang ends at the policy timeout
    assert fetches == [(jwks_server.issuer, False)]
    assert not jwks.has_keys(jwks_server.issuer)


async def test_redirect_is_not_followed(lookup: Lookup, jwks_server: FakeJwksServer) -> None:
    jwks_server.fail("redirect")
    assert await lookup.refusal() == "jwks_unavailable"
    assert jwks_server.fetch_count == 1  # the redirect target was never requested


@pytest.mark.parametrize("policy", [jwks_policy(max_bytes=4096)], ids=["max_bytes=4096"])
@pytest.mark.parametrize("mode", ["oversize", "oversize_chunked"])
async def test_body_over_max_bytes_refused(
    fetch_session: aiohttp.ClientSession,
    lookup: Lookup,
    jwks_server: FakeJwksServer,
    policy: JwksPolicy,
    mode: FailureMode,
) -> None:
    jwks_server.oversize_bytes = 5000
    jwks_server.fail(mode)
    assert await lookup.refusal() == "jwks_unavailable"
    jwks_server.oversize_bytes = 1000
    fresh = replace(lookup, jwks=JwksCache(fetch_session, policy, development=True))
    assert isinstance(await fresh.find(), ec.EllipticCurvePublicKey)


@pytest.mark.parametrize("mode", FAILURES)
async def test_last_good_keys_survive_an_outage_after_ttl_expiry(
    verifier: PAVerifier,
    mint: Mint,
    jwks_server: FakeJwksServer,
    pa_issuer: str,
    clock: ManualClock,
    fetches: Fetches,
    mode: FailureMode,
) -> None:
    await verifier.verify(mint())
    jwks_server.fail(mode)
    clock.advance(301)  # past the default TTL
    identity = await verifier.verify(mint())
    assert identity.sub == SUB
    assert fetches == [(pa_issuer, True), (pa_issuer, False)]  # the refetch was tried, and failed


async def test_failed_fetches_are_retried_only_after_the_cooldown(
    lookup: Lookup, jwks_server: FakeJwksServer, clock: ManualClock, policy: JwksPolicy
) -> None:
    jwks_server.fail("error")
    for _ in range(5):
        assert await lookup.refusal() == "jwks_unavailable"
    assert jwks_server.fetch_count == 1
    jwks_server.fail(None)
    clock.advance(policy.refetch_cooldown)
    assert isinstance(await lookup.find(), ec.EllipticCurvePublicKey)
    assert jwks_server.fetch_count == 2


async def test_version_changes_only_when_the_keys_do(
    jwks: JwksCache, lookup: Lookup, jwks_server: FakeJwksServer, clock: ManualClock
) -> None:
    assert jwks.version(jwks_server.issuer) is None
    await lookup.find()
    first = jwks.version(jwks_server.issuer)
    clock.advance(300)
    await lookup.find()
    assert jwks.version(jwks_server.issuer) == first
    jwks_server.add_key(PAKey.es256())
    clock.advance(300)
    await lookup.find()
    assert jwks_server.fetch_count == 3
    assert jwks.version(jwks_server.issuer) != first


# --- the bound on cached issuers (personal_agents.jwks.max_cached_issuers) ----------------------


@pytest.mark.parametrize("policy", [jwks_policy(max_cached_issuers=2)], ids=["max_cached_issuers=2"])
async def test_keys_of_the_least_recently_used_open_issuer_are_dropped_beyond_max_cached_issuers(
    lookup: Lookup, jwks_server: FakeJwksServer, policy: JwksPolicy
) -> None:
    """Under the open policy anyone can be an issuer, so their partition is bounded; recent use keeps keys."""
    a, b, c = (replace(lookup, issuer=f"https://pa-{name}.example", open_policy=True) for name in "abc")
    await a.find()
    await b.find()
    await a.find()  # a is now more recently used than b
    await c.find()
    assert [pa.held for pa in (a, b, c)] == [True, False, True]
    assert jwks_server.fetch_count == 3
    await b.find()  # fetched afresh; a is now the least recently used
    assert [pa.held for pa in (a, b, c)] == [False, True, True]
    assert jwks_server.fetch_count == 4


@pytest.mark.parametrize("policy", [jwks_policy(max_cached_issuers=2)], ids=["max_cached_issuers=2"])
async def test_s3_1_registered_and_inline_keys_are_never_dropped_for_open_issuers(
    jwks: JwksCache, lookup: Lookup, jwks_server: FakeJwksServer, policy: JwksPolicy
) -> None:
    """Issue 12 row 4: open-policy issuers fill their own partition only; a registered issuer's keys
    stay held, so its users are still served while its key server is down."""
    airgapped = Lookup(jwks, "https://airgapped.example", None, PAKey.es256())
    jwks.preload(airgapped.issuer, {"keys": [airgapped.key.public_jwk()]})
    await lookup.find()
    opened = [replace(lookup, issuer=f"https://pa-{n}.example", open_policy=True) for n in range(5)]
    for pa in opened:
        await pa.find()
    assert [pa.held for pa in opened] == [False, False, False, True, True]
    jwks_server.fail("error")
    assert isinstance(await lookup.find(), ec.EllipticCurvePublicKey)
    assert isinstance(await airgapped.find(), ec.EllipticCurvePublicKey)
    assert jwks.has_keys(lookup.issuer)
    assert jwks_server.fetch_count == 6  # the registered issuer's keys were never fetched again


# --- huge RSA public exponents ---------------------------------------------------------------------


def test_rsa_key_with_a_huge_public_exponent_is_skipped() -> None:
    """Issue 12 row 4: verifying costs an exponentiation by ``e``; a 2048-bit ``e`` made every failed
    verification tens of times dearer. Such a key is skipped as it is parsed, like an 8192+ bit one."""
    huge = huge_exponent_key()
    public = huge.private_key.public_key()
    assert isinstance(public, rsa.RSAPublicKey)
    assert public.public_numbers().e > MAX_RSA_EXPONENT
    assert parse_jwk(huge.public_jwk()) is None
    assert parse_jwks({"keys": [huge.public_jwk()]}) == ()
    assert parse_jwk(PAKey.rs256().public_jwk()) is not None  # e = 65537
