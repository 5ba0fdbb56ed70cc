"""§6 limits charged inside ``begin_turn`` (the fused path of ``message:send``), on both backends.

The counters are the rate limiter's own: the store and the limiter beside it
(:func:`open_rate_limiter`) share keys, arithmetic and clock, so a charge on one path is
seen by the other. Time is a :class:`~tests.support.pa.ManualClock` that only moves when a test says so.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from gateway.store import ConversationStore, Owner, TurnStatus
from gateway.store import keys as store_keys
from gateway.store.gcra import GCRA_LUA, Hit, Rule
from gateway.store.limits import _HIT_ALL, RateLimiter, open_rate_limiter
from gateway.store.redis import _CONTINUE, _OPEN, RedisStore
from tests.support.commands import recorded_commands
from tests.support.pa import ManualClock

ALICE = Owner("acme", "https://pa.example", "alice")
AGENT = Hit("pact:acme:rl:per_agent:a", Rule(rate=1, burst=3))
USER = Hit("pact:acme:rl:per_user:u", Rule(rate=1, burst=1))


@pytest.fixture
def limiter(store: ConversationStore) -> RateLimiter:
    return open_rate_limiter(store)


async def opened(store: ConversationStore, context_id: str = "ctx-1") -> None:
    await store.begin_turn(ALICE, None, "m0", "hello", context_id)
    await store.complete_turn(ALICE, context_id, "m0", b"r0", close=False)


def test_every_script_that_charges_runs_the_one_gcra_snippet() -> None:
    """String composition: the separate check and both begin-turn scripts share the arithmetic verbatim."""
    for script in (_HIT_ALL, _OPEN, _CONTINUE):
        assert script.source.startswith(GCRA_LUA)


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
    await opened(redis_store)
    await redis_store.begin_turn(ALICE, "ctx-1", "m1", "x", "u", limits=[USER])
    before = await redis_client.get(USER.key)
    refused = await redis_store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[AGENT, USER])
    assert refused.waits == (0.0, 1.0)
    refused = await redis_store.begin_turn(ALICE, None, "m3", "hi", "ctx-3", limits=[AGENT, USER])
    assert refused.status is TurnStatus.RATE_LIMITED
    conversation = store_keys.conv_key("acme", "ctx-1")
    assert await redis_client.hexists(conversation, store_keys.message_digest("m2")) == 0
    assert await redis_client.exists(store_keys.conv_key("acme", "ctx-3")) == 0
    first = store_keys.first_key("acme", ALICE.digest_bytes, store_keys.message_digest("m3"))
    assert await redis_client.exists(first) == 0
    assert await redis_client.get(USER.key) == before
    assert await redis_client.exists(AGENT.key) == 0


async def test_s6_fused_charge_is_all_or_nothing_across_both_limits(
    store: ConversationStore, limiter: RateLimiter, clock: ManualClock
) -> None:
    """Refused by the per-user limit, the turn charges the personal agent's budget nothing either."""
    await opened(store)
    both = [AGENT, USER]
    assert (await store.begin_turn(ALICE, "ctx-1", "m1", "x", "u", limits=both)).status is TurnStatus.NEW
    for attempt in range(5):
        claim = await store.begin_turn(ALICE, "ctx-1", f"m-refused-{attempt}", "x", "u", limits=both)
        assert (claim.status, claim.waits) == (TurnStatus.RATE_LIMITED, (0.0, 1.0))
    # The agent's burst of 3 had one use: two more fit (other users, through the separate path)...
    other_users = [Hit(f"pact:acme:rl:per_user:{n}", USER.rule) for n in range(3)]
    assert await limiter.hit_all([AGENT, other_users[0]]) == [0.0, 0.0]
    assert await limiter.hit_all([AGENT, other_users[1]]) == [0.0, 0.0]
    # ...and the next is refused by the agent's limit, charging the fresh user nothing.
    assert await limiter.hit_all([AGENT, other_users[2]]) == [1.0, 0.0]
    assert await limiter.hit_all([other_users[2]]) == [0.0]
    # The separate path's charges count in the fused one: the agent's burst is used up there too.
    claim = await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[AGENT])
    assert (claim.status, claim.waits) == (TurnStatus.RATE_LIMITED, (1.0,))
    clock.now += 1
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[AGENT])).status is TurnStatus.NEW


async def test_s6_a_refusal_wins_over_every_turn_verdict(store: ConversationStore) -> None:
    """A rate-limited request learns nothing about the context: not even a stored reply."""
    await opened(store)
    assert (await store.begin_turn(ALICE, "ctx-1", "m1", "x", "u", limits=[USER])).status is TurnStatus.NEW
    for context_id, message_id in (("ctx-1", "m0"), ("nope", "m5"), (None, "m0")):
        claim = await store.begin_turn(ALICE, context_id, message_id, "hello", "ctx-9", limits=[USER])
        assert claim.status is TurnStatus.RATE_LIMITED


async def test_redis_fused_begin_is_one_round_trip(redis_store: RedisStore, clock: ManualClock) -> None:
    await redis_store.begin_turn(ALICE, None, "warm", "hello", "ctx-0", limits=[AGENT])  # loads the scripts
    await redis_store.begin_turn(ALICE, "ctx-0", "warm-2", "x", "u", limits=[AGENT])
    with recorded_commands(redis_store.redis) as first:
        await redis_store.begin_turn(ALICE, None, "m1", "hello", "ctx-1", limits=[AGENT, USER])
    with recorded_commands(redis_store.redis) as refused:
        await redis_store.begin_turn(ALICE, "ctx-1", "m2", "x", "u", limits=[AGENT, USER])
    assert first == refused == ["EVALSHA"]
