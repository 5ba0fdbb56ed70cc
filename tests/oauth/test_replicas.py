"""§5.3 across replicas: two gateways on one Redis (or one Redis Cluster, issue 20) share every
device code and grant, and each single-use decision (redeeming a code, rotating a refresh token)
is made once between them."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiohttp import ClientResponse

from tests.support.delegation import (
    BrandLogin,
    approve_via_store,
    device_authorize,
    enable_delegation,
    obtain_tokens,
    poll_token,
    refresh,
)
from tests.support.gateway import Harness, MakeGateway
from tests.support.pa import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["redis", "cluster"])
def shared_url(request: pytest.FixtureRequest) -> str:
    """The store both replicas share, once per backend: the Redis database, then a Redis Cluster
    of three primaries (issue 20), where every write also waits for a replica (``wait_replicas``)."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def replicas(
    make_gateway: MakeGateway,
    shared_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    clock: ManualClock,
) -> tuple[Harness, Harness]:
    """Two gateways on one Redis database or one Redis Cluster, deciding by one clock (as replicas
    share wall time), whose Brand opts in to a 5 s refresh grace (off by default), so that the
    grace's one answer is seen shared between them."""
    edit = enable_delegation(brand_login, provider_key_pem, refresh_grace=5)
    return await make_gateway(shared_url, edit=edit, clock=clock), await make_gateway(
        shared_url, edit=edit, clock=clock
    )


async def error_of(response: ClientResponse) -> str:
    assert response.status == 400, await response.text()
    return str(orjson.loads(await response.read())["error"])


async def test_s5_3_authorized_on_one_replica_redeemed_on_the_other(
    replicas: tuple[Harness, Harness], clock: ManualClock
) -> None:
    one, two = replicas
    started = await device_authorize(one)
    assert await error_of(await poll_token(two, started["device_code"])) == "authorization_pending"
    # The interval is kept with the code, so the other replica knows this one came too soon.
    assert await error_of(await poll_token(one, started["device_code"])) == "slow_down"
    await approve_via_store(one, started)
    clock.advance(10)
    issued = await poll_token(two, started["device_code"])
    assert issued.status == 200
    tokens = await issued.json()
    assert await error_of(await poll_token(one, started["device_code"])) == "invalid_grant"
    refreshed = await refresh(one, tokens["refresh_token"])
    assert refreshed.status == 200
    # Within the grace, the other replica gives the answer the first one gave (issue 18 I2) ...
    retried = await refresh(two, tokens["refresh_token"])
    assert (retried.status, await retried.read()) == (200, await refreshed.read())
    clock.advance(5)
    # ... and after it, the spent token replayed there is reuse.
    assert await error_of(await refresh(two, tokens["refresh_token"])) == "invalid_grant"
    assert await error_of(await refresh(one, (await refreshed.json())["refresh_token"])) == "invalid_grant"


async def test_s5_3_concurrent_polls_on_both_replicas_issue_one_token(
    replicas: tuple[Harness, Harness],
) -> None:
    one, two = replicas
    started = await device_authorize(one)
    await approve_via_store(two, started)
    polls = [poll_token(replicas[i % 2], started["device_code"]) for i in range(20)]
    responses = await asyncio.gather(*polls)
    assert [response.status for response in responses].count(200) == 1
    for response in responses:
        if response.status != 200:
            assert await error_of(response) == "invalid_grant"


async def test_rfc9700_concurrent_refreshes_on_both_replicas_rotate_once(
    replicas: tuple[Harness, Harness],
) -> None:
    tokens = await obtain_tokens(replicas[0])
    responses = await asyncio.gather(*(refresh(replicas[i % 2], tokens["refresh_token"]) for i in range(20)))
    # One rotation: the refreshes that lost the race get its very answer (the refresh grace), not reuse.
    assert {response.status for response in responses} == {200}
    assert len({await response.read() for response in responses}) == 1
    refreshed = await responses[0].json()
    assert (await refresh(replicas[1], refreshed["refresh_token"])).status == 200


async def test_rfc9700_by_default_concurrent_refreshes_on_both_replicas_rotate_once_and_the_rest_is_reuse(
    make_gateway: MakeGateway, shared_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """Without the opt-in grace, every refresh that lost the race presented a spent token: reuse,
    whichever replica it reached, and the grant is gone for the winner too."""
    edit = enable_delegation(brand_login, provider_key_pem)
    one, two = await make_gateway(shared_url, edit=edit), await make_gateway(shared_url, edit=edit)
    tokens = await obtain_tokens(one)
    responses = await asyncio.gather(
        *(refresh((one, two)[i % 2], tokens["refresh_token"]) for i in range(20))
    )
    assert [response.status for response in responses].count(200) == 1
    for response in responses:
        if response.status != 200:
            assert await error_of(response) == "invalid_grant"
    (winner,) = [await response.json() for response in responses if response.status == 200]
    assert await error_of(await refresh(two, winner["refresh_token"])) == "invalid_grant"
