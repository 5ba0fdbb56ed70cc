"""Issue 20: during a rolling upgrade, the §5 records of the previous release serve this one, and back.

The previous release is the real one (tests/support/releases.py: ``gateway/`` as of 6ad6c1f, run in
a subprocess on the test's Redis database). It creates device authorizations (approved or pending),
grants and refresh tokens (one already rotated); this release, writing either layout
(``cache.key_layout``), redeems them, refreshes, detects a refresh token's reuse (RFC 9700
§4.14.2), revokes, and erases by person and by Brand user. And under ``key_layout: previous`` the
previous release still reads, rotates and lists the grants this release wrote, and redeems the
device codes it created: the two serve side by side until every replica runs this release.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.handlers.oauth.tokens import new_family, new_refresh_token, refresh_token_of
from gateway.oauth.device import code_hash
from gateway.redis_url import RedisAddress
from gateway.store import Owner
from gateway.store import keys as store_keys
from gateway.store.oauth import DeviceAuthorization, PollOutcome, RefreshOutcome
from gateway.store.oauth_redis import RedisOAuthStore
from gateway.store.redis_pipe import RedisPipe
from tests.support.pa import ManualClock
from tests.support.releases import previous_release, run_release

BRAND = "acme"
PA = "https://pa.example"
USER = "user-42"
START = 1_800_000_000.0

# Run by the previous release: grants (one rotated once), device authorizations approved and pending.
_WRITER = """
import asyncio, json, sys
from gateway.config import CacheConfig
from gateway.oauth.device import code_hash
from gateway.oauth.tokens import new_family, new_grant_id, new_refresh_token, refresh_token_of
from gateway.store.base import Owner
from gateway.store.factory import open_oauth_store, open_store
from gateway.store.oauth import DeviceAuthorization, PollOutcome, RefreshOutcome

BRAND, PA, USER = "acme", "https://pa.example", "user-42"

async def main(url, now):
    store = open_store(CacheConfig(url=url), clock=lambda: now)
    oauth = open_oauth_store(store)

    async def authorize(name, approve):
        owner = Owner(BRAND, PA, name)
        authorization = DeviceAuthorization(
            code_hash("dc-" + name), "UC-" + name, BRAND, PA, owner.digest, ("orders:read",), now + 600, 5
        )
        assert await oauth.create_authorization(authorization)
        if approve:
            assert await oauth.approve(BRAND, authorization.device_hash, USER, ("orders:read",), now)
        return owner, authorization

    async def grant(name):
        owner, authorization = await authorize(name, True)
        token, refresh = new_refresh_token(new_grant_id(), new_family())
        result = await oauth.poll(
            BRAND, authorization.device_hash, owner.digest, now, refresh=refresh, grant_ttl=3600
        )
        assert result.outcome is PollOutcome.ISSUED, result
        return [refresh.grant_id, token]

    written = {name: await grant(name) for name in ("alice", "erin", "bob", "ivy")}
    grant_id, spent = written["erin"]
    presented, family = refresh_token_of(spent)
    current, new = new_refresh_token(grant_id, family)
    assert (await oauth.rotate_refresh(BRAND, presented, new, now)).outcome is RefreshOutcome.ROTATED
    written["erin"].append(current)
    await authorize("carol", True)
    await authorize("dave", False)
    await authorize("frank", True)
    await store.close()
    print(json.dumps(written))

asyncio.run(main(sys.argv[1], float(sys.argv[2])))
"""

# Run by the previous release on what this release wrote under key_layout: previous.
_READER = """
import asyncio, json, sys
from gateway.config import CacheConfig
from gateway.oauth.device import code_hash
from gateway.oauth.tokens import new_family, new_grant_id, new_refresh_token, refresh_token_of
from gateway.store.base import Owner
from gateway.store.factory import open_oauth_store, open_store

BRAND, PA, USER = "acme", "https://pa.example", "user-42"

async def main(url, now, grant_id, token):
    store = open_store(CacheConfig(url=url), clock=lambda: now)
    oauth = open_oauth_store(store)
    grant = await oauth.get_grant(BRAND, grant_id, now)
    presented, family = refresh_token_of(token)
    rotated = await oauth.rotate_refresh(BRAND, presented, new_refresh_token(grant_id, family)[1], now)
    listed = [found.grant_id for found in await oauth.grants_of_user(BRAND, USER, now)]
    hank = Owner(BRAND, PA, "hank")
    found = await oauth.authorization_by_user_code(BRAND, "UC-hank", now)
    approved = await oauth.approve(BRAND, found.device_hash, USER, ("orders:read",), now)
    refresh = new_refresh_token(new_grant_id(), new_family())[1]
    polled = await oauth.poll(BRAND, code_hash("dc-hank"), hank.digest, now, refresh=refresh, grant_ttl=60)
    await store.close()
    print(json.dumps({
        "scopes": list(grant.scopes), "rotated": rotated.outcome.value, "listed": listed,
        "approved": approved, "polled": polled.outcome.value,
    }))

asyncio.run(main(sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]))
"""


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return previous_release(tmp_path_factory.mktemp("oauth-upgrade"))


@pytest.fixture
async def pipe(redis_url: str) -> AsyncIterator[RedisPipe]:
    opened = RedisPipe(RedisAddress.from_url(redis_url))
    yield opened
    await opened.close()


def tagged_id(grant_id: str) -> bool:
    return "{" in store_keys.grant_key(BRAND, grant_id)


async def redeem(oauth: RedisOAuthStore, name: str, now: float) -> tuple[PollOutcome, str]:
    """This release's token endpoint polling ``name``'s device code: the outcome, and the grant id drawn."""
    owner = Owner(BRAND, PA, name)
    grant_id = oauth.new_grant_id(owner.digest)
    refresh = new_refresh_token(grant_id, new_family())[1]
    result = await oauth.poll(
        BRAND, code_hash(f"dc-{name}"), owner.digest, now, refresh=refresh, grant_ttl=3600
    )
    return result.outcome, grant_id


@pytest.mark.parametrize("tagged", [True, False], ids=["tagged", "previous"])
async def test_issue20_the_previous_releases_oauth_records_serve_this_release(
    previous: Path, redis_url: str, pipe: RedisPipe, clock: ManualClock, tagged: bool
) -> None:
    written = json.loads(await run_release(previous, _WRITER, redis_url, repr(START)))
    clock.now = START + 5
    now = clock()
    oauth = RedisOAuthStore(pipe, clock=clock, tagged=tagged)

    # §5.4 a refresh token the previous release issued rotates here.
    alice_grant, alice_token = written["alice"]
    assert not tagged_id(alice_grant)
    presented, family = refresh_token_of(alice_token)
    assert await oauth.grant_of_refresh(BRAND, presented, now) == alice_grant
    rotated = await oauth.rotate_refresh(BRAND, presented, new_refresh_token(alice_grant, family)[1], now)
    assert rotated.outcome is RefreshOutcome.ROTATED

    # RFC 9700 §4.14.2: the token its rotation spent is reuse, and revokes the grant.
    erin_grant, spent, current = written["erin"]
    presented, family = refresh_token_of(spent)
    reused = await oauth.rotate_refresh(BRAND, presented, new_refresh_token(erin_grant, family)[1], now)
    assert reused.outcome is RefreshOutcome.REUSED
    assert await oauth.get_grant(BRAND, erin_grant, now) is None
    after = await oauth.rotate_refresh(BRAND, refresh_token_of(current)[0], presented, now)
    assert after.outcome is RefreshOutcome.INVALID

    # §5.3 an approval it recorded is redeemed here; a pending one is approved and redeemed here.
    outcome, carol_grant = await redeem(oauth, "carol", now)
    assert outcome is PollOutcome.ISSUED
    assert tagged_id(carol_grant) is tagged
    dave = await oauth.authorization_by_user_code(BRAND, "UC-dave", now)
    assert dave is not None
    assert await oauth.approve(BRAND, dave, USER, ("orders:read",), now)
    outcome, dave_grant = await redeem(oauth, "dave", now)
    assert outcome is PollOutcome.ISSUED
    live = await oauth.live_grant_of(BRAND, USER, dave.owner_digest, now)
    assert live is not None
    assert live.grant_id == dave_grant

    # §5.3 one live grant per (user, agent, sub) across layouts: a new approval supersedes its grant.
    ivy = Owner(BRAND, PA, "ivy")
    again = DeviceAuthorization(
        code_hash("dc-ivy-again"), "UC-ivy-again", BRAND, PA, ivy.digest, ("orders:read",), now + 600, 5
    )
    assert await oauth.create_authorization(again)
    assert await oauth.approve(BRAND, again, USER, ("orders:read",), now)
    ivy_grant = oauth.new_grant_id(ivy.digest)
    refresh = new_refresh_token(ivy_grant, new_family())[1]
    result = await oauth.poll(BRAND, again.device_hash, ivy.digest, now, refresh=refresh, grant_ttl=3600)
    assert (result.outcome, result.superseded) == (PollOutcome.ISSUED, True)
    assert await oauth.get_grant(BRAND, written["ivy"][0], now) is None
    live = await oauth.live_grant_of(BRAND, USER, ivy.digest, now)
    assert live is not None
    assert live.grant_id == ivy_grant

    # Revocation, erasure of a person (its grants), then of the Brand user (theirs, and an approval).
    assert await oauth.revoke_grant(BRAND, alice_grant)
    bob = Owner(BRAND, PA, "bob")
    (bobs,) = await oauth.grants_of_owner(BRAND, bob.digest, now)
    assert bobs.grant_id == written["bob"][0]
    assert await oauth.revoke_grant(BRAND, bobs.grant_id)
    assert await oauth.grants_of_owner(BRAND, bob.digest, now) == []
    users = await oauth.grants_of_user(BRAND, USER, now)
    assert sorted(grant.grant_id for grant in users) == sorted([carol_grant, dave_grant, ivy_grant])
    assert await oauth.deny_authorizations_of_user(BRAND, USER, now) == 1
    assert (await redeem(oauth, "frank", now))[0] is PollOutcome.ACCESS_DENIED
    for grant in users:
        assert await oauth.revoke_grant(BRAND, grant.grant_id)
    assert await oauth.grants_of_user(BRAND, USER, now) == []


async def test_issue20_the_previous_release_reads_what_this_one_writes_in_the_previous_layout(
    previous: Path, redis_url: str, pipe: RedisPipe, clock: ManualClock
) -> None:
    oauth = RedisOAuthStore(pipe, clock=clock, tagged=False)
    now = clock()
    gina = Owner(BRAND, PA, "gina")
    authorization = DeviceAuthorization(
        code_hash("dc-gina"), "UC-gina", BRAND, PA, gina.digest, ("orders:read",), now + 600, 5
    )
    assert await oauth.create_authorization(authorization)
    assert await oauth.approve(BRAND, authorization, USER, ("orders:read",), now)
    grant_id, family = oauth.new_grant_id(gina.digest), new_family()
    assert not tagged_id(grant_id)
    issued = new_refresh_token(grant_id, family)[1]
    result = await oauth.poll(BRAND, code_hash("dc-gina"), gina.digest, now, refresh=issued, grant_ttl=3600)
    assert result.outcome is PollOutcome.ISSUED
    token, rotated_to = new_refresh_token(grant_id, family)
    assert (await oauth.rotate_refresh(BRAND, issued, rotated_to, now)).outcome is RefreshOutcome.ROTATED
    hank = Owner(BRAND, PA, "hank")
    hanks = DeviceAuthorization(
        code_hash("dc-hank"), "UC-hank", BRAND, PA, hank.digest, ("orders:read",), now + 600, 5
    )
    assert await oauth.create_authorization(hanks)
    read = json.loads(await run_release(previous, _READER, redis_url, repr(now), grant_id, token))
    assert read == {
        "scopes": ["orders:read"],
        "rotated": "rotated",
        "listed": [grant_id],
        "approved": True,
        "polled": "issued",
    }
