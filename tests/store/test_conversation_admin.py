"""An owner's conversations as the operator sees them (list, close, erase), on memory and the real Redis.

Opened the way the gateway opens it (:func:`open_conversation_admin` beside the store), on the
test's :class:`ManualClock`; the HTTP API and the CLI over it are tested in tests/ops/test_admin.py
and tests/test_conversations_cli.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.config import CacheConfig
from gateway.store import ConversationStore, Owner, TurnStatus
from gateway.store import keys as store_keys
from gateway.store.admin import ConversationAdmin, ConversationInfo, Erased
from gateway.store.factory import open_adapter_state, open_conversation_admin
from gateway.store.gcra import Rule
from gateway.store.limits import open_rate_limiter
from gateway.store.memory import MemoryKeyspace, MemoryStore
from gateway.store.redis import RedisStore
from tests.store.conftest import SETTINGS
from tests.support.pa import ManualClock
from tests.support.redis_layout import tag_of

ALICE = Owner("acme", "https://pa.example", "alice")
BOB = Owner("acme", "https://pa.example", "bob")
ALICE_ELSEWHERE = Owner("globex", "https://pa.example", "alice")
CACHE = CacheConfig(**SETTINGS)
ADAPTERS = ("openai", "directline")
COUNTER = store_keys.rate_limit_key("acme", "per_user", "alice-digest")


@pytest.fixture
def admin(store: ConversationStore) -> ConversationAdmin:
    return open_conversation_admin(store, CACHE, ADAPTERS)


async def answered(store: ConversationStore, owner: Owner, context_id: str, *message_ids: str) -> None:
    """A conversation ``context_id`` opened by the first message, with every message answered."""
    first, *rest = message_ids
    opened = await store.begin_turn(owner, None, first, f"text of {first}", context_id)
    assert opened.status is TurnStatus.NEW
    await store.complete_turn(owner, context_id, first, f"reply to {first}".encode(), close=False)
    for message_id in rest:
        claim = await store.begin_turn(owner, context_id, message_id, "more", "")
        assert claim.status is TurnStatus.NEW
        await store.complete_turn(owner, context_id, message_id, b"reply", close=False)


async def test_lists_the_owners_conversations_only_oldest_first(
    store: ConversationStore, admin: ConversationAdmin, clock: ManualClock
) -> None:
    opened = clock()
    await answered(store, ALICE, "ctx-1", "m1", "m2")
    clock.advance(5)
    await answered(store, ALICE, "ctx-2", "m3")
    await store.begin_turn(ALICE, "ctx-2", "m4", "running", "")
    await answered(store, BOB, "ctx-3", "m1")
    await answered(store, ALICE_ELSEWHERE, "ctx-4", "m1")
    assert await admin.conversations(ALICE) == [
        ConversationInfo("ctx-1", opened_at=opened, turns=2, in_flight=0, closed=False),
        ConversationInfo("ctx-2", opened_at=opened + 5, turns=1, in_flight=1, closed=False),
    ]
    assert [info.context_id for info in await admin.conversations(BOB)] == ["ctx-3"]
    assert [info.context_id for info in await admin.conversations(ALICE_ELSEWHERE)] == ["ctx-4"]
    assert await admin.conversations(Owner("acme", "https://pa.example", "carol")) == []


async def test_listing_shows_closed_ones_until_they_are_forgotten(
    store: ConversationStore, admin: ConversationAdmin, clock: ManualClock
) -> None:
    await answered(store, ALICE, "ctx-idle", "m1")
    clock.advance(1)
    await store.begin_turn(ALICE, None, "m2", "bye", "ctx-ended")
    await store.complete_turn(ALICE, "ctx-ended", "m2", b"farewell", close=True)
    clock.advance(SETTINGS["conversation_ttl"])  # ctx-idle is now closed for being idle
    assert [(info.context_id, info.closed) for info in await admin.conversations(ALICE)] == [
        ("ctx-idle", True),
        ("ctx-ended", True),
    ]
    # Past its closed_ttl (and the index's slack for clocks apart), a conversation is no longer listed.
    clock.advance(SETTINGS["closed_ttl"] + 61)
    assert await admin.conversations(ALICE) == []


async def test_close_ends_the_conversation_and_keeps_its_replies(
    store: ConversationStore, admin: ConversationAdmin
) -> None:
    await answered(store, ALICE, "ctx-1", "m1")
    assert not await admin.close(BOB, "ctx-1")  # another owner's conversation is not there for Bob
    assert not await admin.close(ALICE, "no-such-context")
    assert await admin.close(ALICE, "ctx-1")
    assert await admin.close(ALICE, "ctx-1")  # closing a closed one changes nothing, and finds it
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "more", "")).status is TurnStatus.CLOSED
    replay = await store.begin_turn(ALICE, "ctx-1", "m1", "text of m1", "")
    assert (replay.status, replay.reply) == (TurnStatus.REPLAY, b"reply to m1")
    assert [info.closed for info in await admin.conversations(ALICE)] == [True]


async def test_erase_forgets_everything_of_the_owner_and_nothing_of_others(
    store: ConversationStore, admin: ConversationAdmin
) -> None:
    await answered(store, ALICE, "ctx-1", "m1", "m2")
    await answered(store, ALICE, "ctx-2", "m3")
    await answered(store, BOB, "ctx-3", "m1")
    state = open_adapter_state(store)
    for context_id in ("ctx-1", "ctx-3"):
        await state.put(store_keys.adapter_key("acme", context_id, "openai"), b"history", ttl=60)
    limiter = open_rate_limiter(store)
    rule = Rule(rate=0.001, burst=1)
    assert await limiter.hit(COUNTER, rule.rate, rule.burst) == 0

    erased = await admin.erase(ALICE, [COUNTER, store_keys.rate_limit_key("acme", "per_user", "absent")])

    # Both first messages still had their §4.3 record (m2 never had one: it named its context).
    assert erased == Erased(
        conversations=2, replies=3, in_flight=0, retry_records=2, adapter_states=1, counters=1
    )
    for context_id, message_id in (("ctx-1", "m1"), ("ctx-1", "m9"), ("ctx-2", "m3")):
        claim = await store.begin_turn(ALICE, context_id, message_id, "hello", "")
        assert claim.status is TurnStatus.UNKNOWN_CONTEXT, (context_id, message_id)
    # The first message retried without contextId finds no record: it opens a new conversation.
    retried = await store.begin_turn(ALICE, None, "m1", "text of m1", "ctx-new")
    assert (retried.status, retried.context_id) == (TurnStatus.NEW, "ctx-new")
    assert await state.get(store_keys.adapter_key("acme", "ctx-1", "openai")) is None
    assert await limiter.hit(COUNTER, rule.rate, rule.burst) == 0  # a full burst again
    assert [info.context_id for info in await admin.conversations(ALICE)] == ["ctx-new"]
    # Bob's conversation, state and replies are untouched.
    assert await state.get(store_keys.adapter_key("acme", "ctx-3", "openai")) == b"history"
    replay = await store.begin_turn(BOB, "ctx-3", "m1", "text of m1", "")
    assert (replay.status, replay.reply) == (TurnStatus.REPLAY, b"reply to m1")
    assert await admin.erase(ALICE_ELSEWHERE, []) == Erased()


async def test_a_turn_running_through_an_erasure_stores_nothing(
    store: ConversationStore, admin: ConversationAdmin
) -> None:
    claim = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    assert claim.status is TurnStatus.NEW
    assert await admin.erase(ALICE, []) == Erased(conversations=1, in_flight=1, retry_records=1)
    await store.complete_turn(ALICE, "ctx-1", "m1", b"the reply", close=False)
    assert (await store.begin_turn(ALICE, "ctx-1", "m1", "hello", "")).status is TurnStatus.UNKNOWN_CONTEXT
    assert await admin.conversations(ALICE) == []
    await store.abort_turn(ALICE, "ctx-1", "m1", new_conversation=True)  # nothing left to release


async def test_erasing_twice_finds_nothing_the_second_time(
    store: ConversationStore, admin: ConversationAdmin
) -> None:
    await answered(store, ALICE, "ctx-1", "m1")
    assert (await admin.erase(ALICE, [])).conversations == 1
    assert await admin.erase(ALICE, []) == Erased()


@pytest.fixture
async def memory_store(clock: ManualClock) -> AsyncIterator[MemoryStore]:
    store = MemoryStore(CACHE, clock=clock)
    yield store
    await store.close()


async def test_memory_index_stays_in_proportion_to_live_conversations(memory_store: MemoryStore) -> None:
    """Conversations opened and forgotten (a failed first turn each) leave the index as it grows."""
    store = memory_store
    await answered(store, ALICE, "ctx-kept", "m0")
    for n in range(200):
        await store.begin_turn(ALICE, None, f"m{n}", "hello", f"ctx-{n}")
        await store.abort_turn(ALICE, f"ctx-{n}", f"m{n}", new_conversation=True)
    index = store.keyspace.entries[ALICE.digest_bytes]
    assert len(index[2:]) // 2 <= 32
    admin = open_conversation_admin(store, CACHE, ADAPTERS)
    assert [info.context_id for info in await admin.conversations(ALICE)] == ["ctx-kept"]


def sweep_everything(store: MemoryStore) -> None:
    """One full pass of the keyspace's sweep, as the gateway runs it in the background."""
    for _ in range(MemoryKeyspace.SWEEP_PASS_TICKS):
        store.keyspace.sweep()


async def test_memory_index_is_kept_by_the_sweep_while_a_conversation_lives(
    memory_store: MemoryStore, clock: ManualClock
) -> None:
    """The index's deadline is the sweep's cue: past it, the index stays while a conversation lives."""
    store = memory_store
    admin = open_conversation_admin(store, CACHE, ADAPTERS)
    await answered(store, ALICE, "ctx-1", "m0")
    await answered(store, ALICE, "ctx-2", "m1")
    for n in range(2, 40):  # a turn every 90 s for an hour: long past the index's first deadline
        clock.advance(90)
        sweep_everything(store)
        claim = await store.begin_turn(ALICE, "ctx-1", f"m{n}", "more", "")
        assert claim.status is TurnStatus.NEW
        await store.complete_turn(ALICE, "ctx-1", f"m{n}", b"reply", close=False)
    assert [(info.context_id, info.turns) for info in await admin.conversations(ALICE)] == [("ctx-1", 39)]
    index = store.keyspace.entries[ALICE.digest_bytes]
    assert index[2::2] == (store_keys.conversation_key("acme", "ctx-1"),)  # ctx-2 was dropped with its life
    clock.advance(CACHE.conversation_ttl + CACHE.closed_ttl)
    sweep_everything(store)
    assert ALICE.digest_bytes not in store.keyspace.entries
    assert await admin.conversations(ALICE) == []


async def test_redis_index_lives_as_long_as_its_longest_conversation(
    redis_store: RedisStore, redis_client: aioredis.Redis
) -> None:
    index = store_keys.conv_index_key("acme", ALICE.digest_bytes, tag_of(ALICE))
    await answered(redis_store, ALICE, "ctx-1", "m1")
    conversation = store_keys.conv_key("acme", "ctx-1", tag_of(ALICE))
    assert await redis_client.ttl(index) == await redis_client.ttl(conversation) > 0
    # Closing one shortens its life, not the index's: a longer-lived one may share it.
    await answered(redis_store, ALICE, "ctx-2", "m2")
    await redis_store.begin_turn(ALICE, "ctx-2", "m3", "bye", "")
    await redis_store.complete_turn(ALICE, "ctx-2", "m3", b"farewell", close=True)
    assert await redis_client.ttl(index) >= await redis_client.ttl(conversation)
    closed = store_keys.conv_key("acme", "ctx-2", tag_of(ALICE))
    assert await redis_client.ttl(index) > await redis_client.ttl(closed)


async def test_redis_conversation_from_before_the_index_is_indexed_by_its_next_turn(
    redis_store: RedisStore, redis_client: aioredis.Redis, clock: ManualClock
) -> None:
    """A conversation an older gateway stored (no index, no opening time) is listed once it takes a turn.

    That turn moves it into the current layout, which keeps times from the opening one: the last
    turn's time stands in for the opening time it never had."""
    conversation = store_keys.conversation_key("acme", "ctx-old")
    last = str(int(clock() * 1000))
    await redis_client.hset(conversation, mapping={"o": ALICE.digest, "c": "0", "a": "1", "l": last})
    await redis_client.hset(conversation, "m:m1", b"Rold reply")
    await redis_client.expire(conversation, 600)
    admin = open_conversation_admin(redis_store, CACHE, ADAPTERS)
    assert await admin.conversations(ALICE) == []
    claim = await redis_store.begin_turn(ALICE, "ctx-old", "m2", "more", "")
    assert claim.status is TurnStatus.NEW
    await redis_store.complete_turn(ALICE, "ctx-old", "m2", b"reply", close=False)
    assert await admin.conversations(ALICE) == [
        ConversationInfo("ctx-old", opened_at=int(last) / 1000, turns=2, in_flight=0, closed=False)
    ]
