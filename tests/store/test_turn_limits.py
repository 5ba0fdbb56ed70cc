"""§6 limits charged inside ``begin_turn`` (the fused path of ``message:send``), on both backends.

The counters are the rate limiter's own: the store and the limiter beside it
(:func:`open_rate_limiter`) share keys, arithmetic and clock, so a charge on one path is
seen by the other. Time is a :class:`~tests.support.pa.ManualClock` that only moves when a test says so.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from gateway.config import CacheConfig, KeyLayoutName
from gateway.store import ConversationStore, Owner, TurnStatus
from gateway.store import keys as store_keys
from gateway.store.base import StoreError
from gateway.store.gcra import GCRA_LUA, Hit, Rule
from gateway.store.limits import RateLimiter, open_rate_limiter
from gateway.store.memory import MemoryStore
from gateway.store.redis import _CONTINUE, _OPEN, CHARGE, RedisStore
from gateway.store.slots import NO_KEY_LUA
from tests.support.commands import recorded_rounds
from tests.support.pa import ManualClock
from tests.support.redis_layout import tag_of

ALICE = Owner("acme", "https://pa.example", "alice")
# As gateway.ops.limits names them in the tagged layout: the per-person counter under its owner's tag
# (it rides in the owner's turn script), the per-agent one under its own (charged beside it).
AGENT = Hit(store_keys.limit_key("acme", "per_agent", "a" * 32, "a" * 8), Rule(rate=1, burst=3))
USER = Hit(
    store_keys.limit_key("acme", "per_user", "u", store_keys.owner_tag(ALICE.digest)), Rule(rate=1, burst=1)
)


@pytest.fixture
def limiter(store: ConversationStore) -> RateLimiter:
    return open_rate_limiter(store)


async def opened(store: ConversationStore, context_id: str = "ctx-1") -> None:
    await store.begin_turn(ALICE, None, "m0", "hello", context_id)
    await store.complete_turn(ALICE, context_id, "m0", b"r0", close=False)


def test_every_script_that_charges_runs_the_one_gcra_snippet() -> None:
    """String composition: the separate check and both begin-turn scripts share the arithmetic verbatim
    (the begin-turn scripts after the placeholder prelude every one of them runs first)."""
    assert CHARGE.source.startswith(GCRA_LUA)
    for script in (_OPEN, _CONTINUE):
        assert script.source.startswith(NO_KEY_LUA + GCRA_LUA)


async def test_s6_refusal_claims_nothing_and_the_retry_after_the_wait_runs(
    store: ConversationStore, clock: ManualClock
) -> None:
    await opened(store)
    assert (await store.begin_turn(ALICE, "ctx-1", "m1", "x", "u", limits=[USER])).status is TurnStatus.NEW
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    refused = await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[USER])
    assert (refused.status, refused.waits, refused.context_id) == (TurnStatus.RATE_LIMITED, (1.0,), "")
    clock.now += 0.5
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[USER])).waits == (0.5,)
    clock.now += 0.5
    # No in-flight marker was left by the refusals: the retry runs the turn, not IN_FLIGHT.
    retry = await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[USER])
    assert (retry.status, retry.new_conversation) == (TurnStatus.NEW, False)


async def test_s6_refused_first_message_opens_nothing(store: ConversationStore, clock: ManualClock) -> None:
    await opened(store)
    assert (await store.begin_turn(ALICE, "ctx-1", "m1", "x", "u", limits=[USER])).status is TurnStatus.NEW
    refused = await store.begin_turn(ALICE, None, "m9", "hi", "ctx-refused", limits=[USER])
    assert refused.status is TurnStatus.RATE_LIMITED
    assert (await store.begin_turn(ALICE, "ctx-refused", "m8", "x", "u")).status is TurnStatus.UNKNOWN_CONTEXT
    clock.now += 1
    # No first-message record either: the retry opens its own conversation, it does not find ctx-refused.
    retry = await store.begin_turn(ALICE, None, "m9", "hi", "ctx-2", limits=[USER])
    assert (retry.status, retry.context_id, retry.new_conversation) == (TurnStatus.NEW, "ctx-2", True)


async def test_s6_redis_refusal_leaves_no_marker_record_or_counter(
    redis_store: RedisStore, redis_client: aioredis.Redis, clock: ManualClock
) -> None:
    """Refused by the per-person limit: nothing claimed, recorded or charged; the per-agent counter,
    charged beside the turn's script in its own slot, is given its charge back."""
    await opened(redis_store)
    await redis_store.begin_turn(ALICE, "ctx-1", "m1", "x", "u", limits=[USER])
    before = await redis_client.get(USER.key)
    refused = await redis_store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[AGENT, USER])
    assert refused.waits == (0.0, 1.0)
    refused = await redis_store.begin_turn(ALICE, None, "m3", "hi", "ctx-3", limits=[AGENT, USER])
    assert refused.status is TurnStatus.RATE_LIMITED
    tag = tag_of(ALICE)
    conversation = store_keys.conv_key("acme", "ctx-1", tag)
    assert await redis_client.hexists(conversation, store_keys.message_digest("m2")) == 0
    assert await redis_client.exists(store_keys.conv_key("acme", "ctx-3", tag)) == 0
    first = store_keys.first_key("acme", ALICE.digest_bytes, store_keys.message_digest("m3"), tag)
    assert await redis_client.exists(first) == 0
    assert await redis_client.get(USER.key) == before
    assert await redis_client.exists(AGENT.key) == 0


@pytest.mark.parametrize("layout", ["tagged", "previous"])
async def test_s6_fused_charge_is_all_or_nothing_across_both_limits(
    cache_url: str, layout: KeyLayoutName, clock: ManualClock
) -> None:
    """Refused by the per-user limit, the turn charges the personal agent's budget nothing either: in
    one step in memory and in the previous layout (every counter in the turn's script), by a refund
    in the tagged one (the per-agent counter is in a slot of its own, charged beside the script)."""
    if layout == "previous" and cache_url.startswith("redis+cluster"):
        pytest.skip(
            "a Redis Cluster takes the tagged layout only (cache.key_layout: previous is refused there)"
        )
    config = CacheConfig(url=cache_url, key_layout=layout)
    store: ConversationStore = (
        MemoryStore(config, clock=clock) if cache_url == "memory://" else RedisStore(config, clock=clock)
    )
    limiter = open_rate_limiter(store)
    tagged = layout == "tagged"
    agent = Hit(store_keys.limit_key("acme", "per_agent", "a" * 32, "a" * 8 if tagged else ""), AGENT.rule)
    user = Hit(store_keys.limit_key("acme", "per_user", "u", tag_of(ALICE) if tagged else ""), USER.rule)
    try:
        await opened(store)
        both = [agent, user]
        assert (await store.begin_turn(ALICE, "ctx-1", "m1", "x", "u", limits=both)).status is TurnStatus.NEW
        for attempt in range(5):
            claim = await store.begin_turn(ALICE, "ctx-1", f"m-refused-{attempt}", "x", "u", limits=both)
            assert (claim.status, claim.waits) == (TurnStatus.RATE_LIMITED, (0.0, 1.0))
        # The agent's burst of 3 had one use: two more fit (other users, through the separate path)...
        other_users = [
            Hit(store_keys.limit_key("acme", "per_user", f"{n}", f"{n}" * 8 if tagged else ""), user.rule)
            for n in range(3)
        ]
        assert await limiter.hit_all([agent, other_users[0]]) == [0.0, 0.0]
        assert await limiter.hit_all([agent, other_users[1]]) == [0.0, 0.0]
        # ...and the next is refused by the agent's limit, charging the fresh user nothing.
        assert await limiter.hit_all([agent, other_users[2]]) == [1.0, 0.0]
        assert await limiter.hit_all([other_users[2]]) == [0.0]
        # The separate path's charges count in the fused one: the agent's burst is used up there too.
        claim = await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[agent])
        assert (claim.status, claim.waits) == (TurnStatus.RATE_LIMITED, (1.0,))
        clock.now += 1
        assert (
            await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[agent])
        ).status is TurnStatus.NEW
    finally:
        await store.close()


async def test_s6_redis_tagged_the_per_agent_refusal_releases_the_claim(
    slot_bound_store: RedisStore, redis_client: aioredis.Redis, clock: ManualClock
) -> None:
    """§6 per personal agent, in its own slot: when it refuses, the turn the script claimed beside it
    is released before the 429 (no marker, no conversation, no first-message record), and the
    per-person counter's charge given back; the retry after the wait runs the turn."""
    redis_store = slot_bound_store
    await opened(redis_store)
    agent = Hit(AGENT.key, Rule(rate=1, burst=1))
    assert (
        await redis_store.begin_turn(ALICE, "ctx-1", "m1", "x", "u", limits=[agent])
    ).status is TurnStatus.NEW
    refused = await redis_store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[agent, USER])
    assert (refused.status, refused.waits) == (TurnStatus.RATE_LIMITED, (1.0, 0.0))
    tag = tag_of(ALICE)
    assert (
        await redis_client.hexists(store_keys.conv_key("acme", "ctx-1", tag), store_keys.message_digest("m2"))
        == 0
    )
    assert await redis_client.exists(USER.key) == 0
    opening = await redis_store.begin_turn(ALICE, None, "m3", "hi", "ctx-3", limits=[agent])
    assert opening.status is TurnStatus.RATE_LIMITED
    assert await redis_client.exists(store_keys.conv_key("acme", "ctx-3", tag)) == 0
    first = store_keys.first_key("acme", ALICE.digest_bytes, store_keys.message_digest("m3"), tag)
    assert await redis_client.exists(first) == 0
    clock.now += 1
    retry = await redis_store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[agent])
    assert (retry.status, retry.new_conversation) == (TurnStatus.NEW, False)


async def test_s6_a_refusal_wins_over_every_turn_verdict(store: ConversationStore) -> None:
    """A rate-limited request learns nothing about the context: not even a stored reply."""
    await opened(store)
    assert (await store.begin_turn(ALICE, "ctx-1", "m1", "x", "u", limits=[USER])).status is TurnStatus.NEW
    for context_id, message_id in (("ctx-1", "m0"), ("nope", "m5"), (None, "m0")):
        claim = await store.begin_turn(ALICE, context_id, message_id, "hello", "ctx-9", limits=[USER])
        assert claim.status is TurnStatus.RATE_LIMITED


@pytest.mark.parametrize(("slot_bound", "calls"), [(False, ["EVALSHA"]), (True, ["EVALSHA", "EVALSHA"])])
async def test_redis_fused_begin_is_one_round_trip(
    redis_url: str, clock: ManualClock, slot_bound: bool, calls: list[str]
) -> None:
    """On one Redis both counters ride in the turn's script: one call. Where a script keeps to one
    slot (a Redis Cluster), the per-person counter rides in it and the per-agent one's script is sent
    with it: two calls, one round trip. Accepted or refused alike."""
    redis_store = RedisStore(CacheConfig(url=redis_url), clock=clock, slot_bound=slot_bound)
    try:
        # The first two turns load the scripts.
        await redis_store.begin_turn(ALICE, None, "warm", "hello", "ctx-0", limits=[AGENT])
        await redis_store.begin_turn(ALICE, "ctx-0", "warm-2", "x", "u", limits=[AGENT])
        with recorded_rounds(redis_store.redis) as first:
            await redis_store.begin_turn(ALICE, None, "m1", "hello", "ctx-1", limits=[AGENT, USER])
        with recorded_rounds(redis_store.redis) as refused:
            await redis_store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[AGENT, USER])
    finally:
        await redis_store.close()
    for seen in (first, refused):
        assert (seen.rounds, seen.commands) == (1, calls)


@pytest.mark.parametrize("fail_open", [True, False])
async def test_s6_a_counter_apart_that_cannot_be_charged_is_what_fail_open_says(
    slot_bound_store: RedisStore, monkeypatch: pytest.MonkeyPatch, fail_open: bool
) -> None:
    """Issue 20: in the tagged layout the per-agent counter is in a slot of its own (on a Redis
    Cluster, maybe a node of its own). When its charge fails, ``rate_limits.fail_open`` decides as for
    any other limit: the turn is claimed and served uncounted, or it fails having claimed nothing.
    The turn's own step failing still fails it (tests/ops/test_rate_limits.py)."""

    async def node_down(*_: object) -> dict[str, int]:
        raise StoreError("redis: 127.0.0.1:7002: the node did not answer")

    monkeypatch.setattr("gateway.store.redis.charge_by_slot", node_down)
    redis_store = slot_bound_store
    limits = [AGENT, USER]
    if fail_open:
        claim = await redis_store.begin_turn(ALICE, None, "m1", "hi", "ctx-1", limits=limits, fail_open=True)
        uncounted = "redis: 127.0.0.1:7002: the node did not answer"
        assert (claim.status, claim.context_id, claim.uncounted) == (TurnStatus.NEW, "ctx-1", uncounted)
        # Claimed: the same message again is the turn still running, not a second bot call (§4.3).
        again = await redis_store.begin_turn(ALICE, None, "m1", "hi", "ctx-2", limits=[AGENT], fail_open=True)
        assert again.status is TurnStatus.IN_FLIGHT
        return
    with pytest.raises(StoreError):
        await redis_store.begin_turn(ALICE, None, "m1", "hi", "ctx-1", limits=limits)
    monkeypatch.undo()
    # The failed attempt claimed nothing and charged nothing (the per-person counter, burst 1, given back).
    claim = await redis_store.begin_turn(ALICE, None, "m1", "hi", "ctx-1", limits=limits)
    assert (claim.status, claim.uncounted) == (TurnStatus.NEW, "")
