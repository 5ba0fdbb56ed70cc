"""§3.2 / §3.4 end to end: every reason a personal-agent token is refused, through PAVerifier.

Real HTTP to the fake JWKS server; each test names the rule it checks.
"""

from __future__ import annotations

import logging
import time

import aiohttp
import pytest

from gateway.auth.jwks import JwksCache
from gateway.auth.pa_jwt import AuthFailure, PAIdentity, PAVerifier, bearer_token
from gateway.config import PersonalAgentsConfig
from tests.auth.conftest import CountedSignatures
from tests.support.pa import OMIT, FakeJwksServer, PAKey, allowlist, huge_exponent_key, jwks_policy

SUB = "user-7f3a"


@pytest.fixture
def jwks(fetch_session: aiohttp.ClientSession) -> JwksCache:
    return JwksCache(fetch_session, jwks_policy(), development=True)


@pytest.fixture
def verifier(pa_agents: PersonalAgentsConfig, pa_audience: str, jwks: JwksCache) -> PAVerifier:
    return PAVerifier(pa_agents, pa_audience, jwks)


async def reason(verifier: PAVerifier, token: str) -> str:
    with pytest.raises(AuthFailure) as failure:
        await verifier.verify(token)
    return failure.value.reason


# --- bearer header (§3.2 "Authorization: Bearer <pa-jwt>") ---------------------------------


@pytest.mark.parametrize("header", [None, "", "   ", "Basic dXNlcjpwdw==", "Token abc"])
def test_s3_2_no_bearer_token_is_missing_token(header: str | None) -> None:
    with pytest.raises(AuthFailure) as failure:
        bearer_token(header)
    assert failure.value.reason == "missing_token"


@pytest.mark.parametrize("header", ["Bearer", "Bearer   ", "Bearer a b", "Bearer a\tb"])
def test_s3_2_broken_bearer_header_is_malformed(header: str) -> None:
    with pytest.raises(AuthFailure) as failure:
        bearer_token(header)
    assert failure.value.reason == "malformed"


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_s3_2_bearer_scheme_is_case_insensitive(scheme: str) -> None:
    assert bearer_token(f"{scheme}  a.b.c ") == "a.b.c"


# --- good tokens ------------------------------------------------------------------------------


async def test_s3_2_good_es256_token_accepted(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    exp = time.time() + 120
    identity = await verifier.verify(es256_key.mint(pa_issuer, SUB, pa_audience, exp=exp))
    assert identity == PAIdentity(issuer=pa_issuer, sub=SUB, expires_at=exp)


async def test_s3_2_good_rs256_token_accepted(
    verifier: PAVerifier, jwks_server: FakeJwksServer, rs256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    jwks_server.add_key(rs256_key)
    identity = await verifier.verify(rs256_key.mint(pa_issuer, SUB, pa_audience))
    assert (identity.issuer, identity.sub) == (pa_issuer, SUB)


async def test_s3_2_token_without_jti_accepted_and_reusable(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    """Conformance notes: no jti is fine and the same token may be used again."""
    token = es256_key.mint(pa_issuer, SUB, pa_audience, extra_claims={"jti": OMIT})
    assert (await verifier.verify(token)).sub == SUB
    assert (await verifier.verify(token)).sub == SUB


async def test_s3_2_kid_absent_uses_the_only_key_of_that_alg(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    token = es256_key.mint(pa_issuer, SUB, pa_audience, extra_headers={"kid": OMIT})
    assert (await verifier.verify(token)).sub == SUB


async def test_s3_2_kid_absent_with_several_candidate_keys_is_unknown_kid(
    verifier: PAVerifier, jwks_server: FakeJwksServer, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    jwks_server.add_key(PAKey.es256())
    token = es256_key.mint(pa_issuer, SUB, pa_audience, extra_headers={"kid": OMIT})
    assert await reason(verifier, token) == "unknown_kid"


async def test_s3_1_inline_jwks_verifies_without_any_fetch(
    jwks: JwksCache, jwks_server: FakeJwksServer, pa_audience: str
) -> None:
    """Air-gapped registration: keys from the configuration, never fetched."""
    key = PAKey.es256()
    agents = allowlist("https://airgapped.example", None, jwks={"keys": [key.public_jwk()]})
    verifier = PAVerifier(agents, pa_audience, jwks)
    assert (await verifier.verify(key.mint("https://airgapped.example", SUB, pa_audience))).sub == SUB
    assert jwks_server.fetch_count == 0


# --- §3.4 failures ---------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["", "not-a-jwt", "a.b", "eyJhbGciOiJFUzI1NiJ9.W10.c2ln", "x" * 9000])
async def test_s3_2_malformed_token_rejected(verifier: PAVerifier, token: str) -> None:
    assert await reason(verifier, token) == "malformed"


async def test_s3_2_unknown_kid_rejected(verifier: PAVerifier, pa_issuer: str, pa_audience: str) -> None:
    """A key whose kid is not published (conformance notes, "Authentication")."""
    assert await reason(verifier, PAKey.es256().mint(pa_issuer, SUB, pa_audience)) == "unknown_kid"


async def test_s3_2_signature_by_another_key_with_a_published_kid_rejected(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    impostor = PAKey.es256(kid=es256_key.kid)
    assert await reason(verifier, impostor.mint(pa_issuer, SUB, pa_audience)) == "bad_signature"


async def test_s3_2_tampered_payload_rejected(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    header, _, signature = es256_key.mint(pa_issuer, SUB, pa_audience).split(".")
    _, payload, _ = es256_key.mint(pa_issuer, "someone-else", pa_audience).split(".")
    assert await reason(verifier, f"{header}.{payload}.{signature}") == "bad_signature"


@pytest.mark.parametrize(
    "aud", ["https://gw.example/a2a/acme", "https://gw.example/.well-known/agent-card.json"]
)
async def test_s3_1_aud_set_to_a_card_or_interface_url_rejected(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, aud: str
) -> None:
    assert await reason(verifier, es256_key.mint(pa_issuer, SUB, aud)) == "bad_audience"


async def test_s3_2_aud_as_a_one_element_list_rejected(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    assert await reason(verifier, es256_key.mint(pa_issuer, SUB, [pa_audience])) == "bad_audience"


async def test_s3_2_iat_31s_ahead_rejected(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    token = es256_key.mint(pa_issuer, SUB, pa_audience, iat=time.time() + 31)
    assert await reason(verifier, token) == "iat_future"


async def test_s3_2_expired_rejected(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    now = time.time()
    token = es256_key.mint(pa_issuer, SUB, pa_audience, iat=now - 200, exp=now - 31)
    assert await reason(verifier, token) == "expired"


async def test_s3_2_exp_more_than_300s_after_iat_rejected(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    token = es256_key.mint(pa_issuer, SUB, pa_audience, ttl=301)
    assert await reason(verifier, token) == "lifetime_too_long"


@pytest.mark.parametrize(
    ("claim", "expected"), [("sub", "bad_sub"), ("iat", "iat_missing"), ("exp", "exp_missing")]
)
async def test_s3_2_missing_required_claim_rejected(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str, claim: str, expected: str
) -> None:
    token = es256_key.mint(pa_issuer, SUB, pa_audience, extra_claims={claim: OMIT}, exp=time.time() + 60)
    assert await reason(verifier, token) == expected


async def test_s3_1_disabled_issuer_rejected(
    jwks: JwksCache, jwks_server: FakeJwksServer, es256_key: PAKey, pa_audience: str
) -> None:
    agents = allowlist(jwks_server.issuer, jwks_server.jwks_uri, enabled=False)
    verifier = PAVerifier(agents, pa_audience, jwks)
    assert await reason(verifier, es256_key.mint(jwks_server.issuer, SUB, pa_audience)) == "disabled_issuer"
    assert jwks_server.fetch_count == 0


async def test_s3_1_unknown_issuer_rejected(
    verifier: PAVerifier, jwks_server: FakeJwksServer, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    assert (
        await reason(verifier, es256_key.mint("https://rogue.example", SUB, pa_audience)) == "unknown_issuer"
    )
    # §3.1 exact string match: a trailing slash is another issuer.
    assert await reason(verifier, es256_key.mint(pa_issuer + "/", SUB, pa_audience)) == "unknown_issuer"
    assert jwks_server.fetch_count == 0


async def test_s3_2_hs256_signed_with_the_public_key_rejected(
    verifier: PAVerifier, jwks_server: FakeJwksServer, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    """Algorithm confusion: HMAC keyed with the published public key must not verify."""
    token = es256_key.mint(pa_issuer, SUB, pa_audience, alg="HS256")
    assert await reason(verifier, token) == "bad_alg"
    assert jwks_server.fetch_count == 0  # refused before any key is fetched


async def test_s3_2_alg_none_rejected(
    verifier: PAVerifier, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    token = es256_key.mint(pa_issuer, SUB, pa_audience, alg="none")
    assert token.endswith(".")
    assert await reason(verifier, token) == "bad_alg"


async def test_s3_2_header_alg_must_match_the_key_type(
    verifier: PAVerifier,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    rs256_key: PAKey,
    pa_issuer: str,
    pa_audience: str,
) -> None:
    """The token's alg never picks the algorithm family: an EC kid with RS256 (and vice versa) fails."""
    jwks_server.add_key(rs256_key)
    assert await reason(verifier, es256_key.mint(pa_issuer, SUB, pa_audience, alg="RS256")) == "bad_alg"
    assert await reason(verifier, rs256_key.mint(pa_issuer, SUB, pa_audience, alg="ES256")) == "bad_alg"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("jku", "https://attacker.example/jwks.json"),
        ("jwk", {"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}),
        ("x5u", "https://attacker.example/cert.pem"),
        ("x5c", ["MIIB"]),
        ("crit", ["exp"]),
    ],
)
async def test_s3_2_forbidden_header_rejected(
    verifier: PAVerifier,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    pa_issuer: str,
    pa_audience: str,
    name: str,
    value: object,
) -> None:
    token = es256_key.mint(pa_issuer, SUB, pa_audience, extra_headers={name: value})
    assert await reason(verifier, token) == "forbidden_header"
    assert jwks_server.fetch_count == 0


async def test_s3_2_rsa_1024_key_rejected_as_weak(
    verifier: PAVerifier, jwks_server: FakeJwksServer, pa_issuer: str, pa_audience: str
) -> None:
    weak = PAKey.rs256(bits=1024)
    jwks_server.add_key(weak)
    assert await reason(verifier, weak.mint(pa_issuer, SUB, pa_audience)) == "weak_key"


async def test_a_key_with_a_huge_rsa_exponent_verifies_nothing(
    verifier: PAVerifier,
    jwks_server: FakeJwksServer,
    pa_issuer: str,
    pa_audience: str,
    pa_signature_checks: CountedSignatures,
) -> None:
    """Issue 12 row 4: a genuine signature by a key whose ``e`` is 2040 bits (each check tens of
    times the normal cost) is refused with no signature check: the key was skipped when parsed."""
    huge = huge_exponent_key()
    jwks_server.add_key(huge)
    assert await reason(verifier, huge.mint(pa_issuer, SUB, pa_audience)) == "unknown_kid"
    assert pa_signature_checks.count == 0


async def test_s3_2_jwks_never_fetched_is_jwks_unavailable(
    verifier: PAVerifier, jwks_server: FakeJwksServer, es256_key: PAKey, pa_issuer: str, pa_audience: str
) -> None:
    jwks_server.fail("error")
    assert await reason(verifier, es256_key.mint(pa_issuer, SUB, pa_audience)) == "jwks_unavailable"


async def test_s3_4_failures_are_logged_with_reason_and_issuer_but_never_the_token(
    verifier: PAVerifier,
    es256_key: PAKey,
    pa_issuer: str,
    pa_audience: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = es256_key.mint(pa_issuer, SUB, [pa_audience])
    with caplog.at_level(logging.DEBUG, logger="gateway.auth"):
        assert await reason(verifier, token) == "bad_audience"
    assert "reason=bad_audience" in caplog.text
    assert pa_issuer in caplog.text
    for segment in token.split("."):
        assert segment not in caplog.text
