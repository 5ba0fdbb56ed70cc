"""A begin-turn whose outcome is unknown leaves no in-flight marker behind (issue 12, row 5).

The store's connection goes through a :class:`RedisProxy` to the test Redis, so a test can stall
that one connection as a bad network path would: the script reaches Redis but its answer does
not come back, or the script itself is held and reaches Redis only later. Either way the claim
fails with ``StoreError`` after ``cache.timeout``, and a retry of the same ``messageId`` must run
the turn, not be told for ``pending_ttl`` that it is still being processed (§4.3).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis

from gateway.config import CacheConfig
from gateway.store import Owner, StoreError, TurnStatus
from gateway.store.redis import LateOutcome, RedisStore
from tests.support.pa import ManualClock
from tests.support.redis_layout import conversation_key
from tests.support.redis_servers import RedisProxy, free_port
from tests.support.waiting import until

ALICE = Owner("acme", "https://pa.example", "alice")
TIMEOUT = 0.5
"""``cache.timeout`` here: how long a stalled claim waits before it fails."""


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[RedisProxy]:
    """A proxy in front of the test Redis (only its own connections stall, never the server)."""
    proxy = RedisProxy(urlsplit(redis_url).port or 6379)
    await proxy.start()
    yield proxy
    await proxy.stop()


class Releases:
    """What became of the releases the store tried again in the background (as the metrics count it)."""

    def __init__(self) -> None:
        self.outcomes: Counter[LateOutcome] = Counter()

    def late_release(self, outcome: LateOutcome) -> None:
        self.outcomes[outcome] += 1


@pytest.fixture
def releases() -> Releases:
    return Releases()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_800_000_000.0)


@pytest.fixture
async def store(
    proxy: RedisProxy, redis_url: str, releases: Releases, clock: ManualClock
) -> AsyncIterator[RedisStore]:
    db = int(urlsplit(redis_url).path.lstrip("/") or "0")
    config = CacheConfig(url=proxy.url(db), timeout=TIMEOUT, pending_ttl=60)
    backend = RedisStore(config, clock=clock, release_observer=releases)
    yield backend
    await backend.close()


async def opened(store: RedisStore) -> None:
    """ctx-1 with one answered turn, so later turns continue it."""
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)


async def test_a_claim_whose_answer_never_came_is_released(store: RedisStore, proxy: RedisProxy) -> None:
    await opened(store)
    proxy.stall_replies()  # the script runs on Redis; its answer stays on the stuck path

    with pytest.raises(StoreError, match="TimeoutError"):
        await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")

    retry = await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")
    assert (retry.status, retry.context_id) == (TurnStatus.NEW, "ctx-1")


async def test_a_first_message_whose_claim_answer_never_came_is_released(
    store: RedisStore, proxy: RedisProxy, redis_client: aioredis.Redis
) -> None:
    await store.ping()  # the connection that will stall is open already
    proxy.stall_replies()

    with pytest.raises(StoreError, match="TimeoutError"):
        await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")

    # The conversation it opened and its first-message record are gone with the marker.
    assert await conversation_key(redis_client, "acme", "ctx-1") is None
    retry = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-2")
    assert (retry.status, retry.context_id, retry.new_conversation) == (TurnStatus.NEW, "ctx-2", True)


async def test_a_claim_that_reaches_redis_after_its_release_claims_nothing(
    store: RedisStore, proxy: RedisProxy
) -> None:
    await opened(store)
    proxy.stall_requests()  # the script itself is held on the stuck path

    with pytest.raises(StoreError, match="TimeoutError"):
        await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")
    stuck = proxy.links[0]
    answered = stuck.replies
    proxy.release()  # the held script reaches Redis now, after the release
    await until(lambda: stuck.replies > answered)

    retry = await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")
    assert (retry.status, retry.context_id) == (TurnStatus.NEW, "ctx-1")


async def test_a_released_claim_leaves_a_marker_of_another_attempt_alone(
    store: RedisStore, proxy: RedisProxy
) -> None:
    """The release names its own attempt: a duplicate that lost to a running turn must not free it."""
    await opened(store)
    running = await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")
    assert running.status is TurnStatus.NEW
    proxy.stall_replies()

    with pytest.raises(StoreError, match="TimeoutError"):
        await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")  # would be IN_FLIGHT

    again = await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")
    assert again.status is TurnStatus.IN_FLIGHT


def cut_off(proxy: RedisProxy) -> int:
    """Redis out of reach through ``proxy``: the connection open now stalls, new ones are refused (as
    a killed primary's are). The port it forwarded to, for :func:`reconnected`."""
    proxy.stall_requests()
    target, proxy.target_port = proxy.target_port, free_port()
    return target


async def test_a_release_that_failed_is_sent_again_until_redis_answers(
    store: RedisStore, proxy: RedisProxy, releases: Releases
) -> None:
    """Issue 27, item 2: a turn's release that fails (a failover) is not dropped, or its marker would
    answer every retry "still being processed" until ``pending_ttl`` (60 s here): it is tried again
    in the background, and goes once Redis answers again."""
    await opened(store)
    running = await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")
    assert running.status is TurnStatus.NEW
    target = cut_off(proxy)

    with pytest.raises(StoreError):
        await store.abort_turn(ALICE, "ctx-1", "m2", new_conversation=False)

    proxy.target_port = target
    await until(lambda: releases.outcomes["released"] == 1, limit=10.0)
    retry = await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")
    assert (retry.status, retry.context_id) == (TurnStatus.NEW, "ctx-1")


async def test_a_claims_release_that_failed_is_sent_again_until_redis_answers(
    store: RedisStore, proxy: RedisProxy, releases: Releases
) -> None:
    """The same for a claim whose answer never came (its outcome unknown): its release by token."""
    await opened(store)
    proxy.stall_replies()  # the claim runs on Redis; its answer stays on the stuck path
    target, proxy.target_port = proxy.target_port, free_port()  # and its release finds no Redis

    with pytest.raises(StoreError, match="TimeoutError"):
        await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")

    assert releases.outcomes == {}  # not released yet
    proxy.target_port = target
    await until(lambda: releases.outcomes["released"] == 1, limit=10.0)
    retry = await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")
    assert (retry.status, retry.context_id) == (TurnStatus.NEW, "ctx-1")


async def test_a_late_release_leaves_the_marker_of_a_claim_made_after_its_own_lapsed(
    store: RedisStore, proxy: RedisProxy, releases: Releases, clock: ManualClock
) -> None:
    """A release by ``messageId`` alone, sent late, removes only a marker that may be its turn's (a
    deadline at most ``pending_ttl`` after it failed): a retry that claimed the message once the old
    marker lapsed keeps its own."""
    await opened(store)
    await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")
    target = cut_off(proxy)
    with pytest.raises(StoreError):
        await store.abort_turn(ALICE, "ctx-1", "m2", new_conversation=False)

    clock.advance(61)  # the first marker lapsed; a retry claims the message anew
    proxy.target_port = target
    retry = await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")
    assert retry.status is TurnStatus.NEW
    await until(lambda: releases.outcomes["released"] == 1, limit=10.0)

    again = await store.begin_turn(ALICE, "ctx-1", "m2", "where is it?", "unused")
    assert again.status is TurnStatus.IN_FLIGHT
