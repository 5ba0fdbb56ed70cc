"""Issue 17: one person's conversations cost O(1) each, and ``cache.max_entries`` bounds the memory store.

Costs are counted, never timed: the bytes a new conversation allocates at its peak (tracemalloc,
which an index rebuilt per conversation shows growing with the person's count), and the keys the
bound's eviction looks at. The bound's rule: expired and closed entries go first; a live
conversation or a stored reply a retry may still ask for is never dropped, the new conversation
is refused instead (``STORE_FULL``), seen by the agent as a bare 429, by the operator in the log
and on ``/metrics``.
"""

from __future__ import annotations

import logging
import statistics
import tracemalloc
from collections import deque
from typing import Any

import orjson
import pytest

from gateway.config import CacheConfig
from gateway.handlers.state import METRICS
from gateway.ops.metrics import Metrics
from gateway.store import Owner, TurnStatus
from gateway.store import keys as store_keys
from gateway.store.admin_memory import MemoryConversationAdmin
from gateway.store.gcra import Hit, Rule
from gateway.store.memory import MemoryKeyspace, MemoryStore
from tests.ops.test_rate_limits import bare_429, ok
from tests.support.gateway import MakeGateway
from tests.support.pa import ManualClock
from tests.support.waiting import until

ALICE = Owner("acme", "https://pa.example", "alice")
SETTINGS: dict[str, Any] = {
    "conversation_ttl": 100,
    "closed_ttl": 1000,
    "retry_window": 30,
    "pending_ttl": 10,
}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_800_000_000.0)


async def opened(
    store: MemoryStore, owner: Owner, tag: str, *, answer: bool = True, close: bool = False
) -> str:
    """One new conversation of ``owner``, answered (or left in flight); its ``contextId``."""
    claim = await store.begin_turn(owner, None, f"m-{tag}", f"hello {tag}", f"ctx-{tag}")
    assert claim.status is TurnStatus.NEW, claim
    if answer:
        await store.complete_turn(owner, claim.context_id, f"m-{tag}", f"reply {tag}".encode(), close=close)
    return claim.context_id


async def peak_bytes_per_new_conversation(store: MemoryStore, held: int, samples: int = 41) -> float:
    """The median over ``samples`` new conversations of what one allocates at its peak, once
    ALICE holds ``held`` conversations."""
    for index in range(held):
        await opened(store, ALICE, f"fill-{index}", answer=False)
    peaks: list[int] = []
    tracemalloc.start()
    try:
        for index in range(samples):
            current, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            await opened(store, ALICE, f"probe-{held}-{index}", answer=False)
            peaks.append(tracemalloc.get_traced_memory()[1] - current)
    finally:
        tracemalloc.stop()
    return statistics.median(peaks)


async def test_a_new_conversation_costs_the_same_at_a_persons_1000th_and_100000th(clock: ManualClock) -> None:
    """Issue 17 row 2: O(1) per new conversation per person. The old index, one tuple rebuilt per
    new conversation, allocated 16 bytes per conversation held each time (1.6 MB at 100,000)."""
    small = MemoryStore(CacheConfig(**SETTINGS), clock=clock)
    large = MemoryStore(CacheConfig(**SETTINGS), clock=clock)
    at_1k = await peak_bytes_per_new_conversation(small, 1_000)
    at_100k = await peak_bytes_per_new_conversation(large, 100_000)
    assert at_100k <= 1.2 * at_1k, (at_1k, at_100k)
    assert at_100k < 4096, at_100k  # a few records and keys, nothing in proportion to the 100,000
    # Still every conversation listed: the index lost none of them growing.
    listed = await MemoryConversationAdmin(large.keyspace, large._config, ()).conversations(ALICE)
    assert len(listed) == 100_041
    await small.close()
    await large.close()


async def test_a_large_index_drops_its_dead_conversations_and_lists_the_live(clock: ManualClock) -> None:
    store = MemoryStore(CacheConfig(**SETTINGS), clock=clock)
    admin = MemoryConversationAdmin(store.keyspace, store._config, ())
    early = [await opened(store, ALICE, f"early-{index}") for index in range(20)]
    clock.advance(SETTINGS["conversation_ttl"] + SETTINGS["closed_ttl"] + 1)  # all of them gone
    late = [await opened(store, ALICE, f"late-{index}") for index in range(50)]
    index = store.keyspace.entries[ALICE.digest_bytes]
    held = index[2]
    assert type(held) is dict
    assert len(held) <= 2 * 50  # pruned as it doubled: the early ones left it
    assert not {store_keys.conversation_key("acme", context) for context in early} & held.keys()
    assert sorted(info.context_id for info in await admin.conversations(ALICE)) == sorted(late)
    await store.close()


class CountingRing(deque[Any]):
    """The sweep's ring, counting the keys taken off its front."""

    taken = 0

    def popleft(self) -> Any:
        self.taken += 1
        return super().popleft()


async def keys_looked_at_by_a_refusal(clock: ManualClock, live: int) -> int:
    """A store held full by ``live`` live conversations: the keys one refused conversation looks at."""
    store = MemoryStore(CacheConfig(**SETTINGS, max_entries=3 * live), clock=clock)
    for index in range(live):
        await opened(store, Owner("acme", "https://pa.example", f"user-{index}"), f"{index}")
    ring = CountingRing(store.keyspace._ring)
    store.keyspace._ring = ring
    claim = await store.begin_turn(ALICE, None, "m-new", "hello", "ctx-new")
    assert claim.status is TurnStatus.STORE_FULL
    await store.close()
    return ring.taken


async def test_making_room_looks_at_the_same_few_keys_at_1000_and_20000_entries(clock: ManualClock) -> None:
    small = await keys_looked_at_by_a_refusal(clock, 1_000)
    large = await keys_looked_at_by_a_refusal(clock, 20_000)
    assert small == large == MemoryKeyspace.EVICT_SCAN


async def test_expired_and_closed_entries_go_first_at_the_bound(clock: ManualClock) -> None:
    metrics = Metrics()
    store = MemoryStore(CacheConfig(**SETTINGS, max_entries=9), clock=clock, observer=metrics)
    bob = Owner("acme", "https://pa.example", "bob")
    closed = await opened(store, ALICE, "closed", close=True)
    await opened(store, ALICE, "open")
    await opened(store, bob, "bob")
    assert len(store.keyspace.entries) == 8  # 3 records, 3 first-message records, 2 indexes
    clock.advance(SETTINGS["retry_window"] + 1)  # the first-message records expire; nothing is swept
    for index in range(2):
        await opened(store, bob, f"later-{index}")
    evictions = metrics.registry.get_sample_value
    assert evictions("pact_store_evictions_total", {"reason": "expired"}) == 3.0
    # The closed conversation (its reply older than the retry window) made room; the open ones stay.
    assert evictions("pact_store_evictions_total", {"reason": "closed"}) == 1.0
    claim = await store.begin_turn(ALICE, closed, "m-2", "again", "")
    assert claim.status is TurnStatus.UNKNOWN_CONTEXT
    assert (await store.begin_turn(ALICE, "ctx-open", "m-2", "more", "")).status is TurnStatus.NEW
    assert len(store.keyspace.entries) <= 9
    await store.close()


async def test_a_stored_reply_within_retry_window_survives_the_bound(clock: ManualClock) -> None:
    store = MemoryStore(CacheConfig(**SETTINGS, max_entries=6), clock=clock)
    # Closed at once: only the retry window keeps its reply from being dropped for room.
    context = await opened(store, ALICE, "first", close=True)
    await opened(store, ALICE, "second")
    limit = Hit("pact:acme:rl:per_user:alice", Rule(1, 1))
    refused = await store.begin_turn(ALICE, None, "m-third", "third", "ctx-third", limits=[limit])
    assert refused.status is TurnStatus.STORE_FULL
    # Nothing charged: the same limit still lets one turn through.
    retried = await store.begin_turn(ALICE, None, "m-first", "hello first", "ctx-other", limits=[limit])
    assert retried.status is TurnStatus.REPLAY
    assert (retried.context_id, retried.reply) == (context, b"reply first")
    # A turn of an open conversation is never refused for room.
    assert (await store.begin_turn(ALICE, "ctx-second", "m-2", "more", "")).status is TurnStatus.NEW
    await store.close()


async def test_a_running_turn_keeps_its_closed_conversation(clock: ManualClock) -> None:
    # In flight longer than the retry window: the turn outlives it.
    store = MemoryStore(CacheConfig(**{**SETTINGS, "pending_ttl": 60}, max_entries=4), clock=clock)
    context = await opened(store, ALICE, "first")
    assert (await store.begin_turn(ALICE, context, "m-2", "more", "")).status is TurnStatus.NEW
    admin = MemoryConversationAdmin(store.keyspace, store._config, ())
    assert await admin.close(ALICE, context)  # closed while its second turn runs
    clock.advance(SETTINGS["retry_window"] + 1)
    assert (await store.begin_turn(ALICE, None, "m-new", "new", "ctx-new")).status is TurnStatus.STORE_FULL
    await store.complete_turn(ALICE, context, "m-2", b"late reply", close=False)
    assert (await store.begin_turn(ALICE, context, "m-2", "more", "")).reply == b"late reply"
    await store.close()


async def test_a_full_store_refuses_a_new_conversation_with_a_bare_429(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """What each side sees: the agent a 429 with Retry-After, the operator a log line and the metrics;
    the conversation already open goes on, and its first message's retry is still answered."""

    def bounded(raw: dict[str, Any]) -> None:
        # The first conversation's 3 entries (record, first message, index); a second needs 3 more.
        raw["cache"]["max_entries"] = 5

    gw = await make_gateway(edit=bounded)
    first = await gw.send("Hi, where is my order?", message_id="m-1")
    await ok(first)
    context = orjson.loads(await first.read())["message"]["contextId"]
    with caplog.at_level(logging.WARNING, logger="pact_gateway.turns"):
        assert await bare_429(await gw.send("A new question", message_id="m-2")) == 60
    assert "store full: 1 new conversation(s) refused with 429" in caplog.text
    assert len(gw.bot.calls) == 1
    await ok(await gw.send("And my refund?", message_id="m-3", context_id=context))
    replay = await gw.send("Hi, where is my order?", message_id="m-1")
    await ok(replay)
    assert orjson.loads(await replay.read())["message"]["contextId"] == context
    app = gw.client.app
    assert app is not None
    sample = app[METRICS].registry.get_sample_value
    assert sample("pact_rate_limited_total", {"brand": "acme", "limit": "store_full"}) == 1.0
    await until(lambda: sample("pact_store_max_entries") == 5.0)
    assert sample("pact_store_entries") == 3.0
