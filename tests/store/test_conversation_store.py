"""The store's turn protocol (§4.2 ownership, §4.3 retries), against memory and the real Redis."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
import redis.asyncio as aioredis

from gateway.config import CacheConfig
from gateway.store import ConversationStore, Owner, TurnStatus, keys
from gateway.store.base import text_digest
from gateway.store.redis import RedisStore
from tests.store.conftest import MakeStore
from tests.support.pa import ManualClock
from tests.support.redis_layout import tag_of

ALICE = Owner("acme", "https://pa.example", "alice")
CONVERSATION = keys.conv_key("acme", "ctx-1", tag_of(ALICE))


async def test_s4_2_new_conversation_then_continue(store: ConversationStore) -> None:
    first = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    assert (first.status, first.context_id, first.new_conversation) == (TurnStatus.NEW, "ctx-1", True)
    await store.complete_turn(ALICE, "ctx-1", "m1", b"reply-1", close=False)
    second = await store.begin_turn(ALICE, "ctx-1", "m2", "more", "unused")
    assert (second.status, second.context_id, second.new_conversation) == (TurnStatus.NEW, "ctx-1", False)


@pytest.mark.parametrize(
    "intruder",
    [
        Owner("acme", "https://pa.example", "bob"),
        Owner("acme", "https://other-pa.example", "alice"),
        Owner("globex", "https://pa.example", "alice"),
    ],
    ids=["other-sub", "other-pa", "other-brand"],
)
async def test_s4_2_foreign_context_is_unknown(store: ConversationStore, intruder: Owner) -> None:
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"reply-1", close=False)
    claim = await store.begin_turn(intruder, "ctx-1", "m2", "hi", "unused")
    assert claim.status is TurnStatus.UNKNOWN_CONTEXT
    # Not even a stored reply leaks to another owner.
    replay = await store.begin_turn(intruder, "ctx-1", "m1", "hello", "unused")
    assert replay.status is TurnStatus.UNKNOWN_CONTEXT


async def test_s4_2_unknown_context(store: ConversationStore) -> None:
    claim = await store.begin_turn(ALICE, "nope", "m1", "hello", "unused")
    assert claim.status is TurnStatus.UNKNOWN_CONTEXT


async def test_s4_3_repeat_returns_stored_bytes(store: ConversationStore) -> None:
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    reply = b'{"message":{"parts":[{"text":"\xc3\xa9t\xc3\xa9"}]}}'
    await store.complete_turn(ALICE, "ctx-1", "m1", reply, close=False)
    claim = await store.begin_turn(ALICE, "ctx-1", "m1", "hello", "unused")
    assert (claim.status, claim.reply) == (TurnStatus.REPLAY, reply)


async def test_s4_3_repeat_while_in_flight(store: ConversationStore) -> None:
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")).status is TurnStatus.NEW
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")).status is TurnStatus.IN_FLIGHT


async def test_s4_3_in_flight_marker_expires_after_pending_ttl(
    store: ConversationStore, clock: ManualClock
) -> None:
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")
    clock.now += 11  # a gateway died mid-turn: its marker must not block the retry forever
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")).status is TurnStatus.NEW


async def test_s4_3_concurrent_duplicates_one_winner(store: ConversationStore) -> None:
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    claims = await asyncio.gather(*(store.begin_turn(ALICE, "ctx-1", "m2", "x", "u") for _ in range(50)))
    statuses = [c.status for c in claims]
    assert statuses.count(TurnStatus.NEW) == 1
    assert statuses.count(TurnStatus.IN_FLIGHT) == 49


async def test_s4_3_abort_releases_marker(store: ConversationStore) -> None:
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")
    await store.abort_turn(ALICE, "ctx-1", "m2", new_conversation=False)
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")).status is TurnStatus.NEW


async def test_s4_3_aborted_first_turn_forgets_the_conversation(store: ConversationStore) -> None:
    claim = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.abort_turn(ALICE, "ctx-1", "m1", new_conversation=claim.new_conversation)
    assert (await store.begin_turn(ALICE, "ctx-1", "m9", "x", "u")).status is TurnStatus.UNKNOWN_CONTEXT
    retry = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-2")
    assert (retry.status, retry.context_id) == (TurnStatus.NEW, "ctx-2")


async def test_s4_3_first_message_retried_without_context(store: ConversationStore) -> None:
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    in_flight = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-2")
    assert (in_flight.status, in_flight.context_id) == (TurnStatus.IN_FLIGHT, "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    replay = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-3")
    assert (replay.status, replay.context_id, replay.reply) == (TurnStatus.REPLAY, "ctx-1", b"r1")


async def test_s4_3_first_message_dedup_needs_same_text_owner_and_window(
    store: ConversationStore, clock: ManualClock
) -> None:
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    other_text = await store.begin_turn(ALICE, None, "m1", "something else", "ctx-2")
    assert (other_text.status, other_text.context_id) == (TurnStatus.NEW, "ctx-2")
    bob = Owner("acme", "https://pa.example", "bob")
    assert (await store.begin_turn(bob, None, "m1", "hello", "ctx-3")).context_id == "ctx-3"


async def test_s4_2_closed_conversation(store: ConversationStore) -> None:
    await store.begin_turn(ALICE, None, "m1", "bye", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"farewell", close=True)
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")).status is TurnStatus.CLOSED
    # The turn that closed it can still be retried (§4.3).
    replay = await store.begin_turn(ALICE, "ctx-1", "m1", "bye", "u")
    assert (replay.status, replay.reply) == (TurnStatus.REPLAY, b"farewell")


async def test_s4_2_idle_conversation_expires_to_closed(store: ConversationStore, clock: ManualClock) -> None:
    await store.begin_turn(ALICE, None, "m1", "hi", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    clock.now += 101
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")).status is TurnStatus.CLOSED


async def test_redis_keys_are_prefixed_per_brand_and_expire(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    config = CacheConfig(url=redis_url, conversation_ttl=100, closed_ttl=1000)
    store = RedisStore(config)
    try:
        await store.begin_turn(ALICE, None, "m1", "hi", "ctx-1")
        await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
        stored = [k if isinstance(k, bytes) else k.encode() for k in await redis_client.keys("*")]
        assert all(k.startswith(b"pact:acme:") for k in stored)
        ttl = await redis_client.ttl(CONVERSATION)
        assert 1000 < ttl <= 1100
        assert b"alice" not in b" ".join(stored)
        values = await redis_client.hgetall(CONVERSATION)
        assert all(b"alice" not in v for v in values.values())
        await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=True)
        assert await redis_client.ttl(CONVERSATION) <= 1000
    finally:
        await store.close()


def test_digests_keep_the_form_redis_already_holds() -> None:
    """Raw bytes in memory now, but the same 128 bits in hex as before: stored Redis keys still match."""
    material = "\x00".join((ALICE.brand_id, ALICE.issuer, ALICE.sub)).encode()
    assert ALICE.digest == hashlib.sha256(material).hexdigest()[:32]
    assert ALICE.digest_bytes == bytes.fromhex(ALICE.digest)
    assert text_digest("hello").hex() == hashlib.sha256(b"hello").hexdigest()[:32]


# --- §4.3 with §4.2: a first message retried after its conversation closed (issue 12, row 9) ------


async def test_s4_3_first_message_retried_after_its_conversation_closed_unanswered_opens_a_new_one(
    store: ConversationStore,
) -> None:
    """Its conversation was kept but never answered it (a §5.5 step-up released the turn), then closed."""
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.abort_turn(ALICE, "ctx-1", "m1", new_conversation=False)  # the step-up keeps ctx-1
    await store.begin_turn(ALICE, "ctx-1", "m2", "bye", "unused")
    await store.complete_turn(ALICE, "ctx-1", "m2", b"farewell", close=True)

    again = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-2")

    assert (again.status, again.context_id, again.new_conversation) == (TurnStatus.NEW, "ctx-2", True)
    # Its own retries now find ctx-2, not ctx-1 and not a third conversation.
    repeat = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-3")
    assert (repeat.status, repeat.context_id) == (TurnStatus.IN_FLIGHT, "ctx-2")
    await store.complete_turn(ALICE, "ctx-2", "m1", b"r-ctx-2", close=False)
    replay = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-4")
    assert (replay.status, replay.context_id, replay.reply) == (TurnStatus.REPLAY, "ctx-2", b"r-ctx-2")


async def test_s4_3_first_message_answered_then_closed_still_replays_its_reply(
    store: ConversationStore,
) -> None:
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    await store.begin_turn(ALICE, "ctx-1", "m2", "bye", "unused")
    await store.complete_turn(ALICE, "ctx-1", "m2", b"farewell", close=True)

    replay = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-2")

    assert (replay.status, replay.context_id, replay.reply) == (TurnStatus.REPLAY, "ctx-1", b"r1")


async def test_s4_3_first_message_retried_after_its_conversation_idled_out_opens_a_new_one(
    make_store: MakeStore, clock: ManualClock
) -> None:
    """An idle TTL shorter than the retry window: the conversation is CLOSED while the record lives."""
    store = await make_store(conversation_ttl=10, retry_window=60)
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.abort_turn(ALICE, "ctx-1", "m1", new_conversation=False)
    clock.now += 11

    again = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-2")

    assert (again.status, again.context_id) == (TurnStatus.NEW, "ctx-2")


async def test_s4_3_a_repeat_of_a_turn_still_running_is_in_flight_even_once_closed(
    store: ConversationStore,
) -> None:
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "slow", "u")).status is TurnStatus.NEW
    await store.begin_turn(ALICE, "ctx-1", "m3", "bye", "u")
    await store.complete_turn(ALICE, "ctx-1", "m3", b"farewell", close=True)

    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "slow", "u")).status is TurnStatus.IN_FLIGHT
    assert (await store.begin_turn(ALICE, "ctx-1", "m4", "new", "u")).status is TurnStatus.CLOSED


async def test_s4_3_abort_after_the_reply_was_stored_keeps_it(store: ConversationStore) -> None:
    """A completion that failed on the way back may have been stored: the release must not undo it."""
    first = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    await store.abort_turn(ALICE, "ctx-1", "m1", new_conversation=first.new_conversation)

    replay = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-2")
    assert (replay.status, replay.context_id, replay.reply) == (TurnStatus.REPLAY, "ctx-1", b"r1")
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")).status is TurnStatus.NEW
