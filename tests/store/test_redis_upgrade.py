"""Conversations the previous release wrote on Redis survive the upgrade to the smaller layout (issue 17).

The previous release is the real one: ``gateway/`` as of ``b17dd54`` (main before the layout
changed), taken out of git into a temporary directory and run in a subprocess against the test's
Redis database (tests/support/releases.py). This release then serves those conversations, moving
them into the layout it writes by default (the tagged one, issue 20): a reply is replayed byte for
byte (§4.3), a first message retried without ``contextId`` finds its conversation, a turn still running
is still refused, ownership (§4.2), a closed conversation and a context's Brand user (§5.5) hold,
and the operator's listing and erasure see every conversation exactly once whichever layout it is in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gateway.config import CacheConfig
from gateway.protocol.messages import render_reply
from gateway.store import keys
from gateway.store.base import GrantCheck, Owner, TurnStatus
from gateway.store.factory import open_conversation_admin
from gateway.store.redis import RedisStore
from tests.support.pa import ManualClock
from tests.support.releases import (
    ALICE,
    CONVERSATIONS_WRITER,
    GRANT,
    START,
    USER_1,
    extract_release,
    run_release,
)

PREVIOUS_RELEASE = "b17dd54"
"""main's head before the layout changed: what a deployment runs when it upgrades."""
BOB = Owner("acme", "https://pa.example", "bob")
USER_2 = "2" * 32
TAG = keys.owner_tag(ALICE.digest)


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's ``gateway/`` package, from git."""
    return extract_release(PREVIOUS_RELEASE, tmp_path_factory.mktemp("previous-release"))


async def written_by_previous_release(
    root: Path, redis_url: str, redis_client: aioredis.Redis
) -> dict[str, bytes]:
    await redis_client.hset(GRANT, mapping={"o": ALICE.digest, "e": str(int(START) + 3600)})
    out = await run_release(root, CONVERSATIONS_WRITER, redis_url, str(START))
    assert await redis_client.exists("pact:acme:conv:ctx-a") == 1, "the previous release's layout"
    return {message: reply.encode() for message, reply in json.loads(out).items()}


@pytest.fixture
async def upgraded(
    previous_release: Path, redis_url: str, redis_client: aioredis.Redis, clock: ManualClock
) -> tuple[RedisStore, dict[str, bytes]]:
    replies = await written_by_previous_release(previous_release, redis_url, redis_client)
    clock.now = START + 5
    return RedisStore(CacheConfig(url=redis_url), clock=clock), replies


async def test_s4_3_replies_the_previous_release_stored_are_replayed_byte_for_byte(
    upgraded: tuple[RedisStore, dict[str, bytes]], redis_client: aioredis.Redis
) -> None:
    store, replies = upgraded
    try:
        for message in ("a1", "a2"):
            claim = await store.begin_turn(ALICE, "ctx-a", message, "hello", "unused")
            assert (claim.status, claim.reply) == (TurnStatus.REPLAY, replies[message])
        # The turn moved the conversation into this layout, once.
        assert await redis_client.exists("pact:acme:conv:ctx-a") == 0
        assert await redis_client.exists(keys.conv_key("acme", "ctx-a", TAG)) == 1
        assert (
            await store.begin_turn(ALICE, "ctx-a", "a3", "still running", "")
        ).status is TurnStatus.IN_FLIGHT
        claim = await store.begin_turn(ALICE, "ctx-a", "a4", "next", "")
        assert (claim.status, claim.new_conversation) == (TurnStatus.NEW, False)
        reply = render_reply("r-" + "cd" * 16, "ctx-a", "Answer to next")
        await store.complete_turn(ALICE, "ctx-a", "a4", reply, close=False)
        assert (await store.begin_turn(ALICE, "ctx-a", "a4", "next", "")).reply == reply
    finally:
        await store.close()


async def test_s4_3_a_first_message_retried_after_the_upgrade_finds_its_conversation(
    upgraded: tuple[RedisStore, dict[str, bytes]],
) -> None:
    store, replies = upgraded
    try:
        claim = await store.begin_turn(ALICE, None, "a1", "hello", "ctx-new")
        assert (claim.status, claim.context_id, claim.reply) == (TurnStatus.REPLAY, "ctx-a", replies["a1"])
        # A different text under the same messageId is a new conversation, as before the upgrade.
        claim = await store.begin_turn(ALICE, None, "a1", "something else", "ctx-other")
        assert (claim.status, claim.context_id) == (TurnStatus.NEW, "ctx-other")
    finally:
        await store.close()


async def test_s4_2_ownership_closing_and_s5_5_the_context_user_survive_the_upgrade(
    upgraded: tuple[RedisStore, dict[str, bytes]], redis_client: aioredis.Redis
) -> None:
    store, _ = upgraded
    try:
        assert (await store.begin_turn(BOB, "ctx-a", "x", "mine?", "")).status is TurnStatus.UNKNOWN_CONTEXT
        # Another's turn moves nothing: the conversation stays as it was until its owner's next turn.
        assert await redis_client.exists("pact:acme:conv:ctx-a") == 1
        assert (await store.begin_turn(ALICE, "ctx-b", "b2", "again", "")).status is TurnStatus.CLOSED
        other_user = GrantCheck(GRANT, USER_2)
        claim = await store.begin_turn(ALICE, "ctx-c", "c2", "as another", "", grant=other_user)
        assert claim.status is TurnStatus.USER_MISMATCH
        claim = await store.begin_turn(
            ALICE, "ctx-c", "c2", "as the same", "", grant=GrantCheck(GRANT, USER_1)
        )
        assert claim.status is TurnStatus.NEW
    finally:
        await store.close()


async def test_the_operator_lists_and_erases_conversations_of_both_layouts(
    upgraded: tuple[RedisStore, dict[str, bytes]], redis_client: aioredis.Redis
) -> None:
    store, _ = upgraded
    admin = open_conversation_admin(store, CacheConfig(), ())
    try:
        before = [
            (info.context_id, info.turns, info.in_flight, info.closed)
            for info in await admin.conversations(ALICE)
        ]
        assert sorted(before) == [("ctx-a", 2, 1, False), ("ctx-b", 1, 0, True), ("ctx-c", 1, 0, False)]
        await store.begin_turn(ALICE, "ctx-a", "a4", "moves it", "")  # ctx-a now in the new layout
        after = [(info.context_id, info.turns, info.in_flight) for info in await admin.conversations(ALICE)]
        assert sorted(after) == [("ctx-a", 2, 2), ("ctx-b", 1, 0), ("ctx-c", 1, 0)]
        assert await admin.close(ALICE, "ctx-c")
        assert (await store.begin_turn(ALICE, "ctx-c", "c3", "closed?", "")).status is TurnStatus.CLOSED
        erased = await admin.erase(ALICE, [])
        assert (erased.conversations, erased.replies, erased.retry_records) == (3, 4, 3)
        assert await admin.conversations(ALICE) == []
        left = [key async for key in redis_client.scan_iter("pact:acme:*")]
        left.sort()
        assert left == [
            GRANT.encode(),
            *(keys.conv_key("acme", context, TAG).encode() for context in ("ctx-a", "ctx-b", "ctx-c")),
        ]
        for key in left[1:]:
            assert await redis_client.hkeys(key) == [b"e"], "only the tombstone"
    finally:
        await store.close()
