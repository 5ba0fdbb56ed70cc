"""The JWT attack corpus (``jwt_attacks.yaml``, issue 12 deliverable 4) against a real gateway over HTTP.

One parametrized test runs every case against each target it names: the personal-agent JWT on
``message:send`` (§3.2, §3.4) and as the client credential of ``device_authorization`` and
``token`` (§5.3), and the delegation token on ``message:send`` (§5.4, §5.5). Each answer is the
bare ``401`` the target owes, refused for the reason the corpus names (the PA JWT's in
``pact_auth_failures_total``, the delegation token's in its log line), and costs no more than
a normal verification: at most one signature check and no key fetch, counted rather than timed;
a PA JWT sent again costs no signature check at all (its refusal is remembered).
"""

from __future__ import annotations

import base64
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import ClientResponse

from gateway.ops.metrics import Metrics
from gateway.protocol.urls import OAuthUrls
from tests.auth.conftest import CountedSignatures
from tests.support.delegation import (
    DEVICE_CODE_GRANT,
    BrandLogin,
    delegated,
    enable_delegation,
    grant_via_store,
    oauth_server,
    post_form,
)
from tests.support.gateway import AUDIENCE, PUBLIC_URL, Harness, MakeGateway
from tests.support.pa import FakeJwksServer, PAKey, huge_exponent_key
from tests.support.secrets_scan import remember

CORPUS: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "jwt_attacks.yaml").read_text("utf-8"))
TARGETS = ("pa", "device_authorization", "token", "delegation")
PA_AUTHENTICATE = 'Bearer realm="a2a"'
DELEGATION_AUTHENTICATE = 'Bearer realm="a2a", error="invalid_token"'
OTHER_BRAND = OAuthUrls.of(PUBLIC_URL, "globex").interface
Edit = Callable[[dict[str, Any]], None]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


TRANSFORMS: dict[str, Callable[[str], str]] = {
    # Nine characters off an 86-character ES256 signature leave 77, a length no base64url text has
    # (4n + 1), so every such token is malformed; with eight off, about one in fifteen signatures
    # still decoded and the refusal became bad_signature instead.
    "truncate-signature": lambda token: token[:-9],
    "truncate-half": lambda token: token[: len(token) // 2],
    "double-encode": lambda token: _b64url(token.encode()),
    "double-encode-segments": lambda token: ".".join(_b64url(part.encode()) for part in token.split(".")),
}


def _fill(value: Any, values: Mapping[str, str]) -> Any:
    """``value`` with each ``{name}`` in its strings replaced, through lists and objects."""
    if isinstance(value, str):
        for name, replacement in values.items():
            value = value.replace(f"{{{name}}}", replacement)
        return value
    if isinstance(value, list):
        return [_fill(item, values) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, values) for key, item in value.items()}
    return value


@dataclass
class GoodToken:
    """What a good token of one target is: its claims and headers, and the keys that may sign it."""

    issuer: str
    sub: str
    audience: str
    signers: dict[str, PAKey]
    claims: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, Any] = field(default_factory=dict)

    def build(self, case: Mapping[str, Any]) -> str:
        """The token ``case`` describes (the good token for an empty case)."""
        iat = int(time.time())
        exp = iat + 120
        values = {"iss": self.issuer, "aud": self.audience, "exp": str(exp), "other_brand": OTHER_BRAND}
        claims = {**self.claims, **_fill(case.get("claims", {}), values)}
        headers = {**self.headers, **_fill(case.get("headers", {}), values)}
        signer = self.signers[case.get("signer", "good")]

        def mint() -> str:
            return signer.mint(
                self.issuer,
                self.sub,
                self.audience,
                iat=iat,
                exp=exp,
                extra_claims=claims,
                extra_headers=headers,
                alg=case.get("alg"),
            )

        token = mint()
        if "pad_to" in case:
            claims["pad"] = "A" * math.ceil((case["pad_to"] - len(token)) * 3 / 4 + 3)
            token = mint()
            assert len(token) >= case["pad_to"]
        if "transform" in case:
            token = TRANSFORMS[case["transform"]](token)
            remember("a JWT of the attack corpus, transformed", token)
        return token


@dataclass(frozen=True)
class AttackKeys:
    """The RSA keys the corpus signs with: slow to make, so made once for the module."""

    rsa_1024: PAKey
    rsa_huge_exponent: PAKey


@pytest.fixture(scope="module")
def attack_keys() -> AttackKeys:
    return AttackKeys(rsa_1024=PAKey.rs256(bits=1024), rsa_huge_exponent=huge_exponent_key())


def _pairs() -> Iterator[Any]:
    for case in CORPUS:
        for target in case.get("targets", TARGETS):
            yield pytest.param(target, case, id=f"{target}-{case['name']}")


def _delegating_with_a_long_cooldown(brand_login: BrandLogin, provider_key_pem: str) -> Edit:
    """``acme`` delegates; an unknown kid may refetch once per cool-down, here an hour, so no run
    of a case can reach a refetch and "no key fetch" holds however slow the machine is."""
    delegating = enable_delegation(brand_login, provider_key_pem)

    def edit(raw: dict[str, Any]) -> None:
        delegating(raw)
        raw["personal_agents"]["jwks"] = {"refetch_cooldown": 3600}

    return edit


async def _attack(gw: Harness, target: str, token: str, pa_headers: Mapping[str, str]) -> ClientResponse:
    bearer = {"Authorization": f"Bearer {token}"}
    if target == "pa":
        return await gw.send(headers=bearer)
    if target == "delegation":
        return await gw.send(headers={**pa_headers, **delegated(token)})
    form = (
        {"client_id": gw.issuer, "scope": "orders:read"}
        if target == "device_authorization"
        else {"grant_type": DEVICE_CODE_GRANT, "device_code": "never-issued", "client_id": gw.issuer}
    )
    return await post_form(gw, target, form, headers=bearer)


async def _assert_refused(response: ClientResponse, target: str, case: Mapping[str, Any]) -> None:
    expected = case.get("status", 401)
    if expected != 401:
        assert response.status == expected
        return
    assert response.status == 401
    authenticate = DELEGATION_AUTHENTICATE if target == "delegation" else PA_AUTHENTICATE
    assert response.headers["WWW-Authenticate"] == authenticate
    assert await response.read() == b""


async def _delegation_token(gw: Harness, attack_signers: Mapping[str, PAKey]) -> GoodToken:
    """A §5.4 token of a live grant to ``gw``'s personal agent, signed with the Provider's own key."""
    grant = await grant_via_store(gw)
    server = oauth_server(gw)
    urls = server.urls(gw.config.brands["acme"])
    provider = PAKey.es256(kid=server.keys.current.kid)
    provider.private_key = server.keys.current.private_key
    return GoodToken(
        urls.issuer,
        grant.user,
        urls.interface,
        {"good": provider, "same-kid-other-key": PAKey.es256(kid=provider.kid), **attack_signers},
        claims={"client_id": gw.issuer, "scope": "orders:read", "grant_id": grant.grant_id},
        headers={"typ": "at+jwt"},
    )


def _auth_failures(metrics: Metrics, reason: str) -> float:
    value = metrics.registry.get_sample_value("pact_auth_failures_total", {"reason": reason})
    return value or 0.0


@pytest.mark.parametrize(("target", "case"), list(_pairs()))
async def test_jwt_attack_is_a_bare_401_costing_no_more_than_one_verification(
    target: str,
    case: dict[str, Any],
    make_gateway: MakeGateway,
    brand_login: BrandLogin,
    provider_key_pem: str,
    jwks_server: FakeJwksServer,
    attack_keys: AttackKeys,
    pa_signature_checks: CountedSignatures,
    delegation_signature_checks: CountedSignatures,
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    gw = await make_gateway(
        edit=_delegating_with_a_long_cooldown(brand_login, provider_key_pem), metrics=metrics
    )
    jwks_server.set_keys(gw.key, attack_keys.rsa_1024, attack_keys.rsa_huge_exponent)
    attack_signers = {"rsa-1024": attack_keys.rsa_1024, "rsa-huge-exponent": attack_keys.rsa_huge_exponent}
    pa = GoodToken(
        gw.issuer,
        "alice",
        AUDIENCE,
        {"good": gw.key, "same-kid-other-key": PAKey.es256(kid=gw.key.kid), **attack_signers},
    )
    pa_headers = {"Authorization": f"Bearer {pa.build({})}"}
    assert (await gw.send(headers=pa_headers)).status == 200  # keys fetched, this token's verdict cached
    good, counted = pa, pa_signature_checks
    if target == "delegation":
        good, counted = await _delegation_token(gw, attack_signers), delegation_signature_checks
        assert (await gw.send(headers={**pa_headers, **delegated(good.build({}))})).status == 200
    elif target != "pa":
        assert (await _attack(gw, "pa", good.build({}), pa_headers)).status == 200  # the built token is good
    token = good.build(case)
    fetches = (jwks_server.fetch_count, jwks_server.discovery_count)
    checks, calls = counted.count, len(gw.bot.calls)
    reason = case.get("reason", {}).get("delegation" if target == "delegation" else "pa")
    refused_before = _auth_failures(metrics, reason) if reason is not None else 0.0
    with caplog.at_level(logging.INFO, logger="pact_gateway.a2a"):
        await _assert_refused(await _attack(gw, target, token, pa_headers), target, case)
    assert counted.count - checks <= 1
    assert (jwks_server.fetch_count, jwks_server.discovery_count) == fetches
    if reason is not None and target == "delegation":
        assert f"delegation token refused: reason={reason}" in caplog.messages
    elif reason is not None:
        assert _auth_failures(metrics, reason) == refused_before + 1
        after_first = counted.count
        await _assert_refused(await _attack(gw, target, token, pa_headers), target, case)
        assert counted.count == after_first  # sent again: its refusal is remembered
    assert len(gw.bot.calls) == calls
