"""Issue 20: in the tagged layout every script and command the Redis OAuth store sends touches keys of one
Redis Cluster slot (gateway/store/slots.py), through a whole Delegated flow (§5.3 device authorization,
consent, poll, token, §5.4 refresh with reuse detection, revocation, erasure by user and by owner).

The store runs on the test Redis through a pipe that records what it sends before sending it, so each
outcome below is the real store's. The keys a script builds from its arguments as it runs are checked
by Redis itself: a server in cluster mode refuses a script declared with a ``#!lua`` line that touches
a key of another slot than its declared ones, so the flow also runs on such a server (one node, every
slot). ``reads_previous`` is off, as on a Redis Cluster: the previous layout's keys are named by no
script there. The previous layout's own flow crosses slots, which the tests show both ways (and why
``cache.key_layout: previous`` is refused on a cluster).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from gateway.redis_url import RedisAddress
from gateway.store import Owner, oauth_redis
from gateway.store import keys as store_keys
from gateway.store.base import StoreError
from gateway.store.oauth import (
    AuthorizationStatus,
    ConsentSession,
    DeviceAuthorization,
    LandingRecord,
    PollOutcome,
    RefreshOutcome,
    RefreshToken,
)
from gateway.store.oauth_redis import RedisOAuthStore
from gateway.store.redis_pipe import Arg, RedisPipe, Script
from gateway.store.slots import key_slot, tag
from tests.support.pa import ManualClock
from tests.support.redis_servers import RedisServers, free_port, wait_for

BRAND = "acme"
PA = "https://pa.example"
ALICE = Owner(BRAND, PA, "alice")
BOB = Owner(BRAND, PA, "bob")
USER = "user-42"

_SCRIPT_NAMES = {id(value): name for name, value in vars(oauth_redis).items() if isinstance(value, Script)}

_KEYED = {"GET", "HGETALL", "HMGET", "SMEMBERS", "SREM", "ZRANGEBYSCORE"}
"""Commands the store sends whose first argument is their only key (``DEL`` takes keys alone)."""


class RecordingPipe(RedisPipe):
    """The real pipe, noting each script's or command's name and keys before sending it."""

    def __init__(self, url: str) -> None:
        super().__init__(RedisAddress.from_url(url))
        self.sent: list[tuple[str, list[bytes]]] = []

    async def execute(
        self, *args: Arg, replicated: bool = False, asking: bool = False, idempotent: bool = False
    ) -> Any:
        name = str(args[0])
        if name in {"EVALSHA", "EVAL"}:  # how run() sends a script, which it noted
            return await super().execute(*args, replicated=replicated, asking=asking, idempotent=idempotent)
        assert name in _KEYED or name == "DEL", f"a command this test does not know the keys of: {name}"
        keys = args[1:] if name == "DEL" else args[1:2]
        self.sent.append((name, [_raw(key) for key in keys]))
        return await super().execute(*args, replicated=replicated, asking=asking, idempotent=idempotent)

    async def run(
        self,
        script: Script,
        keys: Sequence[str | bytes],
        args: Sequence[Arg],
        *,
        replicated: bool = False,
        asking: bool = False,
        idempotent: bool = False,
    ) -> Any:
        self.sent.append((_SCRIPT_NAMES[id(script)], [_raw(key) for key in keys]))
        return await super().run(
            script, keys, args, replicated=replicated, asking=asking, idempotent=idempotent
        )


def _raw(key: Arg) -> bytes:
    return key if isinstance(key, bytes) else str(key).encode()


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def refresh_token(grant_id: str, name: str) -> RefreshToken:
    return RefreshToken(grant_id, sha(f"family {grant_id}"), sha(name))


@pytest.fixture
async def pipe(redis_url: str) -> AsyncIterator[RecordingPipe]:
    recording = RecordingPipe(redis_url)
    yield recording
    await recording.close()


async def delegated_flow(oauth: RedisOAuthStore, clock: ManualClock) -> None:
    """Everything the §5 endpoints, the grants CLI and erasure ask of the store, with their outcomes."""

    def authorization(name: str, owner: Owner = ALICE) -> DeviceAuthorization:
        return DeviceAuthorization(
            sha(f"device {name}"), f"UC-{name}", BRAND, PA, owner.digest, ("orders:read",), clock() + 600, 5
        )

    async def redeem(authorization: DeviceAuthorization, grant_id: str) -> PollOutcome:
        result = await oauth.poll(
            BRAND,
            authorization.device_hash,
            authorization.owner_digest,
            clock(),
            refresh=refresh_token(grant_id, f"{grant_id} 1"),
            grant_ttl=3600,
        )
        return result.outcome

    # §5.3: the device authorization, the consent page and its approval.
    first = authorization("first")
    assert await oauth.create_authorization(first)
    found = await oauth.authorization_by_user_code(BRAND, first.user_code, clock())
    assert found == first
    first_grant = oauth.new_grant_id(ALICE.digest)
    assert await redeem(first, first_grant) is PollOutcome.AUTHORIZATION_PENDING
    await oauth.put_consent_session(
        BRAND, sha("session"), ConsentSession(first.device_hash, USER, clock() + 300)
    )
    assert await oauth.take_consent_session(BRAND, sha("session"), clock()) is not None
    assert await oauth.use_once(BRAND, sha("assertion jti"), 300)
    assert await oauth.approve(BRAND, first, USER, ("orders:read",), clock())
    landing = LandingRecord("approved", ("orders:read",), (), (), clock() + 60)
    await oauth.put_landing(BRAND, sha("landing"), landing)
    assert await oauth.take_landing(BRAND, sha("landing"), clock()) == landing
    clock.advance(5)
    assert await redeem(first, first_grant) is PollOutcome.ISSUED

    # A denied one.
    denied = authorization("denied")
    assert await oauth.create_authorization(denied)
    assert await oauth.deny(BRAND, denied, clock())
    assert await redeem(denied, oauth.new_grant_id(ALICE.digest)) is PollOutcome.ACCESS_DENIED

    # §5.3 step-up: a second approval supersedes the first grant in the same step.
    second = authorization("second")
    assert await oauth.create_authorization(second)
    assert await oauth.approve(BRAND, second, USER, ("orders:read",), clock())
    second_grant = oauth.new_grant_id(ALICE.digest)
    assert await redeem(second, second_grant) is PollOutcome.ISSUED
    assert await oauth.get_grant(BRAND, first_grant, clock()) is None
    live = await oauth.live_grant_of(BRAND, USER, ALICE.digest, clock())
    assert live is not None
    assert live.grant_id == second_grant

    # §5.4 refresh: rotation, a retry within the grace, then reuse detection (RFC 9700 §4.14.2).
    one, two = refresh_token(second_grant, f"{second_grant} 1"), refresh_token(second_grant, "2")
    assert await oauth.grant_of_refresh(BRAND, one, clock()) == second_grant
    rotated = await oauth.rotate_refresh(BRAND, one, two, clock(), grace=10, answer=b"sealed")
    assert rotated.outcome is RefreshOutcome.ROTATED
    retried = await oauth.rotate_refresh(BRAND, one, refresh_token(second_grant, "3"), clock())
    assert retried.outcome is RefreshOutcome.RETRIED
    clock.advance(11)
    reused = await oauth.rotate_refresh(BRAND, one, refresh_token(second_grant, "4"), clock())
    assert reused.outcome is RefreshOutcome.REUSED
    assert await oauth.get_grant(BRAND, second_grant, clock()) is None

    # Revocation, and erasure by Brand user (``grants revoke``) and by person (gateway/ops/erasure.py).
    bobs = authorization("bobs", BOB)
    assert await oauth.create_authorization(bobs)
    assert await oauth.approve(BRAND, bobs, USER, ("orders:read",), clock())
    bobs_grant = oauth.new_grant_id(BOB.digest)
    assert await redeem(bobs, bobs_grant) is PollOutcome.ISSUED
    third = authorization("third")
    assert await oauth.create_authorization(third)
    assert await oauth.approve(BRAND, third, USER, ("orders:read",), clock())
    third_grant = oauth.new_grant_id(ALICE.digest)
    assert await redeem(third, third_grant) is PollOutcome.ISSUED
    assert await oauth.revoke_grant(BRAND, third_grant)
    waiting = authorization("waiting", BOB)
    assert await oauth.create_authorization(waiting)
    assert await oauth.approve(BRAND, waiting, USER, ("orders:read",), clock())
    assert [grant.grant_id for grant in await oauth.grants_of_user(BRAND, USER, clock())] == [bobs_grant]
    assert await oauth.deny_authorizations_of_user(BRAND, USER, clock()) == 1
    assert await oauth.revoke_grant(BRAND, bobs_grant)
    pending = authorization("pending")
    assert await oauth.create_authorization(pending)
    assert await oauth.grants_of_owner(BRAND, ALICE.digest, clock()) == []
    assert await oauth.deny_authorizations_of_owner(BRAND, ALICE.digest, clock()) == 1
    after = await oauth.authorization_by_user_code(BRAND, pending.user_code, clock())
    assert after is not None
    assert after.status is AuthorizationStatus.DENIED


def cross_slot(sent: Sequence[tuple[str, list[bytes]]]) -> list[tuple[str, set[int]]]:
    """The scripts and commands whose keys are of more than one slot (``""``: no key, skipped)."""
    spread = [(name, {key_slot(key) for key in keys if key}) for name, keys in sent]
    return [(name, slots) for name, slots in spread if len(slots) > 1]


async def test_issue20_every_oauth_script_and_command_touches_one_slot_in_the_tagged_layout(
    pipe: RecordingPipe, clock: ManualClock
) -> None:
    oauth = RedisOAuthStore(pipe, clock=clock, tagged=True, reads_previous=False)
    await delegated_flow(oauth, clock)
    assert cross_slot(pipe.sent) == []
    # Every script of the tagged layout was sent (the previous layout's creation is its own).
    assert {name for name, _ in pipe.sent} >= set(_SCRIPT_NAMES.values()) - {"_CREATE"}


async def test_issue20_the_previous_layout_crosses_slots(pipe: RecordingPipe, clock: ManualClock) -> None:
    """What the tagged layout is for: the previous release's scripts touch keys of several slots."""
    oauth = RedisOAuthStore(pipe, clock=clock, tagged=False)
    await delegated_flow(oauth, clock)
    assert {name for name, _ in cross_slot(pipe.sent)} >= {"_CREATE", "_SETTLE", "_POLL"}


async def test_issue20_a_grant_is_kept_in_its_owners_slot_and_a_previous_id_where_it_was(
    pipe: RecordingPipe,
) -> None:
    """The begin-turn script checks a delegated turn's grant (§5.5) in the slot of the owner's
    conversations, which carry the same tag; an id of the previous release keeps its key."""
    tagged = RedisOAuthStore(pipe).new_grant_id(ALICE.digest)
    owner_slot = key_slot(tag(store_keys.owner_tag(ALICE.digest)))
    assert key_slot(store_keys.grant_key(BRAND, tagged)) == owner_slot
    assert key_slot(store_keys.grace_key(BRAND, tagged)) == owner_slot
    previous = RedisOAuthStore(pipe, tagged=False).new_grant_id(ALICE.digest)
    assert store_keys.grant_key(BRAND, previous) == f"pact:{BRAND}:grant:{previous}"
    assert store_keys.grace_key(BRAND, previous) == f"pact:{BRAND}:oauth:grace:{previous}"


class StrictScriptPipe(RedisPipe):
    """The real pipe, sending each script with a ``#!lua`` line: a Redis in cluster mode then refuses
    it if any key it touches, declared or built from its arguments, is of another slot."""

    async def run(
        self,
        script: Script,
        keys: Sequence[str | bytes],
        args: Sequence[Arg],
        *,
        replicated: bool = False,
        asking: bool = False,
        idempotent: bool = False,
    ) -> Any:
        return await super().run(
            Script("#!lua\n" + script.source),
            keys,
            args,
            replicated=replicated,
            asking=asking,
            idempotent=idempotent,
        )


@pytest.fixture
async def cluster_node(redis_servers: RedisServers) -> AsyncIterator[str]:
    """A one-node Redis Cluster serving every slot: its URL."""
    # The bus port is the client port + 10000 unless named: a free one, as a high client port has none.
    server = await redis_servers.server(
        "cluster",
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-port",
        str(free_port()),
    )
    steer = RedisPipe(RedisAddress.from_url(server.url()))
    try:
        await steer.execute("CLUSTER", "ADDSLOTSRANGE", 0, 16383)

        async def serving() -> bool:
            return b"cluster_state:ok" in await steer.execute("CLUSTER", "INFO")

        await wait_for(serving, 15, "the one-node cluster serving every slot")
        yield server.url()
    finally:
        await steer.close()


async def test_issue20_redis_cluster_accepts_every_oauth_script_of_the_tagged_layout(
    cluster_node: str, clock: ManualClock
) -> None:
    pipe = StrictScriptPipe(RedisAddress.from_url(cluster_node))
    try:
        await delegated_flow(RedisOAuthStore(pipe, clock=clock, tagged=True, reads_previous=False), clock)
    finally:
        await pipe.close()


async def test_issue20_redis_cluster_refuses_the_previous_layouts_scripts(
    cluster_node: str, clock: ManualClock
) -> None:
    """The check above can fail: the previous layout's device authorization spans three slots."""
    pipe = StrictScriptPipe(RedisAddress.from_url(cluster_node))
    try:
        with pytest.raises(StoreError):
            await delegated_flow(RedisOAuthStore(pipe, clock=clock, tagged=False), clock)
    finally:
        await pipe.close()
