"""§3.2 / §3.4 through HTTP: every authentication failure is the same bare 401, on every operation."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.gateway import AUDIENCE, DISABLED_PA, PUBLIC_URL, Harness, MakeGateway
from tests.support.pa import OMIT, FakeJwksServer, PAKey

TokenFactory = Callable[[Harness], str]
NOW = time.time


CASES: dict[str, TokenFactory] = {
    "unknown-kid": lambda h: PAKey.es256(kid="not-published").mint(h.issuer, "alice", AUDIENCE),
    "aud-is-card-url": lambda h: h.key.mint(
        h.issuer, "alice", f"{PUBLIC_URL}/a2a/acme/.well-known/agent-card.json"
    ),
    "aud-is-interface-url": lambda h: h.key.mint(h.issuer, "alice", f"{PUBLIC_URL}/a2a/acme"),
    "aud-is-a-list": lambda h: h.key.mint(h.issuer, "alice", [AUDIENCE]),
    "iat-31s-ahead": lambda h: h.key.mint(h.issuer, "alice", AUDIENCE, iat=NOW() + 31, ttl=120),
    "expired": lambda h: h.key.mint(h.issuer, "alice", AUDIENCE, iat=NOW() - 200, exp=NOW() - 31),
    "lifetime-over-300s": lambda h: h.key.mint(h.issuer, "alice", AUDIENCE, ttl=301),
    "no-iat": lambda h: h.key.mint(h.issuer, "alice", AUDIENCE, iat=OMIT, exp=NOW() + 60),
    "no-exp": lambda h: h.key.mint(h.issuer, "alice", AUDIENCE, exp=OMIT),
    "no-sub": lambda h: h.key.mint(h.issuer, OMIT, AUDIENCE),
    "empty-sub": lambda h: h.key.mint(h.issuer, "", AUDIENCE),
    "disabled-issuer": lambda h: h.key.mint(DISABLED_PA, "alice", AUDIENCE),
    "unknown-issuer": lambda h: h.key.mint("https://stranger.example", "alice", AUDIENCE),
    "hs256": lambda h: h.key.mint(h.issuer, "alice", AUDIENCE, alg="HS256"),
    "alg-none": lambda h: h.key.mint(h.issuer, "alice", AUDIENCE, alg="none"),
    "jku-header": lambda h: h.key.mint(
        h.issuer, "alice", AUDIENCE, extra_headers={"jku": "https://evil/jwks"}
    ),
    "jwk-header": lambda h: h.key.mint(
        h.issuer, "alice", AUDIENCE, extra_headers={"jwk": h.key.public_jwk()}
    ),
    "x5u-header": lambda h: h.key.mint(h.issuer, "alice", AUDIENCE, extra_headers={"x5u": "https://evil/x"}),
    "x5c-header": lambda h: h.key.mint(h.issuer, "alice", AUDIENCE, extra_headers={"x5c": ["MIIB"]}),
    "crit-header": lambda h: h.key.mint(h.issuer, "alice", AUDIENCE, extra_headers={"crit": ["exp"]}),
    "bad-signature": lambda h: h.token()[:-4] + ("AAAA" if not h.token().endswith("AAAA") else "BBBB"),
    "garbage": lambda h: "not.a.jwt",
}


def assert_bare_401(status: int, headers: dict[str, str], body: bytes) -> None:
    assert status == 401
    assert headers["WWW-Authenticate"] == 'Bearer realm="a2a"'
    assert body == b""
    assert headers.get("Content-Type", "") != "application/a2a+json"


@pytest.mark.parametrize("case", sorted(CASES))
async def test_s3_4_bad_token_is_bare_401(gw_memory: Harness, case: str) -> None:
    token = CASES[case](gw_memory)
    response = await gw_memory.send(headers={"Authorization": f"Bearer {token}"})
    assert_bare_401(response.status, dict(response.headers), await response.read())
    assert gw_memory.bot.calls == []


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Basic dXNlcjpwYXNz", "Bearer a b", "bearer"],
    ids=["absent", "empty", "no-token", "basic", "two-tokens", "scheme-only"],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "message:send"),
        ("GET", "tasks"),
        ("GET", "tasks/t-1"),
        ("POST", "tasks/t-1:cancel"),
        ("POST", "message:stream"),
        ("GET", "extendedAgentCard"),
        ("GET", "tasks/t-1/pushNotificationConfigs"),
    ],
)
async def test_s3_4_missing_or_malformed_credentials(
    gw_memory: Harness, authorization: str | None, method: str, path: str
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = await gw_memory.client.request(method, f"/a2a/acme/{path}", headers=headers, data=b"{bad json")
    assert_bare_401(response.status, dict(response.headers), await response.read())


async def test_s3_2_good_es256_and_rs256(
    gw_memory: Harness, jwks_server: FakeJwksServer, rs256_key: PAKey
) -> None:
    jwks_server.set_keys(gw_memory.key, rs256_key)
    assert (await gw_memory.send()).status == 200
    rs_token = rs256_key.mint(gw_memory.issuer, "alice", AUDIENCE)
    assert (await gw_memory.send(headers={"Authorization": f"Bearer {rs_token}"})).status == 200


async def test_s3_2_token_without_jti_reused_across_brands(gw_memory: Harness) -> None:
    token = gw_memory.key.mint(gw_memory.issuer, "alice", AUDIENCE, extra_claims={"jti": OMIT})
    for brand in ("acme", "globex", "acme"):
        response = await gw_memory.send(brand=brand, headers={"Authorization": f"Bearer {token}"})
        assert response.status == 200


async def test_s3_2_clock_skew_within_30s_is_accepted(gw_memory: Harness) -> None:
    ahead = gw_memory.key.mint(gw_memory.issuer, "alice", AUDIENCE, iat=NOW() + 25)
    assert (await gw_memory.send(headers={"Authorization": f"Bearer {ahead}"})).status == 200
    just_expired = gw_memory.key.mint(gw_memory.issuer, "alice", AUDIENCE, iat=NOW() - 100, exp=NOW() - 20)
    assert (await gw_memory.send(headers={"Authorization": f"Bearer {just_expired}"})).status == 200


async def test_s3_2_key_rotation_is_picked_up_through_http(
    make_gateway: MakeGateway, jwks_server: FakeJwksServer
) -> None:
    def no_cooldown(raw: dict[str, Any]) -> None:
        raw["personal_agents"]["jwks"] = {"refetch_cooldown": 0}

    gw = await make_gateway(edit=no_cooldown)
    assert (await gw.send()).status == 200
    rotated = PAKey.es256(kid="rotated-1")
    jwks_server.set_keys(rotated)
    token = rotated.mint(gw.issuer, "alice", AUDIENCE)
    assert (await gw.send(headers={"Authorization": f"Bearer {token}"})).status == 200
    assert jwks_server.fetch_count == 2
    # The retired key no longer verifies once the new set is in.
    assert (await gw.send()).status == 401


async def test_s2_1_card_needs_no_token_even_a_bad_one(gw_memory: Harness) -> None:
    response = await gw_memory.client.get(
        "/a2a/acme/.well-known/agent-card.json", headers={"Authorization": "Bearer garbage"}
    )
    assert response.status == 200


async def test_s3_1_open_policy_discovers_jwks_uri(
    make_gateway: MakeGateway, jwks_server: FakeJwksServer
) -> None:
    """§3.1: an open Provider takes any issuer whose OIDC discovery names a jwks_uri; §3.2 still holds."""

    def open_policy(raw: dict[str, Any]) -> None:
        raw["personal_agents"] = {"policy": "open"}

    gw = await make_gateway(edit=open_policy)
    assert (await gw.send()).status == 200
    assert jwks_server.discovery_count == 1
    expired = gw.key.mint(gw.issuer, "alice", AUDIENCE, iat=NOW() - 200, exp=NOW() - 31)
    assert (await gw.send(headers={"Authorization": f"Bearer {expired}"})).status == 401
    stranger = gw.key.mint("http://127.0.0.1:9/nobody", "alice", AUDIENCE)
    assert (await gw.send(headers={"Authorization": f"Bearer {stranger}"})).status == 401
