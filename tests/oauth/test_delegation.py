"""The ``X-A2A-User-Delegation`` verifier alone: what it caches, and what a cached verdict still checks."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.oauth.delegation import DelegationVerifier, InvalidToken
from gateway.store import keys
from tests.support.delegation import (
    BRAND_USER,
    BrandLogin,
    enable_delegation,
    grant_via_store,
    mint_for,
    oauth_server,
)
from tests.support.gateway import OTHER_PA, Harness, MakeGateway
from tests.support.pa import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def both(
    make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str, clock: ManualClock
) -> Harness:
    """``acme`` and ``globex`` both delegate, on the memory store, on a clock the test moves."""
    acme = enable_delegation(brand_login, provider_key_pem)
    globex = enable_delegation(brand_login, provider_key_pem, brand_index=1)

    def edit(raw: dict[str, Any]) -> None:
        acme(raw)
        globex(raw)

    return await make_gateway(edit=edit, clock=clock)


async def test_s5_5_verdict_carries_the_store_check_and_is_cached(both: Harness) -> None:
    verifier = DelegationVerifier(oauth_server(both))
    grant = await grant_via_store(both, ("orders:read",))
    header = f"Bearer {mint_for(both, grant)}"
    acme = both.config.brands["acme"]
    first = verifier.verify(header, acme, both.issuer)
    assert (first.brand_id, first.claims.user, first.claims.scopes) == ("acme", BRAND_USER, ("orders:read",))
    assert first.grant.grant_key == keys.grant_key("acme", grant.grant_id)
    assert first.grant.user_digest == keys.user_digest("acme", BRAND_USER)
    assert verifier.verify(header, acme, both.issuer) is first


async def test_s5_5_cached_verdict_is_not_used_at_exp(both: Harness, clock: ManualClock) -> None:
    verifier = DelegationVerifier(oauth_server(both))
    header = f"Bearer {mint_for(both, await grant_via_store(both), ttl=120)}"
    acme = both.config.brands["acme"]
    verifier.verify(header, acme, both.issuer)
    clock.advance(119)
    verifier.verify(header, acme, both.issuer)
    clock.advance(1)
    with pytest.raises(InvalidToken) as refused:
        verifier.verify(header, acme, both.issuer)
    assert refused.value.reason == "expired"


async def test_s5_5_cached_verdict_is_for_its_brand_and_its_personal_agent(both: Harness) -> None:
    verifier = DelegationVerifier(oauth_server(both))
    header = f"Bearer {mint_for(both, await grant_via_store(both))}"
    verifier.verify(header, both.config.brands["acme"], both.issuer)
    with pytest.raises(InvalidToken) as other_brand:
        verifier.verify(header, both.config.brands["globex"], both.issuer)
    assert other_brand.value.reason == "bad_audience"
    with pytest.raises(InvalidToken) as other_pa:
        verifier.verify(header, both.config.brands["acme"], OTHER_PA)
    assert other_pa.value.reason == "client_mismatch"


@pytest.mark.parametrize("header", ["", "Bearer", "Bearer a b", "Basic abc"])
async def test_s5_5_header_must_be_one_bearer_token(both: Harness, header: str) -> None:
    verifier = DelegationVerifier(oauth_server(both))
    with pytest.raises(InvalidToken) as refused:
        verifier.verify(header, both.config.brands["acme"], both.issuer)
    assert refused.value.reason == "malformed"
