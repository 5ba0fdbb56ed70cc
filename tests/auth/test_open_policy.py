"""§3.1 ``open`` policy under attack, through a real gateway over HTTP (issue 12 row 4).

Anyone can name an issuer, so what invented issuers cost is bounded and counted at the fake
servers on loopback: their keys live apart from registered personal agents' (which they can
never push out), their fetches draw on one process-wide budget, a failing issuer is asked at
most once per cool-down, and a flood of unknown ``kid`` s buys one fetch per cool-down.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

from gateway.ops.metrics import Metrics
from tests.support.gateway import AUDIENCE, Harness, MakeGateway
from tests.support.issuers import IssuerFarm
from tests.support.pa import FakeJwksServer, PAKey

Edit = Callable[[dict[str, Any]], None]


def open_policy(**jwks: Any) -> Edit:
    """An ``edit=`` hook: the ``open`` policy (the test PA stays registered), with ``jwks`` bounds."""

    def edit(raw: dict[str, Any]) -> None:
        raw["personal_agents"]["policy"] = "open"
        raw["personal_agents"]["jwks"] = dict(jwks)

    return edit


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def refused(metrics: Metrics, kind: str) -> float:
    value = metrics.registry.get_sample_value("pact_open_fetches_refused_total", {"kind": kind})
    return value or 0.0


async def test_s3_1_open_issuers_never_evict_a_registered_agents_keys(
    make_gateway: MakeGateway, issuer_farm: IssuerFarm, jwks_server: FakeJwksServer
) -> None:
    """Five invented issuers through a cache bounded at two, then the registered agent's key server
    goes down: its users are still served from the keys it held (before: evicted, so 401)."""
    gw = await make_gateway(edit=open_policy(max_cached_issuers=2))
    assert (await gw.send()).status == 200
    issuer_farm.publish(gw.key)
    for name in range(5):
        assert (await gw.send(issuer=issuer_farm.issuer(f"pa-{name}"))).status == 200
    assert issuer_farm.requests == 10  # each open issuer: its discovery document and its keys
    jwks_server.fail("error")
    for sub in ("alice", "bob"):
        assert (await gw.send(sub=sub)).status == 200
    assert jwks_server.fetch_count == 1


async def test_a_flood_of_invented_issuers_buys_at_most_the_fetch_budget(
    make_gateway: MakeGateway, issuer_farm: IssuerFarm, jwks_server: FakeJwksServer
) -> None:
    """40 tokens, each naming a new issuer whose discovery and keys answer: 80 fetches before the fix.

    The budget: bursts of 5 and 0.001 fetch/s, so within the 1000 s any run of this test takes
    it refills nothing and exactly 5 fetches are made; every other one is counted as refused.
    """
    metrics = Metrics()
    gw = await make_gateway(edit=open_policy(open_fetch_burst=5, open_fetch_rate=0.001), metrics=metrics)
    stranger = PAKey.es256()
    issuer_farm.publish(stranger)
    for name in range(40):
        token = stranger.mint(issuer_farm.issuer(f"junk-{name}"), "alice", AUDIENCE)
        response = await gw.send(headers=bearer(token))
        assert response.status == (200 if name < 2 else 401)
    assert (issuer_farm.discovery_count, issuer_farm.fetch_count) == (3, 2)
    assert (refused(metrics, "discovery"), refused(metrics, "jwks")) == (37, 1)
    # The registered personal agent fetches outside the budget, and keeps being served.
    assert (await gw.send()).status == 200
    assert jwks_server.fetch_count == 1


async def test_a_failing_open_issuer_is_asked_once_per_cooldown(
    make_gateway: MakeGateway, issuer_farm: IssuerFarm
) -> None:
    """Its failed discovery is remembered for ``refetch_cooldown`` (an hour here: no run is that slow)."""
    gw = await make_gateway(edit=open_policy(refetch_cooldown=3600))
    issuer_farm.discovery_fails = True
    issuer = issuer_farm.issuer("down")
    for sub in range(20):
        assert (await gw.send(issuer=issuer, sub=f"user-{sub}")).status == 401
    assert (issuer_farm.discovery_count, issuer_farm.fetch_count) == (1, 0)


async def flood_of_unknown_kids(gw: Harness, issuer: str, count: int = 50) -> None:
    """``count`` concurrent turns, each signed by a fresh key with a ``kid`` nobody published."""
    tokens = [PAKey.es256(kid=secrets.token_hex(8)).mint(issuer, "alice", AUDIENCE) for _ in range(count)]
    responses = await asyncio.gather(*(gw.send(headers=bearer(token)) for token in tokens))
    assert {response.status for response in responses} == {401}


async def test_a_jwks_flooded_with_unknown_kids_is_fetched_once_per_cooldown(
    make_gateway: MakeGateway, issuer_farm: IssuerFarm, jwks_server: FakeJwksServer
) -> None:
    """Registered and open issuers alike: concurrent unknown ``kid`` s share one fetch, and within
    the cool-down (an hour here) none makes another; a good token is still served."""
    gw = await make_gateway(edit=open_policy(refetch_cooldown=3600))
    issuer_farm.publish(gw.key)
    opened = issuer_farm.issuer("pa")
    for issuer in (gw.issuer, opened):
        await flood_of_unknown_kids(gw, issuer)
        await flood_of_unknown_kids(gw, issuer)
        assert (await gw.send(issuer=issuer)).status == 200
    assert jwks_server.fetch_count == 1
    assert (issuer_farm.discovery_count, issuer_farm.fetch_count) == (1, 1)
