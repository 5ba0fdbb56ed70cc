"""§3.1 ``open`` policy: any issuer whose OIDC discovery document names a JWKS, §3.2 in full."""

from __future__ import annotations

import aiohttp
import pytest
from prometheus_client import generate_latest

from gateway.auth.discovery import acceptable_open_issuer, discovery_url
from gateway.auth.jwks import JwksCache
from gateway.auth.pa_jwt import PAVerifier
from gateway.config import JwksPolicy, PersonalAgentConfig, PersonalAgentsConfig
from gateway.ops.metrics import Metrics
from tests.support.pa import FakeJwksServer, ManualClock, PAKey, jwks_policy, refusal

SUB = "user-1"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1000.0)


@pytest.fixture
def open_agents() -> PersonalAgentsConfig:
    return PersonalAgentsConfig(policy="open", registered=(), jwks=jwks_policy())


@pytest.fixture
def jwks(fetch_session: aiohttp.ClientSession, clock: ManualClock) -> JwksCache:
    return JwksCache(fetch_session, jwks_policy(), development=True, clock=clock)


@pytest.fixture
def verifier(open_agents: PersonalAgentsConfig, pa_audience: str, jwks: JwksCache) -> PAVerifier:
    return PAVerifier(open_agents, pa_audience, jwks, token_cache_size=0)


def test_s3_1_discovery_url_is_under_the_issuer() -> None:
    assert discovery_url("https://pa.example") == "https://pa.example/.well-known/openid-configuration"
    assert discovery_url("https://pa.example/") == "https://pa.example/.well-known/openid-configuration"
    assert (
        discovery_url("https://pa.example/t/1") == "https://pa.example/t/1/.well-known/openid-configuration"
    )


@pytest.mark.parametrize(
    ("issuer", "development", "ok"),
    [
        ("https://pa.example", False, True),
        ("https://pa.example/tenant", False, True),
        ("http://pa.example", False, False),  # open policy: https issuers only
        ("http://127.0.0.1:8080", True, True),
        ("https://pa.example?x=1", False, False),
        ("https://pa.example#frag", False, False),
        ("https://user@pa.example", False, False),
        ("pa.example", False, False),
        ("urn:example:pa", False, False),
        ("https://pa.example/" + "a" * 600, False, False),
        # No white space or control character: yarl would drop a newline, and the log would get it.
        ("https://pa.example/a\nb", False, False),
        ("https://pa.example/a\r\n2030-01-01 INFO forged", False, False),
        ("https://pa.example/\x1b[31m", False, False),
        ("https://pa.example/a b", False, False),
        ("https://pa.example/a\u2028b", False, False),
        ("https://pa.example/caf\u00e9", False, True),
    ],
)
def test_s3_1_which_issuers_the_open_policy_looks_up(issuer: str, development: bool, ok: bool) -> None:
    assert acceptable_open_issuer(issuer, development=development) is ok


async def test_s3_1_open_policy_finds_jwks_uri_through_discovery(
    verifier: PAVerifier, jwks_server: FakeJwksServer, es256_key: PAKey, pa_audience: str
) -> None:
    identity = await verifier.verify(es256_key.mint(jwks_server.issuer, SUB, pa_audience))
    assert (identity.issuer, identity.sub) == (jwks_server.issuer, SUB)
    assert (jwks_server.discovery_count, jwks_server.fetch_count) == (1, 1)
    await verifier.verify(es256_key.mint(jwks_server.issuer, "user-2", pa_audience))
    assert (jwks_server.discovery_count, jwks_server.fetch_count) == (1, 1)


async def test_s3_1_discovery_result_cached_per_cache_control(
    verifier: PAVerifier, jwks_server: FakeJwksServer, es256_key: PAKey, pa_audience: str, clock: ManualClock
) -> None:
    jwks_server.cache_control = "max-age=120"
    await verifier.verify(es256_key.mint(jwks_server.issuer, SUB, pa_audience))
    clock.advance(119)
    await verifier.verify(es256_key.mint(jwks_server.issuer, SUB, pa_audience))
    assert jwks_server.discovery_count == 1
    clock.advance(1)
    await verifier.verify(es256_key.mint(jwks_server.issuer, SUB, pa_audience))
    assert jwks_server.discovery_count == 2


async def test_s3_1_open_policy_still_verifies_s3_2_in_full(
    verifier: PAVerifier, jwks_server: FakeJwksServer, es256_key: PAKey, pa_audience: str
) -> None:
    assert await refusal(verifier, es256_key.mint(jwks_server.issuer, SUB, [pa_audience])) == "bad_audience"
    assert await refusal(verifier, PAKey.es256().mint(jwks_server.issuer, SUB, pa_audience)) == "unknown_kid"
    assert await refusal(verifier, es256_key.mint(jwks_server.issuer, SUB, pa_audience, ttl=400)) == (
        "lifetime_too_long"
    )


@pytest.mark.parametrize(
    "document",
    [
        {"issuer": "https://someone-else.example", "jwks_uri": "http://127.0.0.1:1/jwks.json"},
        {"jwks_uri": 42},
        {"issuer": "{issuer}"},
        {"issuer": "{issuer}", "jwks_uri": "ftp://127.0.0.1/jwks.json"},
    ],
)
async def test_s3_1_unusable_discovery_document_is_jwks_unavailable(
    verifier: PAVerifier,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    pa_audience: str,
    document: dict[str, object],
) -> None:
    jwks_server.discovery_document = {
        k: v.format(issuer=jwks_server.issuer) if isinstance(v, str) else v for k, v in document.items()
    }
    assert await refusal(verifier, es256_key.mint(jwks_server.issuer, SUB, pa_audience)) == "jwks_unavailable"
    assert jwks_server.fetch_count == 0


async def test_s3_1_failed_discovery_keeps_the_last_good_jwks_uri(
    verifier: PAVerifier, jwks_server: FakeJwksServer, es256_key: PAKey, pa_audience: str, clock: ManualClock
) -> None:
    await verifier.verify(es256_key.mint(jwks_server.issuer, SUB, pa_audience))
    jwks_server.discovery_failure = "error"
    clock.advance(301)
    assert (await verifier.verify(es256_key.mint(jwks_server.issuer, SUB, pa_audience))).sub == SUB
    assert jwks_server.discovery_count == 2


async def test_s3_1_failed_discovery_retried_only_after_cooldown(
    verifier: PAVerifier, jwks_server: FakeJwksServer, es256_key: PAKey, pa_audience: str, clock: ManualClock
) -> None:
    jwks_server.discovery_failure = "hang"
    for _ in range(3):
        assert (
            await refusal(verifier, es256_key.mint(jwks_server.issuer, SUB, pa_audience))
            == "jwks_unavailable"
        )
    assert jwks_server.discovery_count == 1
    jwks_server.discovery_failure = None
    clock.advance(JwksPolicy().refetch_cooldown)
    assert (await verifier.verify(es256_key.mint(jwks_server.issuer, SUB, pa_audience))).sub == SUB


@pytest.mark.parametrize("issuer", ["not a url", "https://pa.example?tenant=1", "mailto:pa@example.com"])
async def test_s3_1_open_policy_refuses_issuers_that_are_not_https_urls(
    verifier: PAVerifier, es256_key: PAKey, pa_audience: str, issuer: str
) -> None:
    assert await refusal(verifier, es256_key.mint(issuer, SUB, pa_audience)) == "unknown_issuer"


async def test_s3_1_open_policy_outside_development_refuses_http_and_private_issuers(
    fetch_session: aiohttp.ClientSession, jwks_server: FakeJwksServer, es256_key: PAKey, pa_audience: str
) -> None:
    agents = PersonalAgentsConfig(policy="open", jwks=jwks_policy())
    verifier = PAVerifier(agents, pa_audience, JwksCache(fetch_session, jwks_policy(), development=False))
    assert await refusal(verifier, es256_key.mint(jwks_server.issuer, SUB, pa_audience)) == "unknown_issuer"
    https_loopback = jwks_server.issuer.replace("http://", "https://")
    assert await refusal(verifier, es256_key.mint(https_loopback, SUB, pa_audience)) == "jwks_unavailable"
    assert jwks_server.discovery_count == 0


async def test_s3_1_open_policy_still_rejects_a_disabled_registered_issuer(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey, pa_audience: str
) -> None:
    disabled = PersonalAgentConfig(issuer=jwks_server.issuer, jwks_uri=jwks_server.jwks_uri, enabled=False)
    agents = PersonalAgentsConfig(policy="open", registered=(disabled,), jwks=jwks_policy())
    verifier = PAVerifier(agents, pa_audience, jwks)
    assert await refusal(verifier, es256_key.mint(jwks_server.issuer, SUB, pa_audience)) == "disabled_issuer"
    assert jwks_server.discovery_count == 0


async def test_s3_1_allowlist_policy_never_uses_discovery(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey, pa_audience: str
) -> None:
    other = PersonalAgentConfig(issuer="https://registered.example", jwks_uri="https://registered.example/j")
    agents = PersonalAgentsConfig(policy="allowlist", registered=(other,), jwks=jwks_policy())
    verifier = PAVerifier(agents, pa_audience, jwks)
    assert await refusal(verifier, es256_key.mint(jwks_server.issuer, SUB, pa_audience)) == "unknown_issuer"
    assert jwks_server.discovery_count == 0


async def test_s3_1_discovery_fetches_are_counted_by_result_without_the_issuer(
    open_agents: PersonalAgentsConfig,
    pa_audience: str,
    jwks: JwksCache,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    clock: ManualClock,
) -> None:
    """``pact_oidc_discovery_fetches_total{result}``: anyone can name an issuer, so it is no label."""
    metrics = Metrics()
    verifier = PAVerifier(
        open_agents, pa_audience, jwks, token_cache_size=0, on_discovery_fetch=metrics.discovery_fetched
    )

    def fetches(result: str) -> float:
        labels = {"result": result}
        return metrics.registry.get_sample_value("pact_oidc_discovery_fetches_total", labels) or 0.0

    token = es256_key.mint(jwks_server.issuer, SUB, pa_audience)
    await verifier.verify(token)
    await verifier.verify(token)  # cached: no second fetch
    assert (fetches("ok"), fetches("error")) == (1, 0)
    jwks_server.discovery_document = {
        "issuer": "https://someone-else.example",
        "jwks_uri": jwks_server.jwks_uri,
    }
    clock.advance(301)
    await verifier.verify(token)  # the refetch is refused; the last good jwks_uri still serves
    assert (fetches("ok"), fetches("error")) == (1, 1)
    # An issuer refused before any fetch (not an https URL) is not a discovery fetch.
    assert await refusal(verifier, es256_key.mint("not a url", SUB, pa_audience)) == "unknown_issuer"
    assert (fetches("ok"), fetches("error")) == (1, 1)
    assert jwks_server.discovery_count == 2
    assert jwks_server.issuer not in generate_latest(metrics.registry).decode()


async def test_s3_1_discovery_results_beyond_max_cached_issuers_drop_the_least_recently_used(
    open_agents: PersonalAgentsConfig,
    pa_audience: str,
    fetch_session: aiohttp.ClientSession,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    clock: ManualClock,
) -> None:
    """Three issuers (§3.1 matches ``iss`` exactly, so a trailing slash makes another) on one server."""
    jwks = JwksCache(fetch_session, jwks_policy(max_cached_issuers=2), development=True, clock=clock)
    verifier = PAVerifier(open_agents, pa_audience, jwks, token_cache_size=0)
    jwks_server.discovery_document = {"jwks_uri": jwks_server.jwks_uri}  # true of every issuer here
    a, b, c = (jwks_server.issuer + slashes for slashes in ("", "/", "//"))

    async def verify(issuer: str) -> None:
        assert (await verifier.verify(es256_key.mint(issuer, SUB, pa_audience))).issuer == issuer

    for issuer in (a, b, a, c):  # a is used again before c arrives: b is the least recently used
        await verify(issuer)
    assert jwks_server.discovery_count == 3
    await verify(a)
    assert jwks_server.discovery_count == 3
    await verify(b)
    assert jwks_server.discovery_count == 4
