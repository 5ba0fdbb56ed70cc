"""A rolling upgrade from the previous release to the tagged layout, on one Redis (issue 20).

The previous release is the real one: ``gateway/`` as of ``6ad6c1f`` (the last landed release, whose
layout main wrote before issue 20), taken out of git (tests/support/releases.py) and run in
subprocesses beside this release on the test's Redis database, in the order an operator rolls:

1. replicas of the previous release serve (they write conversations);
2. replicas of this release join with ``cache.key_layout: previous``: they serve what the previous
   release wrote, and the previous release's replicas, still serving, read what they wrote;
3. once no previous replica is left, this release switches to ``tagged`` (a rolling restart): it
   serves everything written before, moving each conversation into the tagged layout as its owner's
   next turn reaches it: a reply replayed byte for byte (§4.3), a first message retried without
   ``contextId``, a turn still in flight, ownership (§4.2), a closed conversation, the context's Brand
   user (§5.5), and the operator's listing, each conversation once.
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
    PREVIOUS_RELEASE,
    START,
    USER_1,
    extract_release,
    run_release,
)

BOB = Owner("acme", "https://pa.example", "bob")
USER_2 = "2" * 32
TAG = keys.owner_tag(ALICE.digest)


# Step 2, by the previous release: what it answers for what this release wrote (ctx-n, opened by
# message n1) and for ctx-a, which this release served: one JSON line of verdicts.
_READER = """
import asyncio, json, sys
from gateway.config import CacheConfig
from gateway.store.base import Owner
from gateway.store.factory import open_conversation_admin
from gateway.store.redis import RedisStore

async def main(url, now):
    store = RedisStore(CacheConfig(url=url), clock=lambda: now)
    alice = Owner("acme", "https://pa.example", "alice")
    found = {}
    claim = await store.begin_turn(alice, "ctx-n", "n1", "opened by the new release", "")
    found["replay"] = [claim.status.value, claim.reply.decode()]
    claim = await store.begin_turn(alice, None, "n1", "opened by the new release", "ctx-other")
    found["retried"] = [claim.status.value, claim.context_id, claim.reply.decode()]
    claim = await store.begin_turn(alice, "ctx-a", "a4", "served by the new release", "")
    found["a4"] = [claim.status.value, claim.reply.decode()]
    admin = open_conversation_admin(store, CacheConfig(url=url), ())
    found["listed"] = sorted(info.context_id for info in await admin.conversations(alice))
    await store.close()
    print(json.dumps(found))

asyncio.run(main(sys.argv[1], float(sys.argv[2])))
"""


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's ``gateway/`` package, from git."""
    return extract_release(PREVIOUS_RELEASE, tmp_path_factory.mktemp("release-6ad6c1f"))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=START + 5)


async def test_previous_and_this_release_serve_side_by_side_then_tagged_serves_everything(
    previous_release: Path, redis_url: str, redis_client: aioredis.Redis, clock: ManualClock
) -> None:
    await redis_client.hset(GRANT, mapping={"o": ALICE.digest, "e": str(int(START) + 3600)})
    replies = {
        message: reply.encode()
        for message, reply in json.loads(
            await run_release(previous_release, CONVERSATIONS_WRITER, redis_url, str(START))
        ).items()
    }
    assert await redis_client.exists(keys.conv_key("acme", "ctx-a")) == 1, "the previous release's layout"

    # Step 2: this release, writing the previous layout, beside the previous release.
    beside = RedisStore(CacheConfig(url=redis_url, key_layout="previous"), clock=clock)
    try:
        claim = await beside.begin_turn(ALICE, "ctx-a", "a1", "hello", "")
        assert (claim.status, claim.reply) == (TurnStatus.REPLAY, replies["a1"])
        claim = await beside.begin_turn(ALICE, "ctx-a", "a4", "served by the new release", "")
        assert claim.status is TurnStatus.NEW
        replies["a4"] = render_reply("r-" + "cd" * 16, "ctx-a", "Answer to a4")
        await beside.complete_turn(ALICE, "ctx-a", "a4", replies["a4"], close=False)
        claim = await beside.begin_turn(ALICE, None, "n1", "opened by the new release", "ctx-n")
        assert (claim.status, claim.context_id) == (TurnStatus.NEW, "ctx-n")
        replies["n1"] = render_reply("r-" + "ef" * 16, "ctx-n", "Answer to n1")
        await beside.complete_turn(ALICE, "ctx-n", "n1", replies["n1"], close=False)
    finally:
        await beside.close()
    written = [key async for key in redis_client.scan_iter("pact:acme:*")]
    assert not [key for key in written if key.startswith(b"pact:acme:{")], "only the previous release's keys"
    read_back = json.loads(await run_release(previous_release, _READER, redis_url, str(START + 6)))
    assert read_back == {
        "replay": ["replay", replies["n1"].decode()],
        "retried": ["replay", "ctx-n", replies["n1"].decode()],
        "a4": ["replay", replies["a4"].decode()],
        "listed": ["ctx-a", "ctx-b", "ctx-c", "ctx-n"],
    }

    # Step 3: this release, tagged, serves all of it.
    clock.now = START + 10
    tagged = RedisStore(CacheConfig(url=redis_url), clock=clock)
    admin = open_conversation_admin(tagged, CacheConfig(url=redis_url), ())
    try:
        listed = [
            (info.context_id, info.turns, info.in_flight, info.closed)
            for info in await admin.conversations(ALICE)
        ]
        assert sorted(listed) == [
            ("ctx-a", 3, 1, False),
            ("ctx-b", 1, 0, True),
            ("ctx-c", 1, 0, False),
            ("ctx-n", 1, 0, False),
        ]
        for message in ("a1", "a2", "a4"):
            claim = await tagged.begin_turn(ALICE, "ctx-a", message, "", "")
            assert (claim.status, claim.reply) == (TurnStatus.REPLAY, replies[message])
        assert await redis_client.exists(keys.conv_key("acme", "ctx-a")) == 0
        assert await redis_client.exists(keys.conv_key("acme", "ctx-a", TAG)) == 1, "moved by Alice's turn"
        claim = await tagged.begin_turn(ALICE, "ctx-a", "a3", "still running", "")
        assert claim.status is TurnStatus.IN_FLIGHT
        claim = await tagged.begin_turn(ALICE, None, "n1", "opened by the new release", "ctx-other")
        assert (claim.status, claim.context_id, claim.reply) == (TurnStatus.REPLAY, "ctx-n", replies["n1"])
        claim = await tagged.begin_turn(ALICE, None, "a1", "hello", "ctx-other")
        assert (claim.status, claim.context_id, claim.reply) == (TurnStatus.REPLAY, "ctx-a", replies["a1"])
        assert (await tagged.begin_turn(BOB, "ctx-c", "x", "mine?", "")).status is TurnStatus.UNKNOWN_CONTEXT
        assert await redis_client.exists(keys.conv_key("acme", "ctx-c")) == 1, "another's turn moves nothing"
        assert (await tagged.begin_turn(ALICE, "ctx-b", "b2", "again", "")).status is TurnStatus.CLOSED
        as_another = await tagged.begin_turn(
            ALICE, "ctx-c", "c2", "as another", "", grant=GrantCheck(GRANT, USER_2)
        )
        assert as_another.status is TurnStatus.USER_MISMATCH
        as_same = await tagged.begin_turn(
            ALICE, "ctx-c", "c2", "as the same", "", grant=GrantCheck(GRANT, USER_1)
        )
        assert as_same.status is TurnStatus.NEW
        after = [(info.context_id, info.turns, info.in_flight) for info in await admin.conversations(ALICE)]
        assert sorted(after) == [("ctx-a", 3, 1), ("ctx-b", 1, 0), ("ctx-c", 1, 1), ("ctx-n", 1, 0)]
        erased = await admin.erase(ALICE, [])
        assert (erased.conversations, erased.replies) == (4, 6)
        assert await admin.conversations(ALICE) == []
        # Whichever layout held them, nothing of Alice's is left but the tombstones, in the tagged one.
        left = sorted([key async for key in redis_client.scan_iter("pact:acme:*")])
        tombstones = [
            keys.conv_key("acme", context, TAG).encode() for context in ("ctx-a", "ctx-b", "ctx-c", "ctx-n")
        ]
        assert left == sorted([GRANT.encode(), *tombstones])
        for key in tombstones:
            assert await redis_client.hkeys(key) == [b"e"]
    finally:
        await tagged.close()


async def test_replicas_of_both_settings_serve_one_conversation_side_by_side(
    redis_url: str, redis_client: aioredis.Redis, clock: ManualClock
) -> None:
    """During the switch to ``tagged`` (step 3's rolling restart) one conversation's turns reach
    replicas of both settings: each moves it into the layout it writes, and a reply, a release or a
    close lands wherever it is by then; each conversation is listed once."""
    tagged = RedisStore(CacheConfig(url=redis_url), clock=clock)
    previous = RedisStore(CacheConfig(url=redis_url, key_layout="previous"), clock=clock)
    admin = open_conversation_admin(tagged, CacheConfig(url=redis_url), ())
    try:
        assert (await tagged.begin_turn(ALICE, None, "m1", "hello", "ctx-1")).status is TurnStatus.NEW
        # While the tagged replica runs m1, a previous-setting replica takes m2: it moves the conversation.
        assert (await previous.begin_turn(ALICE, "ctx-1", "m2", "more", "")).status is TurnStatus.NEW
        assert await redis_client.exists(keys.conv_key("acme", "ctx-1", TAG)) == 0
        await tagged.complete_turn(ALICE, "ctx-1", "m1", b"reply 1", close=False)
        await tagged.abort_turn(ALICE, "ctx-1", "m2", new_conversation=False)
        assert await redis_client.exists(keys.conv_key("acme", "ctx-1", TAG)) == 0, "stored where it was"
        claim = await previous.begin_turn(ALICE, "ctx-1", "m1", "hello", "")
        assert (claim.status, claim.reply) == (TurnStatus.REPLAY, b"reply 1")
        assert (await previous.begin_turn(ALICE, "ctx-1", "m2", "more", "")).status is TurnStatus.NEW
        claim = await tagged.begin_turn(ALICE, None, "m1", "hello", "ctx-other")
        assert (claim.status, claim.context_id, claim.reply) == (TurnStatus.REPLAY, "ctx-1", b"reply 1")
        assert await redis_client.exists(keys.conv_key("acme", "ctx-1", TAG)) == 1, "moved back"
        await previous.complete_turn(ALICE, "ctx-1", "m2", b"reply 2", close=True)
        listed = [(info.context_id, info.turns, info.closed) for info in await admin.conversations(ALICE)]
        assert listed == [("ctx-1", 2, True)]
        assert (await previous.begin_turn(ALICE, "ctx-1", "m3", "closed?", "")).status is TurnStatus.CLOSED
    finally:
        await tagged.close()
        await previous.close()
